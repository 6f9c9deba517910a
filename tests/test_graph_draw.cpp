// Drawing the backward graph (core/graph_draw.h, nn/graph_draw.h): the ops and edges drawn
// are the graph's, leaves carry the parameters' names, modules become clusters, recorded
// gradient norms are the gradients' norms, saturated softmaxes are marked, the graph of a
// gradient shows the backward's ops, Graphviz reads the DOT, and misuse is named.
#include <catch2/catch.hpp>

#include "test_util.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <unistd.h>
#include <unordered_set>
#include <vector>

#include "core/autograd.h"
#include "core/graph_draw.h"
#include "core/ops.h"
#include "nn/attention.h"
#include "nn/graph_draw.h"
#include "nn/layers.h"
#include "nn/multihead_attention.h"
#include "nn/transformer.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;

namespace {

// The graph walked here, independently of describe_graph: its nodes, and its edges into
// nodes from producers and from leaves that are alive.
struct Walked {
  std::set<const Node*> nodes;
  std::multiset<std::string> names;
  size_t edges = 0;
  std::set<const TensorImpl*> leaves;
};

Walked walk(const Tensor& root) {
  Walked w;
  std::vector<const Node*> stack{root.grad_fn().get()};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!w.nodes.insert(n).second) continue;
    w.names.insert(n->name);
    for (const Edge& e : n->inputs) {
      if (e.fn) {
        w.edges++;
        stack.push_back(e.fn.get());
      } else if (auto l = e.leaf.lock()) {
        w.edges++;
        w.leaves.insert(l.get());
      }
    }
  }
  return w;
}

size_t count_matches(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return (size_t)std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator());
}

std::string scratch(const std::string& name) {
  return cat_str("/tmp/ember_test_graph_", getpid(), "_", name);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

Tensor leaf(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, kFloat64, &gen).requires_grad_();
}

}  // namespace

TEST_CASE("draw_graph draws every op and edge of the graph, once each, with names, shapes and dtypes") {
  Tensor w = leaf({3, 4}, 1), b = leaf({4}, 2), x = leaf({2, 3}, 3);
  Tensor h = tanh(add(matmul(x, w), b));
  Tensor loss = sum(mul(h, h));  // h feeds mul twice: two edges from one node
  const Walked walked = walk(loss);
  const GraphDescription g = describe_graph(loss);
  CHECK(g.ops.size() == walked.nodes.size());
  CHECK(g.edges.size() == walked.edges);
  CHECK(g.leaves.size() == walked.leaves.size());
  std::multiset<std::string> names;
  for (const GraphOp& o : g.ops) names.insert(o.name);
  CHECK(names == walked.names);
  CHECK(g.ops[0].name == std::string(loss.grad_fn()->name));
  CHECK(g.ops[0].shape == Shape{});
  CHECK(g.ops[0].dtype == kFloat64);

  const std::string dot = graph_dot(loss);
  CHECK(count_matches(dot, R"(\n\s*n\d+ \[)") == walked.nodes.size());
  CHECK(count_matches(dot, R"(\n\s*l\d+ \[)") == walked.leaves.size());
  CHECK(count_matches(dot, " -> ") == walked.edges);
  for (const std::string& name : walked.names) CHECK_THAT(dot, Contains("label=\"" + name + "\\n"));
  CHECK_THAT(dot, Contains("[2,4] float64"));
}

TEST_CASE("draw_graph counts the bytes each op saved for its backward, and says when a backward freed them") {
  Tensor x = leaf({8, 16}, 4);
  Tensor y = softmax(x, -1);  // saves its output: 8 * 16 float64
  Tensor loss = sum(mul(y, y));
  const GraphDescription before = describe_graph(loss);
  for (const GraphOp& o : before.ops)
    if (o.name == "softmax") CHECK(o.saved_bytes == 8 * 16 * 8);
  CHECK(before.saved_bytes == 8 * 16 * 8);  // mul saves y twice: one storage
  loss.backward();
  const GraphDescription after = describe_graph(loss);
  for (const GraphOp& o : after.ops) {
    CHECK(o.released);
    CHECK(o.saved_bytes == 0);
  }
  CHECK_THAT(graph_dot(loss), Contains("saved: freed"));
}

