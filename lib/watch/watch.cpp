// Watching attention learn: the measurement (hooks and autograd::grad on a probe batch),
// the per-head statistics, and the log's files and figures.
#include "lib/watch/watch.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <filesystem>
#include <set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/file_io.h"
#include "io/h5.h"
#include "lib/plot/plot.h"

namespace ember::watch {

using ember::cat_str;
using ember::fail;
using ember::Shape;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr const char* kFormat = "ember attention watch";
constexpr int64_t kVersion = 1;
// far past any model a CPU trains (a translator has at most 1024 layers, d_model 2^16)
constexpr int64_t kMaxLayers = 1024, kMaxHeads = 4096;
// a PNG holds at most 32767 pixels a side: figures show at most this many layers
constexpr int64_t kMaxFigureLayers = 64;

const std::map<std::string, std::string>& meanings() {
  static const std::map<std::string, std::string> m = {
      {"score_std", "std over allowed keys of the softmax's input (the scaled scores), averaged over queries"},
      {"entropy_mean", "attention entropy -sum p log p per query over allowed keys (nats), averaged over queries"},
      {"entropy_p10", "10th percentile over queries of the attention entropy (nats)"},
      {"entropy_norm_mean", "entropy / log(allowed keys), averaged over queries"},
      {"entropy_norm_p10", "10th percentile over queries of entropy / log(allowed keys)"},
      {"max_weight_mean", "the largest weight per query, averaged over queries"},
      {"saturated_share", "share of queries whose largest weight is above 0.99"},
      {"grad_weights_norm", "norm of the loss gradient reaching the weights (after softmax), allowed pairs"},
      {"grad_scores_norm", "norm of the loss gradient reaching the scores (before softmax), allowed pairs"},
      {"grad_ratio", "grad_scores_norm / grad_weights_norm: how much of the gradient the softmax lets through"},
      {"grad_q_proj_norm", "norm of the loss gradient reaching the head's rows of the query projection weight"},
      {"grad_k_proj_norm", "norm of the loss gradient reaching the head's rows of the key projection weight"},
  };
  return m;
}

// The p-th quantile (0..1) with linear interpolation between order statistics (NumPy's
// default); NaN for no values.
double quantile(std::vector<double> v, double p) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const double pos = p * double(v.size() - 1);
  const size_t lo = (size_t)std::floor(pos), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - double(lo)) * (v[hi] - v[lo]);
}

double mean_of(const std::vector<double>& v) {
  if (v.empty()) return kNaN;
  double s = 0;
  for (double x : v) s += x;
  return s / double(v.size());
}

