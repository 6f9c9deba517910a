// The watch's log and its files: the HDF5 file a run appends to (and resumes from) and
// its CSV, each value named by module, quantity, layer and head.
#include <algorithm>
#include <cmath>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/file_io.h"
#include "io/h5.h"
#include "lib/watch/detail.h"
#include "lib/watch/watch.h"

namespace ember::watch {

namespace {

constexpr const char* kFormat = "ember attention watch";
constexpr int64_t kVersion = 1;

}  // namespace

namespace detail {

void check_module_name(const std::string& name, const char* op, const std::string& where) {
  bool plain = !name.empty() && name.size() <= 64 && name[0] != '.';
  for (char c : name) plain = plain && (std::isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.');
  if (!plain)
    fail(op, where, "names module ", ember::printable(name),
         ", which cannot name a figure file (expected up to 64 letters, digits, '_', '-' and '.', not starting with '.')");
}

}  // namespace detail

// ------------------------------------------------------------------ the log

Log Log::for_sites(const std::vector<Site>& sites) {
  Log log;
  for (const Site& s : sites) {
    if (std::find(log.modules.begin(), log.modules.end(), s.module) == log.modules.end()) log.modules.push_back(s.module);
    log.layers = std::max(log.layers, s.layer + 1);
    if (log.heads != 0 && log.heads != s.attention->num_heads)
      fail("watch::Log", "every watched module must have the same number of heads, got ", log.heads, " and ",
           s.attention->num_heads);
    log.heads = s.attention->num_heads;
  }
  return log;
}

void Log::add(Snapshot s) {
  for (const std::string& m : modules)
    for (const std::string& q : kQuantities) {
      auto mi = s.values.find(m);
      if (mi == s.values.end() || !mi->second.count(q) || (int64_t)mi->second.at(q).size() != layers * heads)
        fail("watch::Log::add", "the snapshot of step ", s.step, " lacks ", m, "/", q, " for ", layers, " x ", heads,
             " heads");
    }
  snapshots.push_back(std::move(s));
}

void Log::truncate_after(int64_t step) {
  snapshots.erase(std::remove_if(snapshots.begin(), snapshots.end(), [&](const Snapshot& s) { return s.step > step; }),
                  snapshots.end());
}

bool Log::same_shape(const Log& o) const { return modules == o.modules && layers == o.layers && heads == o.heads; }

void Log::write_h5(const std::string& path) const {
  using ember::h5::Writer;
  Writer w = Writer::in_memory(path);
  const int64_t C = (int64_t)snapshots.size();
  std::vector<int64_t> steps;
  for (const Snapshot& s : snapshots) steps.push_back(s.step);
  w.write("/step", ember::from_vector(steps, {C}));
  std::string joined;
  for (const std::string& m : modules) {
    joined += (joined.empty() ? "" : ",") + m;
    for (const std::string& q : kQuantities) {
      std::vector<double> v;
      for (const Snapshot& s : snapshots) {
        const auto& x = s.values.at(m).at(q);
        v.insert(v.end(), x.begin(), x.end());
      }
      const std::string key = "/" + m + "/" + q;
      w.write(key, ember::from_vector(v, {C, layers, heads}));
      w.attr(key, "meaning", meaning(q));
    }
  }
  // the densities: per snapshot that has one, its probe's nodes and weights (a probe's
  // Lanczos run may stop early: NaN nodes and zero weights fill the rest)
  std::vector<int64_t> density_steps;
  int64_t width = 0, n = 0;
  for (const Snapshot& s : snapshots)
    if (s.density.n > 0) {
      density_steps.push_back(s.step);
      n = s.density.n;
      for (const auto& p : s.density.nodes) width = std::max(width, (int64_t)p.size());
    }
  if (!density_steps.empty()) {
    const int64_t D = (int64_t)density_steps.size();
    std::vector<double> nodes, weights;
    for (const Snapshot& s : snapshots) {
      if (s.density.n == 0) continue;
      if (s.density.nodes.size() != 1) fail("watch::Log::write_h5", "expected one probe per density, got ", s.density.nodes.size());
      std::vector<double> x = s.density.nodes[0], y = s.density.weights[0];
      x.resize((size_t)width, kNaN), y.resize((size_t)width, 0.0);
      nodes.insert(nodes.end(), x.begin(), x.end());
      weights.insert(weights.end(), y.begin(), y.end());
    }
    w.write("/density/step", ember::from_vector(density_steps, {D}));
    w.write("/density/nodes", ember::from_vector(nodes, {D, width}));
    w.write("/density/weights", ember::from_vector(weights, {D, width}));
    w.attr("/density/nodes", "meaning", "Ritz values of one stochastic Lanczos quadrature probe of the whole model's Hessian");
    w.attr("/density/weights", "meaning", "their weights (summing to 1 per row)");
    w.attr_int("/density/nodes", "parameters", n);
  }
  w.attr("/", "format", kFormat);
  w.attr_int("/", "version", kVersion);
  w.attr("/", "modules", joined);
  w.attr_int("/", "layers", layers);
  w.attr_int("/", "heads", heads);
  for (const auto& [k, v] : info) w.attr("/", "info_" + k, v);
  const std::vector<uint8_t> bytes = w.image();
  ember::io::replace_file(path, bytes.data(), bytes.size(), "watch::Log::write_h5");
}

Log Log::read_h5(const std::string& path) {
  const char* op = "watch::Log::read_h5";
  ember::io::check_regular_file(path, op, "an attention watch file");
  ember::h5::Reader r(path);
  if (!r.has_attr("/", "format") || !r.attr_is_string("/", "format") || r.attr_string("/", "format") != kFormat)
    fail(op, "'", path, "' is not an attention watch file (attribute '/format' should be \"", kFormat, "\")");
  if (r.attr_int("/", "version") != kVersion)
    fail(op, "'", path, "': version ", r.attr_int("/", "version"), ", this program reads version ", kVersion);
  Log log;
  log.layers = r.attr_int("/", "layers");
  log.heads = r.attr_int("/", "heads");
  if (log.layers < 1 || log.heads < 1 || log.layers > kMaxLayers || log.heads > kMaxHeads)
    fail(op, "'", path, "': attributes 'layers' and 'heads' must be in [1, ", kMaxLayers, "] and [1, ", kMaxHeads,
         "], got ", log.layers, " and ", log.heads);
  std::string joined;
  try {
    joined = r.attr_string("/", "modules");
  } catch (const ember::Error& e) {
    fail(op, "'", path, "': attribute 'modules': ", e.what());
  }
  for (size_t a = 0; a <= joined.size();) {
    size_t b = joined.find(',', a);
    if (b == std::string::npos) b = joined.size();
    log.modules.push_back(joined.substr(a, b - a));  // an empty name ("a,,b") is refused below
    a = b + 1;
  }
  if (joined.empty()) log.modules.clear();
  if (log.modules.empty()) fail(op, "'", path, "': attribute 'modules' names no module");
  for (size_t i = 0; i < log.modules.size(); i++) {
    check_module_name(log.modules[i], op, cat_str("'", path, "': attribute 'modules' "));
    if (std::count(log.modules.begin(), log.modules.begin() + (ptrdiff_t)i, log.modules[i]))
      fail(op, "'", path, "': attribute 'modules' names module ", ember::printable(log.modules[i]), " twice");
  }
  for (const std::string& name : r.attr_names("/"))
    if (name.rfind("info_", 0) == 0 && r.attr_is_string("/", name)) log.info[name.substr(5)] = r.attr_string("/", name);
  const Tensor steps = r.read("/step");
  if (steps.dim() != 1 || steps.dtype() != ember::kInt64)
    fail(op, "'", path, "': key '/step' should be int64 [checkpoints], got ", steps.shape());
  const int64_t C = steps.size(0);
  const std::vector<int64_t> step = steps.to_vector<int64_t>();
  // a resume keeps the snapshots up to its step and appends after them: they must come in
  // the order training took them
  for (size_t c = 0; c < step.size(); c++)
    if (step[c] < 0 || (c > 0 && step[c] <= step[c - 1]))
      fail(op, "'", path, "': key '/step' should hold steps that are not negative and strictly increase, got ",
           step[c], c > 0 ? cat_str(" after ", step[c - 1]) : std::string(), " (snapshot ", (int64_t)c, ")");
  log.snapshots.resize((size_t)C);
  for (int64_t c = 0; c < C; c++) log.snapshots[(size_t)c].step = step[(size_t)c];
  for (const std::string& m : log.modules)
    for (const std::string& q : kQuantities) {
      const std::string key = "/" + m + "/" + q;
      if (!r.is_dataset(key) && kLaterQuantities.count(q)) {  // an older file: NaN
        for (int64_t c = 0; c < C; c++) log.snapshots[(size_t)c].values[m][q].assign((size_t)(log.layers * log.heads), kNaN);
        continue;
      }
      if (!r.is_dataset(key)) fail(op, "'", path, "': key '", key, "' is missing");
      const Tensor t = r.read(key);
      if (t.shape() != Shape{C, log.layers, log.heads} || t.dtype() != ember::kFloat64)
        fail(op, "'", path, "': key '", key, "' should be float64 [", C, ", ", log.layers, ", ", log.heads, "], got ",
             ember::dtype_name(t.dtype()), " ", t.shape());
      const std::vector<double> v = t.to_vector<double>();
      const size_t per = (size_t)(log.layers * log.heads);
      for (int64_t c = 0; c < C; c++)
        log.snapshots[(size_t)c].values[m][q].assign(v.begin() + (ptrdiff_t)((size_t)c * per),
                                                     v.begin() + (ptrdiff_t)((size_t)(c + 1) * per));
    }
  if (r.is_dataset("/density/step")) {
    const Tensor ds = r.read("/density/step"), nodes = r.read("/density/nodes"), weights = r.read("/density/weights");
    const int64_t D = ds.dim() == 1 ? ds.size(0) : -1;
    if (ds.dtype() != ember::kInt64 || D < 0 || nodes.dtype() != ember::kFloat64 || nodes.dim() != 2 ||
        nodes.size(0) != D || weights.shape() != nodes.shape() || weights.dtype() != ember::kFloat64)
      fail(op, "'", path, "': '/density/step', '/density/nodes' and '/density/weights' should be int64 [D] and float64 "
           "[D, steps] twice, got ", ember::dtype_name(ds.dtype()), " ", ds.shape(), ", ", ember::dtype_name(nodes.dtype()),
           " ", nodes.shape(), " and ", ember::dtype_name(weights.dtype()), " ", weights.shape());
    const int64_t n = r.attr_int("/density/nodes", "parameters");
    if (n < 1) fail(op, "'", path, "': attribute 'parameters' of '/density/nodes' should be positive, got ", n);
    const std::vector<int64_t> at = ds.to_vector<int64_t>();
    const std::vector<double> x = nodes.to_vector<double>(), y = weights.to_vector<double>();
    const int64_t width = nodes.size(1);
    for (int64_t d = 0; d < D; d++) {
      auto snap = std::find_if(log.snapshots.begin(), log.snapshots.end(),
                               [&](const Snapshot& s) { return s.step == at[(size_t)d]; });
      if (snap == log.snapshots.end())
        fail(op, "'", path, "': '/density/step' names step ", at[(size_t)d], ", which no snapshot has");
      if (snap->density.n != 0) fail(op, "'", path, "': '/density/step' names step ", at[(size_t)d], " twice");
      // a row: finite nodes with finite weights >= 0 summing to 1, then NaN nodes with weight 0
      std::vector<double> px, py;
      double sum = 0;
      for (int64_t i = 0; i < width; i++) {
        const double node = x[(size_t)(d * width + i)], w = y[(size_t)(d * width + i)];
        if (std::isnan(node) && w == 0) continue;
        if (!std::isfinite(node) || std::abs(node) > 1e300 || !std::isfinite(w) || w < 0)
          fail(op, "'", path, "': the density of step ", at[(size_t)d], " has node ", node, " with weight ", w,
               " (expected finite nodes with weights >= 0, or NaN nodes with weight 0)");
        px.push_back(node), py.push_back(w), sum += w;
      }
      if (px.empty() || std::abs(sum - 1) > 1e-6)
        fail(op, "'", path, "': the density of step ", at[(size_t)d], " has weights summing to ", sum,
             " over ", px.size(), " nodes (expected 1)");
      snap->density.n = n;
      snap->density.nodes = {px};
      snap->density.weights = {py};
    }
  }
  return log;
}

void Log::write_csv(const std::string& path) const {
  std::string s = "step,module,layer,head";
  for (const std::string& q : kQuantities) s += "," + q;
  s += "\n";
  char b[64];
  for (const Snapshot& snap : snapshots)
    for (const std::string& m : modules)
      for (int64_t l = 0; l < layers; l++)
        for (int64_t h = 0; h < heads; h++) {
          s += cat_str(snap.step, ",", m, ",", l + 1, ",", h + 1);
          for (const std::string& q : kQuantities) {
            std::snprintf(b, sizeof b, ",%.17g", snap.values.at(m).at(q)[(size_t)(l * heads + h)]);
            s += b;
          }
          s += "\n";
        }
  ember::io::replace_file(path, s.data(), s.size(), "watch::Log::write_csv");
}

}  // namespace ember::watch
