// draw_graph: walks the backward graph from a tensor (explicit stack, each node once),
// describes each op and leaf, and writes Graphviz DOT with one cluster per module.
#include "core/graph_draw.h"

#include <spawn.h>
#include <sys/wait.h>

#include <fcntl.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/ops.h"

extern char** environ;

namespace ember {

namespace {

double norm_or_none(const Tensor& g) {
  if (!g.defined()) return -1;
  NoGradGuard no_grad;
  return norm(g.detach().to(kFloat64)).item();
}

// The share of rows along dim whose largest element is above threshold, in a dense tensor
// of shape `shape` starting at data. A row of zeros (a query every key of which is
// masked) does not count as saturated.
template <class T>
double saturated_share(const T* data, const Shape& shape, int dim, double threshold) {
  int64_t outer = 1, n = shape[dim], inner = 1;
  for (int d = 0; d < dim; d++) outer *= shape[d];
  for (int d = dim + 1; d < (int)shape.size(); d++) inner *= shape[d];
  const int64_t rows = outer * inner;
  if (rows == 0 || n == 0) return 0;
  int64_t saturated = 0;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      const T* row = data + o * n * inner + i;
      double top = 0;
      for (int64_t j = 0; j < n; j++) top = std::max(top, (double)row[j * inner]);
      if (top > threshold) saturated++;
    }
  return (double)saturated / (double)rows;
}

double probs_saturation(const Node& n, double threshold) {
  if (n.probs_dim < 0 || n.released || n.saved.empty()) return -1;
  const SavedVersion& s = n.saved[0];
  if (n.probs_dim >= (int)s.shape.size() || !s.storage) return -1;
  const size_t need = (size_t)numel_of(s.shape) * dtype_size(s.dtype);
  if (s.storage->nbytes < need) return -1;
  if (s.dtype == DType::Float32)
    return saturated_share(static_cast<const float*>(s.storage->data), s.shape, n.probs_dim, threshold);
  if (s.dtype == DType::Float64)
    return saturated_share(static_cast<const double*>(s.storage->data), s.shape, n.probs_dim, threshold);
  return -1;
}

int64_t saved_bytes(const Node& n) {
  std::unordered_set<const Storage*> seen;
  int64_t bytes = 0;
  for (const SavedVersion& s : n.saved)
    if (s.storage && seen.insert(s.storage.get()).second) bytes += (int64_t)s.storage->nbytes;
  return bytes;
}

std::string human_bytes(int64_t b) {
  char buf[32];
  if (b < 1024) std::snprintf(buf, sizeof buf, "%lld B", (long long)b);
  else if (b < 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024.0));
  return buf;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// A DOT double-quoted string's contents.
std::string quoted(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (c == '\n') {
      r += "\\n";
      continue;
    }
    r += c;
  }
  return r;
}

std::string lower_extension(const std::string& path) {
  const size_t dot = path.rfind('.'), slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string e = path.substr(dot + 1);
  for (char& c : e) c = (char)std::tolower((unsigned char)c);
  return e;
}

// Runs `dot` with args, its output thrown away when quiet; its exit status, or -1 when it
// could not be started.
int run_dot(const std::vector<std::string>& args, bool quiet) {
  std::vector<char*> argv;
  std::vector<std::string> all{"dot"};
  all.insert(all.end(), args.begin(), args.end());
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (quiet) {
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  }
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, "dot", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return -1;
  if (!WIFEXITED(status)) return -1;
  return WEXITSTATUS(status) == 127 ? -1 : WEXITSTATUS(status);
}

}  // namespace