TEST_CASE("draw_graph names leaves by the parameters given, and a model's by their dotted names") {
  Tensor w = leaf({3, 4}, 1), x = leaf({2, 3}, 3);
  Tensor loss = sum(matmul(x, w));
  GraphDrawOptions options;
  options.params = {{"proj.weight", w}};
  const GraphDescription g = describe_graph(loss, options);
  std::set<std::string> named;
  for (const GraphLeaf& l : g.leaves) named.insert(l.name);
  CHECK(named == std::set<std::string>{"proj.weight", ""});  // x was not named
  CHECK_THAT(graph_dot(loss, options), Contains("label=\"proj.weight\\n[3,4] float64"));

  Generator gen(5);
  nn::Sequential model({std::make_shared<nn::Linear>(3, 5, true, &gen, kFloat64),
                        std::make_shared<nn::Linear>(5, 2, true, &gen, kFloat64)});
  Tensor out = sum(model.forward(x));
  const std::string dot = nn::graph_dot(out, model);
  for (const auto& [name, p] : model.named_parameters()) CHECK_THAT(dot, Contains("label=\"" + name + "\\n"));
}

TEST_CASE("ops recorded under GraphScopes are grouped by the module that ran them, nested by name") {
  Generator gen(6);
  auto first = std::make_shared<nn::Linear>(3, 5, true, &gen, kFloat64);
  auto norm = std::make_shared<nn::LayerNorm>(5, 1e-5, true, kFloat64);
  auto inner = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{first, norm});
  auto last = std::make_shared<nn::Linear>(5, 2, true, &gen, kFloat64);
  nn::Sequential model({inner, last});
  Tensor x = leaf({4, 3}, 7);
  Tensor pre = mul(x, 2.0);  // before the model: no module's
  Tensor loss;
  {
    nn::GraphScopes scopes(model);
    loss = sum(model.forward(pre));
  }
  CHECK(loss.grad_fn()->scope == nullptr);  // after the model
  CHECK(pre.grad_fn()->scope == nullptr);   // before it, an input of the model
  std::map<std::string, std::string> scope_of;  // op name -> module
  for (const GraphOp& o : describe_graph(loss).ops) scope_of[o.name] = o.scope;
  CHECK(scope_of["layer_norm"] == "0.1");
  std::set<std::string> linear_scopes;
  for (const GraphOp& o : describe_graph(loss).ops)
    if (o.name == "linear") linear_scopes.insert(o.scope);
  CHECK(linear_scopes == std::set<std::string>{"0.0", "1"});

  const std::string dot = nn::graph_dot(loss, model);
  CHECK(count_matches(dot, "subgraph cluster_") == 4);  // 0, 0.0, 0.1, 1
  CHECK_THAT(dot, Contains("label=\"0.1\""));
  // a parameter sits in its module's cluster: after the cluster's label, before it closes
  const size_t cluster = dot.find("label=\"0.1\"");
  const size_t param = dot.find("label=\"0.1.weight");
  CHECK(param > cluster);
  CHECK(dot.find('}', cluster) > param);

  // without GraphScopes, nothing is labelled
  Tensor plain = sum(model.forward(pre));
  for (const GraphOp& o : describe_graph(plain).ops) CHECK(o.scope.empty());
}

TEST_CASE("an encoder layer's ops are grouped by its attention, its norms, and the layer itself") {
  Generator gen(15);
  nn::EncoderLayer layer({.d_model = 8, .num_heads = 2, .dim_feedforward = 16, .dropout_p = 0.0}, &gen, kFloat64);
  Tensor x = randn({2, 3, 8}, kFloat64, &gen).requires_grad_();
  Tensor loss;
  {
    nn::GraphScopes scopes(layer, "encoder.layers.0");
    loss = sum(layer.forward(x));
  }
  std::map<std::string, std::set<std::string>> scopes_of;  // op name -> the modules it ran in
  for (const GraphOp& o : describe_graph(loss).ops) scopes_of[o.name].insert(o.scope);
  CHECK(scopes_of["layer_norm"] == std::set<std::string>{"encoder.layers.0.norm1", "encoder.layers.0.norm2"});
  CHECK(scopes_of["scaled_dot_product_attention"] == std::set<std::string>{"encoder.layers.0.self_attn"});
  CHECK(scopes_of["add"].count("encoder.layers.0") == 1);  // the residual connections
  CHECK(scopes_of["sum"] == std::set<std::string>{""});
  const std::string dot = nn::graph_dot(loss, layer, {}, "encoder.layers.0");
  // nested clusters: encoder > encoder.layers > encoder.layers.0 > its modules
  CHECK_THAT(dot, Contains("label=\"encoder\"") && Contains("label=\"encoder.layers\"") &&
                      Contains("label=\"encoder.layers.0.self_attn.out_proj\""));
  CHECK(dot.find("label=\"encoder\"") < dot.find("label=\"encoder.layers.0\""));
}

TEST_CASE("GradNormRecorders nest, and record for grad() too") {
  Tensor x = leaf({4}, 16);
  Tensor y = mul(x, 3.0);
  Tensor loss = sum(mul(y, y));
  {
    GradNormRecorder outer;
    {
      GradNormRecorder inner;
    }
    CHECK(GradNormRecorder::active());
    const Tensor gy = grad({loss}, {y}, {}, {.retain_graph = true})[0];
    CHECK(y.grad_fn()->grad_norm == Approx(norm(gy).item()).epsilon(1e-12));
  }
  CHECK_FALSE(GradNormRecorder::active());
}

