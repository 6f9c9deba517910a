// The watch's measurements: per-head statistics of the softmax's input and output and of
// the gradients reaching them, measured on a probe batch through hooks and autograd::grad.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "core/autograd.h"
#include "core/error.h"
#include "lib/watch/detail.h"
#include "lib/watch/watch.h"

namespace ember::watch {

namespace {

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
      {"grad_scores_example_cv",
       "std / mean over the batch's examples of each example's norm of the gradient reaching the scores"},
      {"grad_scores_example_max_ratio",
       "largest / median over the batch's examples of each example's norm of the gradient reaching the scores"},
      {"max_logit", "the largest softmax input (scaled score) over the allowed pairs of the counted queries"},
      {"curvature_top",
       "largest eigenvalue of the loss's Hessian on the head's block (its rows of Wq, Wk, Wv and biases, its columns "
       "of Wo), by Lanczos; NaN where curvature was not measured"},
      {"curvature_trace", "trace of the loss's Hessian on the head's block (Hutchinson's estimate)"},
      {"curvature_trace_se", "the standard error of curvature_trace"},
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

}  // namespace

const std::vector<std::string> kQuantities = {
    "score_std",       "entropy_mean",      "entropy_p10",      "entropy_norm_mean", "entropy_norm_p10",
    "max_weight_mean", "saturated_share",   "grad_weights_norm", "grad_scores_norm",  "grad_ratio",
    "grad_q_proj_norm", "grad_k_proj_norm", "grad_scores_example_cv", "grad_scores_example_max_ratio",
    "max_logit",       "curvature_top",     "curvature_trace",  "curvature_trace_se"};

const std::set<std::string> kLaterQuantities = {"grad_scores_example_cv", "grad_scores_example_max_ratio",
                                                "max_logit", "curvature_top", "curvature_trace",
                                                "curvature_trace_se"};

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
    std::vector<double> example_dz2((size_t)B, 0.0);  // each example's |dL/dZ|^2 over its pairs
    std::vector<bool> example_counted((size_t)B, false);
    double saturated = 0, dp2 = 0, dz2 = 0, max_logit = -std::numeric_limits<double>::infinity();
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
          if (std::isnan(z[row + j]) || z[row + j] > max_logit) max_logit = z[row + j];  // NaN stays
          if (pj > 0) ent -= pj * std::log(pj);
          if (!(pj >= 0)) ent = top = kNaN;  // not a probability (NaN): nothing to report
          top = std::isnan(top) ? top : std::max(top, pj);
          dp2 += dp[row + j] * dp[row + j];
          dz2 += dz[row + j] * dz[row + j];
          example_dz2[(size_t)b] += dz[row + j] * dz[row + j];
        }
        example_counted[(size_t)b] = true;
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
    out["max_logit"][k] = largest.empty() ? kNaN : max_logit;
    // how unevenly the examples' gradients reach the head (each example's norm is its own
    // gradient's: the loss is a sum over examples, and example b's scores see only its own)
    std::vector<double> norms;
    for (int64_t b = 0; b < B; b++)
      if (example_counted[(size_t)b]) norms.push_back(std::sqrt(example_dz2[(size_t)b]));
    const double m = mean_of(norms);
    if (norms.size() >= 2 && m > 0) {
      double var = 0;
      for (double x : norms) var += (x - m) * (x - m);
      out["grad_scores_example_cv"][k] = std::sqrt(var / double(norms.size())) / m;
      const double median = quantile(norms, 0.5);
      out["grad_scores_example_max_ratio"][k] =
          median > 0 ? *std::max_element(norms.begin(), norms.end()) / median : kNaN;
    }
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

}  // namespace ember::watch