GraphDescription describe_graph(const Tensor& root, const GraphDrawOptions& options) {
  const char* op = "describe_graph";
  check_defined(root, op, "the tensor");
  if (!root.requires_grad())
    fail(op, "the tensor (shape ", root.shape(), ", ", dtype_name(root.dtype()),
         ") has no graph: it does not require grad (computed under no_grad, or from tensors that do not "
         "require grad); set requires_grad on a leaf it depends on");
  std::unordered_map<const TensorImpl*, std::string> names;
  for (const auto& [name, t] : options.params)
    if (t.defined()) names.emplace(t.impl(), name);

  GraphDescription g;
  std::unordered_map<const TensorImpl*, int> leaf_ids;
  auto leaf_id = [&](const std::shared_ptr<TensorImpl>& impl) {
    auto [it, inserted] = leaf_ids.try_emplace(impl.get(), (int)g.leaves.size());
    if (inserted) {
      const Tensor t(impl);
      GraphLeaf l;
      auto n = names.find(impl.get());
      if (n != names.end()) l.name = n->second;
      l.shape = t.shape();
      l.dtype = t.dtype();
      l.grad_norm = impl->grad ? norm_or_none(Tensor(impl->grad)) : -1;
      g.leaves.push_back(std::move(l));
    }
    return it->second;
  };
  if (!root.grad_fn()) {
    leaf_id(root.impl_ptr());
    return g;
  }

  std::unordered_map<const Node*, int> ids;
  std::vector<const Node*> nodes;
  std::vector<DType> dtypes;
  auto node_id = [&](const Node* n, DType dtype) {
    auto [it, inserted] = ids.try_emplace(n, (int)nodes.size());
    if (inserted) {
      nodes.push_back(n);
      dtypes.push_back(dtype);
    }
    return it->second;
  };
  node_id(root.grad_fn().get(), root.dtype());
  std::unordered_set<const Storage*> all_saved;
  for (size_t i = 0; i < nodes.size(); i++) {  // nodes grows as the walk reaches producers
    const Node* n = nodes[i];
    for (size_t k = 0; k < n->inputs.size(); k++) {
      const Edge& e = n->inputs[k];
      if (e.fn) {
        g.edges.push_back({node_id(e.fn.get(), e.dtype), false, (int)i, (int)k});
      } else if (auto l = e.leaf.lock()) {
        g.edges.push_back({leaf_id(l), true, (int)i, (int)k});
      }
    }
    GraphOp o;
    o.name = n->name;
    o.shape = n->out_shape;
    o.dtype = dtypes[i];
    o.saved_bytes = saved_bytes(*n);
    o.released = n->released;
    o.grad_norm = n->grad_norm;
    if (n->scope) o.scope = *n->scope;
    o.where = format_loc(n->where);
    o.saturated_share = probs_saturation(*n, options.saturation);
    for (const SavedVersion& s : n->saved)
      if (s.storage && all_saved.insert(s.storage.get()).second) g.saved_bytes += (int64_t)s.storage->nbytes;
    g.ops.push_back(std::move(o));
  }
  return g;
}

std::string graph_dot(const Tensor& root, const GraphDrawOptions& options) {
  return graph_dot(describe_graph(root, options), options);
}