TEST_CASE("under GradNormRecorder each op records the norm of the gradient that reached it, as grad() computes") {
  Tensor w = leaf({3, 4}, 1), x = leaf({2, 3}, 3);
  Tensor h = matmul(x, w);
  Tensor a = tanh(h);
  Tensor loss = sum(mul(a, a));
  const std::vector<Tensor> grads = grad({loss}, {h, a}, {}, {.retain_graph = true});
  loss.backward(Tensor(), /*retain_graph=*/true);
  CHECK(h.grad_fn()->grad_norm == -1);  // off: nothing recorded
  {
    GradNormRecorder record;
    CHECK(GradNormRecorder::active());
    loss.backward(Tensor(), /*retain_graph=*/true);
  }
  CHECK_FALSE(GradNormRecorder::active());
  CHECK(h.grad_fn()->grad_norm == Approx(norm(grads[0]).item()).epsilon(1e-12));
  CHECK(a.grad_fn()->grad_norm == Approx(norm(grads[1]).item()).epsilon(1e-12));
  CHECK(loss.grad_fn()->grad_norm == 1.0);
  const GraphDescription g = describe_graph(loss);
  for (const GraphLeaf& l : g.leaves) CHECK(l.grad_norm > 0);  // .grad's norm
  CHECK_THAT(graph_dot(loss), Contains("grad norm "));
}

TEST_CASE("a saturated softmax is marked with the share of its saturated rows, an unsaturated one is not") {
  Tensor scores = from_vector(std::vector<double>{0, 20, 0, 0, 0.1, 0, 0.2, 0.1, 0}, {3, 3}).to(kFloat64).requires_grad_();
  Tensor sharp = softmax(scores, -1);  // row 0 saturated: 1/3 of the rows
  Tensor soft = softmax(mul(scores, 0.01), 0);  // nearly uniform
  const GraphDescription g = describe_graph(add(sum(sharp), sum(soft)));
  int seen = 0;
  for (const GraphOp& o : g.ops) {
    if (o.name != "softmax") continue;
    seen++;
    if (o.shape == Shape{3, 3} && o.saturated_share > 0) CHECK(o.saturated_share == Approx(1.0 / 3));
  }
  CHECK(seen == 2);
  CHECK(sharp.grad_fn()->probs_dim == 1);
  CHECK(soft.grad_fn()->probs_dim == 0);
  CHECK(describe_graph(sum(sharp)).ops[1].saturated_share == Approx(1.0 / 3));
  CHECK(describe_graph(sum(soft)).ops[1].saturated_share == 0);
  CHECK_THAT(graph_dot(sum(sharp)), Contains("saturated: 33.33% of rows"));
  CHECK_THAT(graph_dot(sum(soft)), !Contains("saturated"));
  // the threshold is an option
  GraphDrawOptions lax;
  lax.saturation = 0.3;
  CHECK(describe_graph(sum(soft), lax).ops[1].saturated_share == 1);
}

TEST_CASE("the fused attention op, which saves its weights, is marked where they saturate") {
  Tensor q = leaf({1, 2, 4, 8}, 8), k = leaf({1, 2, 4, 8}, 9), v = leaf({1, 2, 4, 8}, 10);
  Tensor sharp = nn::scaled_dot_product_attention(mul(q, 100.0), k, v).output;
  Tensor mild = nn::scaled_dot_product_attention(mul(q, 1e-3), k, v).output;
  const GraphOp s = describe_graph(sum(sharp)).ops[1], m = describe_graph(sum(mild)).ops[1];
  CHECK(s.name == "scaled_dot_product_attention");
  CHECK(s.saturated_share > 0.5);
  CHECK(m.saturated_share == 0);
}

TEST_CASE("the graph of a gradient computed with create_graph holds the backward's ops") {
  Tensor x = leaf({2, 5}, 11);
  Tensor loss = sum(mul(softmax(x, -1), x));
  Tensor gx = grad({loss}, {x}, {}, {.create_graph = true})[0];
  const GraphDescription g = describe_graph(gx);
  const Walked walked = walk(gx);
  CHECK(g.ops.size() == walked.nodes.size());
  CHECK(g.edges.size() == walked.edges);
  CHECK(walked.names.count("softmax_backward") == 1);
  CHECK_THAT(graph_dot(gx), Contains("label=\"softmax_backward\\n"));
}