// Frobenius norm of rows [first, first + count) of a matrix [R, C].
double rows_norm(const Tensor& m, int64_t first, int64_t count) {
  if (!m.defined()) return kNaN;
  const std::vector<double> v = m.narrow(0, first, count).to_vector<double>();
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

// A module's name is part of its figure's file name (prefix_<name>.png): a plain name
// keeps every figure inside the directory chosen for it. where says whose name it is.
void check_module_name(const std::string& name, const char* op, const std::string& where) {
  bool plain = !name.empty() && name.size() <= 64 && name[0] != '.';
  for (char c : name) plain = plain && (std::isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.');
  if (!plain)
    fail(op, where, "names module ", ember::printable(name),
         ", which cannot name a figure file (expected up to 64 letters, digits, '_', '-' and '.', not starting with '.')");
}

std::string label(const std::string& module) {
  if (module == "encoder_self") return "encoder self-attention";
  if (module == "decoder_self") return "decoder self-attention";
  if (module == "decoder_cross") return "decoder cross-attention";
  return module;
}

}  // namespace

const std::vector<std::string> kQuantities = {
    "score_std",       "entropy_mean",      "entropy_p10",      "entropy_norm_mean", "entropy_norm_p10",
    "max_weight_mean", "saturated_share",   "grad_weights_norm", "grad_scores_norm",  "grad_ratio",
    "grad_q_proj_norm", "grad_k_proj_norm"};

const std::string& meaning(const std::string& quantity) {
  auto it = meanings().find(quantity);
  if (it == meanings().end()) fail("watch::meaning", "no quantity '", quantity, "'");
  return it->second;
}

// ------------------------------------------------------------------ statistics

std::map<std::string, std::vector<double>> head_statistics(const Tensor& scores, const Tensor& weights,
                                                           const Tensor& dscores, const Tensor& dweights,
                                                           const Tensor& blocked, const Tensor& query_padding) {
  const char* op = "watch::head_statistics";
  if (!weights.defined() || weights.dim() != 4)
    fail(op, "expected weights [B, H, L, S], got ", weights.defined() ? cat_str("shape ", weights.shape()) : "none");
  const Shape shape = weights.shape();
  const int64_t B = shape[0], H = shape[1], L = shape[2], S = shape[3];
  auto check = [&](const Tensor& t, const char* name) {
    if (t.defined() && t.shape() != shape)
      fail(op, "expected ", name, " of the weights' shape ", shape, ", got ", t.shape());
  };
  check(scores, "scores");
  check(dscores, "dscores");
  check(dweights, "dweights");
  if (query_padding.defined() && query_padding.shape() != Shape{B, L})
    fail(op, "expected query_padding [B, L] = [", B, ",", L, "], got shape ", query_padding.shape());
  const std::vector<double> p = weights.to_vector<double>();
  const std::vector<double> z = scores.defined() ? scores.to_vector<double>() : std::vector<double>(p.size(), kNaN);
  const std::vector<double> dz = dscores.defined() ? dscores.to_vector<double>() : std::vector<double>(z.size(), 0.0);
  const std::vector<double> dp = dweights.defined() ? dweights.to_vector<double>() : std::vector<double>(z.size(), 0.0);
  const std::vector<double> block =
      blocked.defined() ? blocked.expand(shape).to_vector<double>() : std::vector<double>(z.size(), 0.0);
  const std::vector<double> pad =
      query_padding.defined() ? query_padding.to_vector<double>() : std::vector<double>((size_t)(B * L), 0.0);

  std::map<std::string, std::vector<double>> out;
  for (const std::string& q : kQuantities) out[q].assign((size_t)H, kNaN);
  for (int64_t h = 0; h < H; h++) {
    std::vector<double> spread, entropy, entropy_norm, largest;
    double saturated = 0, dp2 = 0, dz2 = 0;
    bool broken = false;  // some weight is NaN: the head's statistics are NaN
    for (int64_t b = 0; b < B; b++)
      for (int64_t i = 0; i < L; i++) {
        if (pad[(size_t)(b * L + i)] != 0) continue;
        const size_t row = (size_t)(((b * H + h) * L + i) * S);
        int64_t n = 0;
        double sum = 0;
        for (int64_t j = 0; j < S; j++)
          if (block[row + j] == 0) n++, sum += z[row + j];
        if (n < 2) continue;  // one key or none: the softmax has no choice to make
        const double mean = sum / double(n);
        double var = 0, ent = 0, top = 0;
        for (int64_t j = 0; j < S; j++) {
          if (block[row + j] != 0) continue;
          const double pj = p[row + j];
          var += (z[row + j] - mean) * (z[row + j] - mean);
          if (pj > 0) ent -= pj * std::log(pj);
          if (!(pj >= 0)) ent = top = kNaN;  // not a probability (NaN): nothing to report
          top = std::isnan(top) ? top : std::max(top, pj);
          dp2 += dp[row + j] * dp[row + j];
          dz2 += dz[row + j] * dz[row + j];
        }
        spread.push_back(std::sqrt(var / double(n)));
        entropy.push_back(ent);
        entropy_norm.push_back(ent / std::log(double(n)));
        largest.push_back(top);
        saturated += top > 0.99;
        broken = broken || std::isnan(top);
      }
    const size_t k = (size_t)h;
    if (broken) continue;  // every quantity stays NaN
    out["score_std"][k] = mean_of(spread);
    out["entropy_mean"][k] = mean_of(entropy);
    out["entropy_p10"][k] = quantile(entropy, 0.1);
    out["entropy_norm_mean"][k] = mean_of(entropy_norm);
    out["entropy_norm_p10"][k] = quantile(entropy_norm, 0.1);
    out["max_weight_mean"][k] = mean_of(largest);
    out["saturated_share"][k] = largest.empty() ? kNaN : saturated / double(largest.size());
    out["grad_weights_norm"][k] = std::sqrt(dp2);
    out["grad_scores_norm"][k] = std::sqrt(dz2);
    out["grad_ratio"][k] = dp2 > 0 ? std::sqrt(dz2 / dp2) : kNaN;
  }
  return out;
}

// ------------------------------------------------------------------ measuring

Snapshot measure(const Probe& probe, int64_t step) {
  const char* op = "watch::measure";
  if (!probe.model || !probe.loss || probe.sites.empty()) fail(op, "expected a model, a loss function and sites");
  struct Seen {
    Tensor scores, weights, blocked;
  };
  std::vector<Seen> seen(probe.sites.size());
  // the hooks come off and the model's mode comes back however this ends
  struct Restore {
    ember::nn::Module* model;
    bool training;
    std::vector<ember::HookHandle> hooks;
    ~Restore() {
      for (auto& h : hooks) h.remove();
      model->train(training);
    }
  } restore{probe.model, probe.model->is_training(), {}};
  for (size_t i = 0; i < probe.sites.size(); i++) {
    const Site& s = probe.sites[i];
    if (!s.attention) fail(op, "site ", s.module, " layer ", s.layer, " has no attention module");
    restore.hooks.push_back(s.attention->register_attention_hook(
        [&seen, i](ember::nn::MultiHeadAttention&, const ember::nn::AttentionInternals& a) {
          seen[i] = {a.scores, a.weights, a.blocked};
        }));
  }
  probe.model->eval();
  ember::GradModeGuard grad_on(true);
  const Tensor loss = probe.loss();
  if (!loss.defined() || loss.numel() != 1) fail(op, "the probe's loss must be one number");

  // the gradient reaching each site's scores, weights and query and key projections
  std::vector<Tensor> inputs;
  std::vector<int64_t> where;  // index in inputs, -1: not differentiable here
  auto want = [&](const Tensor& t) {
    where.push_back(t.defined() && t.requires_grad() ? (int64_t)inputs.size() : -1);
    if (where.back() >= 0) inputs.push_back(t);
  };
  for (size_t i = 0; i < probe.sites.size(); i++) {
    const Site& s = probe.sites[i];
    if (!seen[i].scores.defined())
      fail(op, "the probe's forward did not run the ", label(s.module), " of layer ", s.layer + 1);
    want(seen[i].scores);
    want(seen[i].weights);
    want(s.attention->q_proj->weight);
    want(s.attention->k_proj->weight);
  }
  std::vector<Tensor> grads;
  if (!inputs.empty()) grads = ember::grad({loss}, inputs, {}, {.allow_unused = true});
  auto grad_of = [&](size_t k) { return where[k] >= 0 ? grads[(size_t)where[k]] : Tensor(); };

  Snapshot snap;
  snap.step = step;
  Log shape = Log::for_sites(probe.sites);
  for (const std::string& m : shape.modules)
    for (const std::string& q : kQuantities) snap.values[m][q].assign((size_t)(shape.layers * shape.heads), kNaN);
  for (size_t i = 0; i < probe.sites.size(); i++) {
    const Site& s = probe.sites[i];
    auto pad = probe.query_padding.find(s.module);
    auto stats = head_statistics(seen[i].scores, seen[i].weights, grad_of(4 * i), grad_of(4 * i + 1), seen[i].blocked,
                                 pad == probe.query_padding.end() ? Tensor() : pad->second);
    const int64_t H = s.attention->num_heads, d = s.attention->head_dim;
    for (int64_t h = 0; h < H; h++) {
      stats["grad_q_proj_norm"][(size_t)h] = rows_norm(grad_of(4 * i + 2), h * d, d);
      stats["grad_k_proj_norm"][(size_t)h] = rows_norm(grad_of(4 * i + 3), h * d, d);
    }
    for (auto& [q, v] : stats)
      std::copy(v.begin(), v.end(), snap.values[s.module][q].begin() + s.layer * shape.heads);
  }
  return snap;
}

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
  const std::string joined = r.attr_string("/", "modules");
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
  log.snapshots.resize((size_t)C);
  for (int64_t c = 0; c < C; c++) log.snapshots[(size_t)c].step = step[(size_t)c];
  for (const std::string& m : log.modules)
    for (const std::string& q : kQuantities) {
      const std::string key = "/" + m + "/" + q;
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

// ------------------------------------------------------------------ figures

std::vector<std::string> Log::draw(const std::string& dir, const std::string& prefix) const {
  // one line per head: quantity q of module m, layer l, against the step (NaN points left out)
  auto panel = [&](const std::string& m, int64_t l, const std::string& q, const std::string& title,
                   const std::string& ylabel, double ymin, double ymax) {
    plot::Lines p;
    p.title = title;
    p.xlabel = "step";
    p.ylabel = ylabel;
    p.ymin = ymin, p.ymax = ymax;
    for (int64_t h = 0; h < heads; h++) {
      plot::Series s;
      s.label = "head " + std::to_string(h + 1);
      for (const Snapshot& snap : snapshots) {
        const double v = snap.values.at(m).at(q)[(size_t)(l * heads + h)];
        if (std::isfinite(v)) s.x.push_back(double(snap.step)), s.y.push_back(v);
      }
      p.series.push_back(s);
    }
    return p;
  };
  auto layer_name = [&](int64_t l) { return layers > 1 ? cat_str(", layer ", l + 1) : std::string(); };
  const int64_t shown = std::min(layers, kMaxFigureLayers);
  const std::string part = shown < layers ? cat_str(" (layers 1-", shown, " of ", layers, ")") : std::string();
  std::vector<std::string> written;
  const std::string base = dir + "/" + prefix + "_";
  const int width = 520, height = 340;
  for (const std::string& m : modules) check_module_name(m, "watch::Log::draw", "the log ");
  for (const std::string& m : modules) {
    std::vector<plot::Panel> panels;
    for (int64_t l = 0; l < shown; l++) {
      panels.push_back(panel(m, l, "entropy_norm_mean", "entropy / log(keys)" + layer_name(l), "mean over queries", 0, 1));
      panels.push_back(panel(m, l, "saturated_share", "saturated queries (top weight > 0.99)" + layer_name(l),
                             "share of queries", 0, 1));
    }
    const std::string file = base + m + ".png";
    plot::save_png(file, panels, 2, width, height, label(m) + ": how peaked each head's softmax is" + part);
    written.push_back(file);
  }
  auto grid = [&](const std::string& what, const std::string& q, const std::string& ylabel, const std::string& title) {
    std::vector<plot::Panel> panels;
    for (const std::string& m : modules)
      for (int64_t l = 0; l < shown; l++) panels.push_back(panel(m, l, q, label(m) + layer_name(l), ylabel, 0, 0));
    const std::string file = base + what + ".png";
    plot::save_png(file, panels, (int)std::min<int64_t>(shown, 3), width, height, title + part);
    written.push_back(file);
  };
  grid("grad_ratio", "grad_ratio", "|dL/dscores| / |dL/dweights|",
       "how much of the gradient reaching the weights the softmax passes to the scores");
  grid("score_spread", "score_std", "std of the scaled scores", "spread of the softmax's input per query");
  return written;
}

std::vector<double> average(const Log& log, const std::string& module, const std::string& quantity) {
  std::vector<double> out;
  for (const Snapshot& s : log.snapshots) {
    double sum = 0;
    int64_t n = 0;
    for (double v : s.values.at(module).at(quantity))
      if (std::isfinite(v)) sum += v, n++;
    out.push_back(n ? sum / double(n) : kNaN);
  }
  return out;
}

void draw_comparison(const std::vector<Log>& runs, const std::vector<std::string>& labels, const std::string& path) {
  const char* op = "watch::draw_comparison";
  if (runs.empty() || runs.size() != labels.size()) fail(op, "expected one label per run, got ", runs.size(), " runs and ", labels.size(), " labels");
  std::vector<std::string> modules;
  for (const std::string& m : runs[0].modules) {
    bool everywhere = true;
    for (const Log& r : runs) everywhere = everywhere && std::count(r.modules.begin(), r.modules.end(), m);
    if (everywhere) modules.push_back(m);
  }
  if (modules.empty()) fail(op, "the runs have no attention module in common");
  struct Column {
    const char* quantity;
    const char* title;
    double ymin, ymax;
  };
  const Column columns[] = {{"score_std", "score spread (std)", 0, 0},
                            {"entropy_norm_mean", "entropy / log(keys)", 0, 1},
                            {"saturated_share", "saturated queries", 0, 1},
                            {"grad_ratio", "|dL/dscores| / |dL/dweights|", 0, 0}};
  std::vector<plot::Panel> panels;
  for (const std::string& m : modules)
    for (const Column& c : columns) {
      plot::Lines p;
      p.title = label(m) + ": " + c.title;
      p.xlabel = "step";
      p.ylabel = "mean over layers and heads";
      p.ymin = c.ymin, p.ymax = c.ymax;
      for (size_t r = 0; r < runs.size(); r++) {
        plot::Series s;
        s.label = labels[r];
        const std::vector<double> v = average(runs[r], m, c.quantity);
        for (size_t i = 0; i < v.size(); i++)
          if (std::isfinite(v[i])) s.x.push_back(double(runs[r].snapshots[i].step)), s.y.push_back(v[i]);
        p.series.push_back(s);
      }
      panels.push_back(p);
    }
  plot::save_png(path, panels, 4, 420, 320, "the runs' attention, averaged over layers and heads");
}

std::string table(const Log& log, const Snapshot& s) {
  std::string out;
  char b[256];
  std::snprintf(b, sizeof b, "%-24s %5s %4s %9s %8s %8s %7s %6s %10s %10s %7s %10s %10s\n", "module", "layer", "head",
                "score std", "entropy", "H/logn", "max w", "sat.", "|dL/dP|", "|dL/dZ|", "ratio", "|dL/dWq|",
                "|dL/dWk|");
  out += b;
  for (const std::string& m : log.modules)
    for (int64_t l = 0; l < log.layers; l++)
      for (int64_t h = 0; h < log.heads; h++) {
        auto v = [&](const char* q) { return s.values.at(m).at(q)[(size_t)(l * log.heads + h)]; };
        if (std::isnan(v("grad_weights_norm")) && std::isnan(v("entropy_mean"))) continue;  // no such layer
        std::snprintf(b, sizeof b, "%-24s %5lld %4lld %9.3f %8.3f %8.3f %7.3f %5.1f%% %10.3e %10.3e %7.4f %10.3e %10.3e\n",
                      label(m).c_str(), (long long)(l + 1), (long long)(h + 1), v("score_std"), v("entropy_mean"),
                      v("entropy_norm_mean"), v("max_weight_mean"), 100 * v("saturated_share"), v("grad_weights_norm"),
                      v("grad_scores_norm"), v("grad_ratio"), v("grad_q_proj_norm"), v("grad_k_proj_norm"));
        out += b;
      }
  return out;
}

// ------------------------------------------------------------------ a run's watch

Recorder::Recorder(Probe probe, std::string dir, int64_t every, std::string program,
                   std::map<std::string, std::string> info)
    : probe_(std::move(probe)), dir_(std::move(dir)), program_(std::move(program)), every_(every) {
  if (every_ < 1) fail("watch::Recorder", "expected a positive interval, got ", every_);
  for (const Site& s : probe_.sites) check_module_name(s.module, "watch::Recorder", "the probe ");
  log_ = Log::for_sites(probe_.sites);
  log_.info = std::move(info);
}

void Recorder::resume(int64_t step) {
  const std::string path = h5_path();
  if (!std::filesystem::exists(path)) return;
  try {
    Log old = Log::read_h5(path);
    if (!old.same_shape(log_) || old.info != log_.info) {
      std::printf("%s: %s watched another model or probe batch: a new watch begins\n", program_.c_str(), path.c_str());
      return;
    }
    old.truncate_after(step);
    log_.snapshots = std::move(old.snapshots);
  } catch (const ember::Error& e) {
    std::printf("%s: a new watch begins, the old one cannot be read: %s\n", program_.c_str(), e.what());
  }
}

void Recorder::after_step(int64_t step) {
  if (step % every_ != 0) return;
  if (!log_.snapshots.empty() && log_.snapshots.back().step >= step) return;
  const auto start = std::chrono::steady_clock::now();
  log_.add(measure(probe_, step));
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  probes_++;
}

bool Recorder::write(bool figures) {
  const auto start = std::chrono::steady_clock::now();
  // each file on its own: one that cannot be written does not keep the others from being
  bool all = true;
  auto attempt = [&](const std::function<void()>& f) {
    try {
      f();
    } catch (const ember::Error& e) {
      if (!warned_) {
        std::fflush(stdout);
        std::fprintf(stderr, "%s: warning: training goes on without some of the watch's files: %s\n",
                     program_.c_str(), e.what());
      }
      warned_ = true;
      all = false;
    }
  };
  attempt([&] { log_.write_h5(h5_path()); });
  attempt([&] { log_.write_csv(dir_ + "/watch.csv"); });
  if (figures) attempt([&] { log_.draw(dir_); });
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return all;
}

std::string Recorder::finish(const std::string& probe, double training_seconds) {
  const bool wrote = write();
  char b[160];
  std::snprintf(b, sizeof b, "watch: %lld measurements of %s, %.1f s with the files (%.1f%% of training); ", (long long)probes_,
                probe.c_str(), seconds_, 100 * seconds_ / std::max(training_seconds, 1e-9));
  return b + (wrote ? cat_str(h5_path(), ", watch.csv and watch_*.png in ", dir_)
                    : std::string("(some files not written: see the warning)"));
}

}  // namespace ember::watch