std::string graph_dot(const GraphDescription& g, const GraphDrawOptions& options) {
  std::string out = "digraph backward {\n";
  out += "  graph [rankdir=TB, fontname=\"Helvetica\", fontsize=11";
  std::string caption = options.title;
  if (!g.ops.empty()) {
    if (!caption.empty()) caption += "\n";
    caption += cat_str(g.ops.size(), g.ops.size() == 1 ? " op, " : " ops, ", human_bytes(g.saved_bytes),
                       " saved for backward");
  }
  if (!caption.empty()) out += cat_str(", labelloc=t, label=\"", quoted(caption), "\"");
  out += "];\n";
  out += "  node [fontname=\"Helvetica\", fontsize=10];\n";
  out += "  edge [arrowsize=0.6];\n";

  // the op and leaf statements, then clusters holding them
  auto op_line = [&](size_t i) {
    const GraphOp& o = g.ops[i];
    std::string label = cat_str(o.name, "\n", shape_str(o.shape), " ", dtype_name(o.dtype));
    if (o.released) label += "\nsaved: freed";
    else if (o.saved_bytes > 0) label += "\nsaved " + human_bytes(o.saved_bytes);
    if (o.grad_norm >= 0) label += "\ngrad norm " + number(o.grad_norm);
    std::string style = "shape=box, style=\"rounded,filled\"";
    std::string fill = i == 0 ? "#c6e5c2" : "#e8eef7";
    if (o.saturated_share > 0) {
      label += cat_str("\nsaturated: ", number(100 * o.saturated_share), "% of rows");
      fill = "#f4a6a0";
    }
    // the call's file without its folders, when known: where the op came from, on hover
    std::string tooltip;
    if (o.where != "an unknown place") {
      const size_t slash = o.where.rfind('/', o.where.find(':'));
      tooltip = cat_str(", tooltip=\"", quoted(slash == std::string::npos ? o.where : o.where.substr(slash + 1)), "\"");
    }
    return cat_str("n", i, " [", style, ", fillcolor=\"", fill, "\", label=\"", quoted(label), "\"", tooltip, "];\n");
  };
  auto leaf_line = [&](size_t i) {
    const GraphLeaf& l = g.leaves[i];
    std::string label = l.name.empty() ? std::string("leaf") : l.name;
    label += cat_str("\n", shape_str(l.shape), " ", dtype_name(l.dtype));
    if (l.grad_norm >= 0) label += "\n.grad norm " + number(l.grad_norm);
    return cat_str("l", i, " [shape=ellipse, style=filled, fillcolor=\"", l.name.empty() ? "#eeeeee" : "#fff2b3",
                   "\", label=\"", quoted(label), "\"];\n");
  };

  // clusters: every scope and each of its dotted prefixes, nested
  std::map<std::string, std::vector<std::string>> members;  // scope -> statements
  std::map<std::string, std::vector<std::string>> children;  // scope -> sub-scopes
  auto add_scope = [&](const std::string& scope) {
    std::string child = scope;
    while (!members.count(child)) {
      members[child];
      const size_t dot = child.rfind('.');
      const std::string parent = dot == std::string::npos ? "" : child.substr(0, dot);
      children[parent].push_back(child);
      if (parent.empty()) break;
      child = parent;
    }
  };
  for (const GraphOp& o : g.ops)
    if (!o.scope.empty()) add_scope(o.scope);
  std::vector<std::string> top;
  for (size_t i = 0; i < g.ops.size(); i++) {
    if (g.ops[i].scope.empty()) top.push_back(op_line(i));
    else members[g.ops[i].scope].push_back(op_line(i));
  }
  for (size_t i = 0; i < g.leaves.size(); i++) {
    // a parameter sits in its module's cluster, when that module has one
    const std::string& name = g.leaves[i].name;
    const size_t dot = name.rfind('.');
    const std::string owner = dot == std::string::npos ? "" : name.substr(0, dot);
    if (!owner.empty() && members.count(owner)) members[owner].push_back(leaf_line(i));
    else top.push_back(leaf_line(i));
  }
  int cluster = 0;
  std::vector<std::string> roots = children[""];
  std::function<void(const std::string&, int)> write = [&](const std::string& scope, int depth) {
    const std::string pad(2 * depth, ' ');
    out += cat_str(pad, "subgraph cluster_", cluster++, " {\n");
    out += cat_str(pad, "  label=\"", quoted(scope), "\"; style=\"rounded,dashed\"; color=\"#7a8ca5\";\n");
    for (const std::string& s : members[scope]) out += pad + "  " + s;
    for (const std::string& c : children[scope]) write(c, depth + 1);
    out += pad + "}\n";
  };
  for (const std::string& s : roots) write(s, 1);
  for (const std::string& s : top) out += "  " + s;
  for (const GraphEdge& e : g.edges) out += cat_str("  ", e.from_leaf ? "l" : "n", e.from, " -> n", e.to, ";\n");
  out += "}\n";
  return out;
}

std::string draw_graph(const Tensor& root, const std::string& path, const GraphDrawOptions& options) {
  const char* op = "draw_graph";
  check_defined(root, op, "the tensor");
  const std::string ext = lower_extension(path);
  const bool render = ext == "svg" || ext == "png" || ext == "pdf";
  if (!render && ext != "dot" && ext != "gv")
    fail(op, "expected a path ending .dot, .gv, .svg, .png or .pdf, got '", path, "'");
  std::string dot = graph_dot(root, options);
  const std::string dot_path = render ? path + ".dot" : path;
  io::write_file(dot_path, dot.data(), dot.size(), op);
  if (!render) return dot;
  if (!graphviz_available())
    fail(op, "rendering '", path, "' needs Graphviz's dot program, which is not installed (Debian: apt-get install ",
         "graphviz); the DOT text was written to '", dot_path, "'");
  io::check_regular_or_missing(path, op);
  // a relative name starting with '-' would read as one of dot's options
  auto arg = [](const std::string& p) { return !p.empty() && p[0] == '-' ? "./" + p : p; };
  const int status = run_dot({"-T" + ext, arg(dot_path), "-o" + arg(path)}, false);
  if (status != 0)
    fail(op, "Graphviz's dot could not write '", path, "' from '", dot_path, "' (exit status ", status, ")");
  return dot;
}

bool graphviz_available() { return run_dot({"-V"}, true) == 0; }

}  // namespace ember