TEST_CASE("a leaf that requires grad is drawn as one leaf node") {
  Tensor w = leaf({3}, 12);
  GraphDrawOptions options;
  options.params = {{"w", w}};
  const GraphDescription g = describe_graph(w, options);
  CHECK(g.ops.empty());
  REQUIRE(g.leaves.size() == 1);
  CHECK(g.leaves[0].name == "w");
  CHECK(count_matches(graph_dot(w, options), " -> ") == 0);
}

TEST_CASE("draw_graph names its misuse: undefined tensors, tensors without graph, bad and unwritable paths") {
  CHECK_THAT(error_of([] { graph_dot(Tensor()); }), Contains("describe_graph"));
  CHECK_THAT(error_of([] { draw_graph(Tensor(), scratch("u.dot")); }), Contains("draw_graph"));
  Tensor c = ones({2, 3});
  CHECK_THAT(error_of([&] { graph_dot(c); }),
             Contains("describe_graph") && Contains("[2,3]") && Contains("does not require grad"));
  Tensor loss = sum(mul(leaf({2}, 13), 2.0));
  CHECK_THAT(error_of([&] { draw_graph(loss, scratch("g.txt")); }), Contains("draw_graph") && Contains(".dot"));
  CHECK_THAT(error_of([&] { draw_graph(loss, "/nonexistent-dir/graph.dot"); }),
             Contains("draw_graph") && Contains("/nonexistent-dir/graph.dot"));
}

TEST_CASE("draw_graph writes DOT that Graphviz reads, and renders SVG through it") {
  Generator gen(14);
  nn::MultiHeadAttention mha(8, 2);
  mha.to(kFloat64);
  Tensor x = randn({1, 3, 8}, kFloat64, &gen).requires_grad_();
  Tensor loss;
  {
    nn::GraphScopes scopes(mha, "self_attn");
    loss = sum(mha.forward(x, x, x).output);
  }
  // the layer's own ops, behind out_proj's, are the layer's; the sum after it is no module's
  int own = 0;
  for (const GraphOp& o : describe_graph(loss).ops) {
    if (o.name == "scaled_dot_product_attention" || o.name == "transpose") {
      CHECK(o.scope == "self_attn");
      own++;
    }
    if (o.name == "sum") CHECK(o.scope.empty());
  }
  CHECK(own >= 2);
  const std::string dot_path = scratch("mha.dot");
  const std::string dot = nn::draw_graph(loss, mha, dot_path, {}, "self_attn");
  CHECK(read_text(dot_path) == dot);
  CHECK_THAT(dot, Contains("label=\"self_attn.q_proj.weight\\n"));
  CHECK_THAT(dot, Contains("label=\"self_attn.out_proj\""));
  std::remove(dot_path.c_str());
  if (!graphviz_available()) {
    WARN("Graphviz's dot is not installed: the SVG is not rendered");
    CHECK_THAT(error_of([&] { draw_graph(loss, scratch("mha.svg")); }), Contains("graphviz"));
    std::remove((scratch("mha.svg") + ".dot").c_str());
    return;
  }
  const std::string svg_path = scratch("mha.svg");
  nn::draw_graph(loss, mha, svg_path, {}, "self_attn");
  const std::string svg = read_text(svg_path);
  CHECK_THAT(svg, Contains("<svg"));
  CHECK_THAT(svg, Contains("self_attn.q_proj.weight"));
  std::remove(svg_path.c_str());
  std::remove((svg_path + ".dot").c_str());

  // a relative name starting with '-' is a file, not one of dot's options
  const std::string cwd = std::filesystem::current_path().string();
  std::filesystem::current_path("/tmp");
  const std::string dashed = cat_str("-V_ember_test_graph_", getpid(), ".svg");
  nn::draw_graph(loss, mha, dashed, {}, "self_attn");
  CHECK_THAT(read_text("/tmp/" + dashed), Contains("<svg"));
  std::remove(("/tmp/" + dashed).c_str());
  std::remove(("/tmp/" + dashed + ".dot").c_str());
  std::filesystem::current_path(cwd);
}

TEST_CASE("GraphScopes destroyed out of order leave the others in force, and nothing dangling") {
  Generator gen(6);
  nn::Linear model(3, 3, true, &gen, kFloat64);
  auto outer = std::make_unique<nn::GraphScopes>(model, "outer");
  auto inner = std::make_unique<nn::GraphScopes>(model, "inner");
  outer.reset();  // out of order: inner stays the one in force
  Tensor x = leaf({2, 3}, 1);
  CHECK(model.forward(x).grad_fn()->scope);
  CHECK(*model.forward(x).grad_fn()->scope == "inner");
  std::vector<std::unique_ptr<int[]>> reuse;  // the freed scope's memory, reused
  for (int i = 0; i < 64; i++) reuse.push_back(std::make_unique<int[]>(64));
  inner.reset();
  CHECK(model.forward(x).grad_fn()->scope == nullptr);  // none left
}
