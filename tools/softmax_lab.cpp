// softmax_lab: how gradients flow back through softmax, in four experiments.
//
//  1. The Jacobian of p = softmax(x): the formula diag(p) - p p^T, the one autograd
//     gives (row i is the gradient of p_i, one backward per output), and central finite
//     differences, with their largest differences.
//  2. Saturation: scores drawn with standard deviation 1, 10 and 100, and dot products
//     q.k of random vectors with d_k from 8 to 1024, with and without the 1/sqrt(d_k)
//     scale. For each: the softmax's entropy, its largest probability, and the norm of
//     the gradient that reaches the scores from a random upstream gradient. A table on
//     the terminal, the same as CSV, and PNG plots.
//  3. Masks: blocked positions get exactly zero weight and zero gradient; a row with
//     every position blocked gives zero weights, a zero output and finite gradients.
//  4. Curvature: the Hessian of logsumexp(x), and of cross-entropy with respect to the
//     logits, computed by double backward, is the softmax Jacobian diag(p) - p p^T; and
//     its largest eigenvalue (power iteration on Hessian-vector products) as the scores'
//     scale grows, and for q.k with and without 1/sqrt(d_k): saturation seen as the
//     curvature of the loss collapsing. A table, CSV and a PNG plot.
//  5. Curvature through saturation in a whole attention layer: the Hessian of a
//     MultiHeadAttention's loss with respect to its parameters (Wq, Wk, Wv, Wo and biases)
//     as the score scale grows - its largest eigenvalue (Lanczos), its trace (Hutchinson),
//     the largest eigenvalue of each head's block, and its spectral density (stochastic
//     Lanczos quadrature), next to the share of saturated queries. A table, CSV and a PNG.
//
//   softmax_lab [--x 1,2,3,...] [--seed N] [--n N] [--trials N] [--out DIR]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "lib/cli/cli.h"
#include "core/autograd.h"
#include "core/autograd_functional.h"
#include "core/curvature.h"
#include "core/file_io.h"
#include "core/ops.h"
#include "nn/attention.h"
#include "nn/curvature.h"
#include "nn/functional.h"
#include "nn/multihead_attention.h"
#include "lib/plot/plot.h"

using namespace ember;

namespace {

using cli::UsageError;

void print_vector(const char* name, const std::vector<double>& v) {
  std::printf("%-10s", name);
  for (double x : v) std::printf(" %9.5f", x);
  std::printf("\n");
}

void print_matrix(const char* title, const std::vector<std::vector<double>>& m) {
  std::printf("%s\n", title);
  for (auto& row : m) {
    std::printf("  ");
    for (double x : row) std::printf(" %10.6f", x);
    std::printf("\n");
  }
}

double max_diff(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); i++)
    for (size_t j = 0; j < a[i].size(); j++) d = std::max(d, std::fabs(a[i][j] - b[i][j]));
  return d;
}

// ---------------------------------------------------------------- 1. the Jacobian

// Returns whether the three Jacobians agree (autograd to 1e-12, differences to 1e-6).
bool jacobian(const std::vector<double>& xv) {
  const int64_t n = (int64_t)xv.size();
  std::printf("== 1. The Jacobian of p = softmax(x), float64\n\n");
  Tensor x = from_vector(xv, {n}).requires_grad_();
  Tensor p = softmax(x, 0);
  std::vector<double> pv = p.to_vector<double>();
  print_vector("x", xv);
  print_vector("p", pv);
  std::printf("\n");

  std::vector<std::vector<double>> formula(n, std::vector<double>(n)), autograd(n), numeric(n, std::vector<double>(n));
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < n; j++) formula[i][j] = (i == j ? pv[i] : 0.0) - pv[i] * pv[j];
  for (int64_t i = 0; i < n; i++) {  // row i: the gradient of p_i, by one backward of e_i
    std::vector<double> e(n, 0.0);
    e[i] = 1;
    x.zero_grad();
    softmax(x, 0).backward(from_vector(e, {n}));
    autograd[i] = x.grad().to_vector<double>();
  }
  const double eps = 1e-6;
  for (int64_t j = 0; j < n; j++) {  // column j: central differences in x_j
    std::vector<double> plus = xv, minus = xv;
    plus[j] += eps, minus[j] -= eps;
    auto pp = softmax(from_vector(plus, {n}), 0).to_vector<double>();
    auto pm = softmax(from_vector(minus, {n}), 0).to_vector<double>();
    for (int64_t i = 0; i < n; i++) numeric[i][j] = (pp[i] - pm[i]) / (2 * eps);
  }
  print_matrix("diag(p) - p p^T (the formula)", formula);
  print_matrix("autograd (row i = backward of p_i)", autograd);
  print_matrix("central differences (eps 1e-6)", numeric);
  std::printf("\nlargest |autograd - formula|  %.3e\n", max_diff(autograd, formula));
  std::printf("largest |numeric - formula|   %.3e\n", max_diff(numeric, formula));
  double row_sum = 0;
  for (auto& r : formula) {
    double s = 0;
    for (double v : r) s += v;
    row_sum = std::max(row_sum, std::fabs(s));
  }
  std::printf("largest |row sum|             %.3e  (each row sums to zero: adding a constant to x changes nothing)\n\n",
              row_sum);
  return max_diff(autograd, formula) < 1e-12 && max_diff(numeric, formula) < 1e-6;
}

// ---------------------------------------------------------------- 2. saturation

struct Stats {
  double entropy = 0, max_p = 0, grad_norm = 0;
};

// Averages over trials of softmax over rows of scores [trials, n]: entropy (nats), the
// largest probability, and |d(sum(p * u))/d scores| for u ~ N(0, 1).
Stats stats_of(const Tensor& scores_in, Generator& gen) {
  Tensor scores = scores_in.detach().requires_grad_();
  Tensor p = softmax(scores, 1);
  Tensor u = randn(p.shape(), kFloat64, &gen);
  p.backward(u);
  const int64_t trials = p.size(0), n = p.size(1);
  auto pv = p.to_vector<double>();
  auto gv = scores.grad().to_vector<double>();
  Stats s;
  for (int64_t t = 0; t < trials; t++) {
    double h = 0, m = 0, g2 = 0;
    for (int64_t i = 0; i < n; i++) {
      double q = pv[t * n + i];
      if (q > 0) h -= q * std::log(q);
      m = std::max(m, q);
      g2 += gv[t * n + i] * gv[t * n + i];
    }
    s.entropy += h / trials, s.max_p += m / trials, s.grad_norm += std::sqrt(g2) / trials;
  }
  return s;
}

void saturation(int64_t n, int64_t trials, uint64_t seed, const std::string& out) {
  std::printf("== 2. Saturation: softmax over %lld scores, averages of %lld draws (uniform entropy ln %lld = %.3f)\n\n",
              (long long)n, (long long)trials, (long long)n, std::log((double)n));
  Generator gen(seed);
  std::ostringstream csv;
  csv << "experiment,std_or_dk,scaled,entropy,max_p,grad_norm\n";
  std::printf("%-22s %8s %10s %10s %12s\n", "scores", "", "entropy", "max p", "|grad|");

  std::vector<double> profile_1, profile_100;
  for (double sd : {1.0, 10.0, 100.0}) {
    Tensor scores = mul(randn({trials, n}, kFloat64, &gen), sd);
    Stats s = stats_of(scores, gen);
    std::printf("%-22s %8s %10.4f %10.4f %12.4e\n", ("N(0, " + std::to_string((int)sd) + "^2)").c_str(), "",
                s.entropy, s.max_p, s.grad_norm);
    csv << "std," << sd << ",," << s.entropy << "," << s.max_p << "," << s.grad_norm << "\n";
    if (sd == 1.0 || sd == 100.0) {  // the sorted probabilities of the first draw
      auto p = softmax(scores.select(0, 0), 0).to_vector<double>();
      std::sort(p.rbegin(), p.rend());
      (sd == 1.0 ? profile_1 : profile_100) = p;
    }
  }
  std::printf("\n%-22s %8s %10s %10s %12s\n", "q.k, q and k ~ N(0, 1)", "scaled", "entropy", "max p", "|grad|");
  std::vector<double> dks, grad_scaled, grad_unscaled, ent_scaled, ent_unscaled;
  for (int64_t dk = 8; dk <= 1024; dk *= 2) {
    Tensor q = randn({trials, 1, dk}, kFloat64, &gen), k = randn({trials, n, dk}, kFloat64, &gen);
    Tensor raw = matmul(q, k.mT()).reshape({trials, n});  // [trials, n], each of variance d_k
    dks.push_back((double)dk);
    for (bool scaled : {false, true}) {
      Stats s = stats_of(scaled ? div(raw, std::sqrt((double)dk)) : raw, gen);
      std::printf("%-22s %8s %10.4f %10.4f %12.4e\n", ("d_k = " + std::to_string(dk)).c_str(), scaled ? "yes" : "no",
                  s.entropy, s.max_p, s.grad_norm);
      csv << "dot," << dk << "," << (scaled ? 1 : 0) << "," << s.entropy << "," << s.max_p << "," << s.grad_norm << "\n";
      (scaled ? grad_scaled : grad_unscaled).push_back(s.grad_norm);
      (scaled ? ent_scaled : ent_unscaled).push_back(s.entropy);
    }
  }
  std::printf("\nUnscaled, the scores' standard deviation grows as sqrt(d_k): the softmax saturates to one\n"
              "position, its entropy falls towards 0 and the gradient reaching the scores vanishes. Scaled by\n"
              "1/sqrt(d_k), the scores keep unit variance and the gradient its size at every d_k.\n\n");

  std::vector<double> rank;
  for (int64_t i = 1; i <= n; i++) rank.push_back((double)i);
  plot::Lines profile{"softmax of " + std::to_string(n) + " scores, sorted", "rank", "probability",
                      {{"std 1", rank, profile_1}, {"std 100", rank, profile_100}}};
  profile.ymin = 0, profile.ymax = 1;
  plot::Lines grads{"gradient reaching the scores", "d_k", "|grad| (mean)",
                    {{"q.k / sqrt(d_k)", dks, grad_scaled}, {"q.k unscaled", dks, grad_unscaled}}};
  grads.log_x = grads.log_y = true;
  plot::Lines ent{"entropy of the softmax", "d_k", "entropy (nats)",
                  {{"q.k / sqrt(d_k)", dks, ent_scaled}, {"q.k unscaled", dks, ent_unscaled}}};
  ent.log_x = true;
  const std::string table = csv.str();
  io::replace_file(out + "/saturation.csv", table.data(), table.size(), "softmax_lab");
  plot::save_png(out + "/saturation_profile.png", {profile}, 1, 560, 380);
  plot::save_png(out + "/saturation_gradient.png", {grads, ent}, 2, 560, 380);
  std::printf("wrote %s/saturation.csv, %s/saturation_profile.png, %s/saturation_gradient.png\n\n", out.c_str(),
              out.c_str(), out.c_str());
}

// ---------------------------------------------------------------- 3. masks

// Returns whether blocked positions got exactly zero weight and gradient.
bool masks(uint64_t seed) {
  std::printf("== 3. Masks: scaled_dot_product_attention with blocked keys, float64\n\n");
  Generator gen(seed);
  const int64_t L = 3, S = 5, D = 4;
  Tensor q = randn({L, D}, kFloat64, &gen).requires_grad_();
  Tensor k = randn({S, D}, kFloat64, &gen).requires_grad_();
  Tensor v = randn({S, D}, kFloat64, &gen).requires_grad_();
  // query 0: keys 3 and 4 blocked (padding); query 1: key 4 blocked; query 2: all blocked
  std::vector<double> blocked = {0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1};
  auto mask = nn::AttentionMask::blocked(from_vector(blocked, {L, S}, kFloat64).to(kBool));
  auto r = nn::scaled_dot_product_attention(q, k, v, mask);
  Tensor u = randn(r.output.shape(), kFloat64, &gen);
  r.output.backward(u);
  auto w = r.weights.to_vector<double>();
  std::printf("weights [L=%lld, S=%lld] (x = blocked):\n", (long long)L, (long long)S);
  for (int64_t i = 0; i < L; i++) {
    std::printf("  query %lld:", (long long)i);
    for (int64_t j = 0; j < S; j++) std::printf(blocked[i * S + j] ? "   x %.3f" : "     %.3f", w[i * S + j]);
    std::printf("\n");
  }
  bool zero_weight = true;
  for (int64_t i = 0; i < L * S; i++) zero_weight = zero_weight && (!blocked[i] || w[i] == 0.0);
  // key 4 is blocked for every query: neither its key nor its value may get a gradient
  auto gk = k.grad().to_vector<double>(), gv = v.grad().to_vector<double>(), gq = q.grad().to_vector<double>();
  double gk_blocked = 0, gv_blocked = 0, out2 = 0, gq2 = 0;
  for (int64_t d = 0; d < D; d++) {
    gk_blocked = std::max(gk_blocked, std::fabs(gk[4 * D + d]));
    gv_blocked = std::max(gv_blocked, std::fabs(gv[4 * D + d]));
    out2 = std::max(out2, std::fabs(r.output.to_vector<double>()[2 * D + d]));
    gq2 = std::max(gq2, std::fabs(gq[2 * D + d]));
  }
  std::printf("\nevery blocked weight is exactly 0: %s\n", zero_weight ? "yes" : "NO");
  std::printf("key 4, blocked for every query: largest |grad| of its key %.1e and value %.1e\n", gk_blocked, gv_blocked);
  std::printf("query 2, every key blocked: weights all 0, largest |output| %.1e, largest |grad q| %.1e (finite)\n",
              out2, gq2);
  std::printf("(PyTorch gives NaN for a fully blocked row: softmax of all -inf.)\n");
  return zero_weight && gk_blocked == 0 && gv_blocked == 0 && out2 == 0 && std::isfinite(gq2);
}

// ---------------------------------------------------------------- 4. curvature

Tensor lse(const Tensor& z) { return logsumexp(z, {0}); }  // one row

// The largest eigenvalue of the Hessian of logsumexp at z (positive semi-definite), by
// power iteration on Hessian-vector products (two backward passes each, H never formed).
double largest_eigenvalue(const Tensor& z, Generator& gen) {
  Tensor v = randn(z.shape(), kFloat64, &gen);
  v = div(v, std::sqrt(sum(square(v)).item()));
  double lambda = 0;
  for (int it = 0; it < 60; it++) {
    Tensor w = hvp(lse, z, v).second;
    lambda = sum(mul(v, w)).item();
    const double norm = std::sqrt(sum(square(w)).item());
    if (!(norm > 1e-300)) return 0.0;  // saturated to one position: H is 0
    v = div(w, norm);
  }
  return lambda;
}

// Returns whether the double-backward Hessians equal the closed form (to 1e-12).
bool softmax_curvature(const std::vector<double>& xv, int64_t n, int64_t trials, uint64_t seed, const std::string& out) {
  std::printf("== 4. Curvature: the Hessian of logsumexp(x) and of cross-entropy by double backward, float64\n\n");
  const int64_t m = (int64_t)xv.size();
  Tensor x = from_vector(xv, {m});
  Tensor p = softmax(x, 0);
  auto pv = p.to_vector<double>();
  std::vector<std::vector<double>> closed(m, std::vector<double>(m)), h_lse(m), h_ce(m);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < m; j++) closed[i][j] = (i == j ? pv[i] : 0.0) - pv[i] * pv[j];
  Tensor target = zeros({1}, kInt64);  // any class: the target only shifts the gradient
  Tensor H1 = hessian(lse, x);
  Tensor H2 = hessian([&](const Tensor& z) { return nn::cross_entropy(z.unsqueeze(0), target); }, x);
  for (int64_t i = 0; i < m; i++) {
    h_lse[i] = H1.select(0, i).to_vector<double>();
    h_ce[i] = H2.select(0, i).to_vector<double>();
  }
  print_matrix("Hessian of logsumexp(x), by double backward", h_lse);
  std::printf("\nlargest |Hessian of logsumexp - (diag(p) - p p^T)|     %.3e\n", max_diff(h_lse, closed));
  std::printf("largest |Hessian of cross-entropy - (diag(p) - p p^T)| %.3e\n", max_diff(h_ce, closed));
  std::printf("(the gradient of logsumexp is p; its Jacobian, the curvature, is softmax's Jacobian)\n\n");

  Generator gen(seed ^ 0x5eed);
  const int64_t draws = std::min<int64_t>(trials, 50);
  std::ostringstream csv;
  csv << "experiment,std_or_dk,scaled,largest_eigenvalue\n";
  std::printf("largest eigenvalue of the Hessian, softmax over %lld scores, mean of %lld draws (uniform: 1/%lld = "
              "%.4f; one-hot: 0; at most 1/2)\n",
              (long long)n, (long long)draws, (long long)n, 1.0 / (double)n);
  std::printf("%-22s %8s %14s\n", "scores", "", "lambda_max");
  std::vector<double> stds, lam_std;
  for (double sd : {0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0}) {
    double lam = 0;
    for (int64_t t = 0; t < draws; t++) lam += largest_eigenvalue(mul(randn({n}, kFloat64, &gen), sd), gen) / draws;
    char label[32];
    std::snprintf(label, sizeof label, "N(0, %g^2)", sd);
    std::printf("%-22s %8s %14.4e\n", label, "", lam);
    csv << "std," << sd << ",," << lam << "\n";
    stds.push_back(sd);
    lam_std.push_back(lam);
  }
  std::printf("\n%-22s %8s %14s\n", "q.k, q and k ~ N(0, 1)", "scaled", "lambda_max");
  std::vector<double> dks, lam_scaled, lam_unscaled;
  for (int64_t dk = 8; dk <= 2048; dk *= 4) {
    dks.push_back((double)dk);
    for (bool scaled : {false, true}) {
      double lam = 0;
      for (int64_t t = 0; t < draws; t++) {
        Tensor q = randn({1, dk}, kFloat64, &gen), k = randn({n, dk}, kFloat64, &gen);
        Tensor z = matmul(q, k.mT()).reshape({n});
        lam += largest_eigenvalue(scaled ? div(z, std::sqrt((double)dk)) : z, gen) / draws;
      }
      std::printf("%-22s %8s %14.4e\n", ("d_k = " + std::to_string(dk)).c_str(), scaled ? "yes" : "no", lam);
      csv << "dot," << dk << "," << (scaled ? 1 : 0) << "," << lam << "\n";
      (scaled ? lam_scaled : lam_unscaled).push_back(lam);
    }
  }
  std::printf("\nThe curvature rises from the uniform softmax's 1/n while the scores spread out, peaks, then\n"
              "collapses as the softmax saturates to one position and the loss goes flat in every direction.\n"
              "Unscaled, q.k spreads as sqrt(d_k) and travels that whole curve as d_k grows; scaled by\n"
              "1/sqrt(d_k) it keeps unit variance, and its curvature stays the same at every d_k.\n\n");
  plot::Lines by_std{"curvature of logsumexp", "std of the scores", "largest eigenvalue", {{"N(0, std^2)", stds, lam_std}}};
  by_std.log_x = true;
  plot::Lines by_dk{"curvature for q.k", "d_k", "largest eigenvalue",
                    {{"q.k / sqrt(d_k)", dks, lam_scaled}, {"q.k unscaled", dks, lam_unscaled}}};
  by_dk.log_x = true;
  const std::string table = csv.str();
  io::replace_file(out + "/curvature.csv", table.data(), table.size(), "softmax_lab");
  plot::save_png(out + "/curvature.png", {by_std, by_dk}, 2, 560, 380);
  std::printf("wrote %s/curvature.csv, %s/curvature.png\n", out.c_str(), out.c_str());
  return max_diff(h_lse, closed) < 1e-12 && max_diff(h_ce, closed) < 1e-12;
}

// One attention layer's loss Hessian as its score scale grows: self-attention of a fixed
// batch with the same weights at every scale, loss the mean squared distance of its output
// from a fixed random target.
void attention_curvature(uint64_t seed, const std::string& out) {
  const int64_t B = 4, L = 12, E = 32, H = 4;
  Generator data_gen(seed + 7);
  const Tensor x = randn({B, L, E}, kFloat64, &data_gen), target = randn({B, L, E}, kFloat64, &data_gen);
  std::printf("5. curvature through saturation: one attention layer (d_model %lld, %lld heads, batch [%lld, %lld]), the\n"
              "   Hessian of its loss (mean squared error to a random target) over its %lld parameters, as the\n"
              "   score scale s grows (the scores are s * q.k / sqrt(d_k))\n\n",
              (long long)E, (long long)H, (long long)B, (long long)L, (long long)(4 * (E * E + E)));
  std::printf("%8s %10s %12s %12s %11s %12s %12s %12s\n", "scale", "saturated", "lambda_max", "trace", "trace s.e.",
              "head mean", "Wq,Wk", "Wv,Wo");
  std::ostringstream csv;
  csv << "score_scale,saturated_share,lambda_max,trace,trace_se,head_lambda_mean,qk_lambda_max,vo_lambda_max\n";
  std::vector<double> scales, lam, tr, head_lam, sat, qk_lam, vo_lam;
  plot::Lines density{"the Hessian's eigenvalue density", "eigenvalue", "density", {}};
  density.log_y = true;
  for (double scale : {0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0}) {
    Generator init(seed);
    nn::MultiHeadAttention mha({.embed_dim = E, .num_heads = H, .score_scale = scale, .gen = &init, .dtype = kFloat64});
    Tensor w = mha.forward(x, x, x, {.need_weights = nn::AttnWeights::PerHead}).weights.detach();
    const double saturated = mean(gt(amax(w, {-1}), 0.99).to(kFloat64)).item();
    auto loss = [&] { return mean(square(sub(mha.forward(x, x, x).output, target))); };
    const nn::ParameterSet all = nn::parameters_under(mha);
    const int64_t n = nn::numel(all);
    const nn::LossHessian h(loss, all);
    const curvature::Eigen top = curvature::top_eigen(h.on(all), n, 1, {.max_steps = 200, .tol = 1e-8, .seed = seed});
    const curvature::Trace t = curvature::hutchinson(h.on(all), n, 40, seed);
    double heads = 0;
    for (int64_t hd = 0; hd < H; hd++) {
      const nn::ParameterSet block = nn::head_parameters(mha, hd);
      heads += curvature::top_eigen(h.on(block), nn::numel(block), 1, {.max_steps = 200, .tol = 1e-8, .seed = seed}).values[0] / double(H);
    }
    // the projections before the softmax (queries and keys) and after it (values and output)
    auto block_top = [&](const std::string& a, const std::string& b) {
      nn::ParameterSet set = nn::parameters_under(mha, a);
      const nn::ParameterSet more = nn::parameters_under(mha, b);
      set.insert(set.end(), more.begin(), more.end());
      return curvature::top_eigen(h.on(set), nn::numel(set), 1, {.max_steps = 200, .tol = 1e-8, .seed = seed}).values[0];
    };
    const double qk = block_top("q_proj.", "k_proj."), vo = block_top("v_proj.", "out_proj.");
    std::printf("%8g %9.0f%% %12.4e %12.4e %11.2e %12.4e %12.4e %12.4e\n", scale, 100 * saturated, top.values[0],
                t.value, t.std_error, heads, qk, vo);
    csv << scale << "," << saturated << "," << top.values[0] << "," << t.value << "," << t.std_error << "," << heads
        << "," << qk << "," << vo << "\n";
    qk_lam.push_back(qk), vo_lam.push_back(vo);
    scales.push_back(scale), lam.push_back(top.values[0]), tr.push_back(t.value), head_lam.push_back(heads);
    sat.push_back(saturated);
    if (scale == 0.25 || scale == 2.0 || scale == 32.0) {
      const curvature::SpectralDensity d = curvature::spectral_density(h.on(all), n, 60, 3, seed);
      const auto [lo, hi] = d.range();
      const double span = std::max(hi - lo, 1e-12), pad = 0.05 * span;
      std::ostringstream label;
      label << "s = " << scale;
      plot::Series line{label.str(), {}, d.on_grid(lo - pad, hi + pad, 300, 0.01 * span)};
      const double peak = *std::max_element(line.y.begin(), line.y.end());
      for (int64_t i = 0; i < 300; i++) {
        line.x.push_back(lo - pad + (span + 2 * pad) * double(i) / 299);
        if (!(line.y[(size_t)i] > peak * 1e-6)) line.y[(size_t)i] = std::numeric_limits<double>::quiet_NaN();
      }
      density.series.push_back(line);
    }
  }
  std::printf("\nAs the scale grows, more queries saturate and their directions go flat, but the scores move\n"
              "s times faster with Wq and Wk, so their curvature grows as s^2 for every query not yet saturated:\n"
              "the Wq, Wk block's largest eigenvalue, and with it the layer's, rises by about 4x per doubling of s\n"
              "while the Wv, Wo block changes far less. Growing attention logits make the loss sharper, not\n"
              "flatter: the step size that stays stable (2 / lambda_max for gradient descent) shrinks.\n\n");
  plot::Lines by_scale{"one attention layer's Hessian: largest eigenvalue", "score scale s", "largest eigenvalue",
                       {{"all parameters", scales, lam}, {"Wq, Wk", scales, qk_lam}, {"Wv, Wo", scales, vo_lam},
                        {"a head's block (mean)", scales, head_lam}}};
  by_scale.log_x = by_scale.log_y = true;
  plot::Lines saturation{"saturated queries (top weight > 0.99)", "score scale s", "share", {{"saturated", scales, sat}}};
  saturation.log_x = true;
  saturation.ymin = 0, saturation.ymax = 1;
  const std::string table = csv.str();
  io::replace_file(out + "/attention_curvature.csv", table.data(), table.size(), "softmax_lab");
  plot::save_png(out + "/attention_curvature.png", {by_scale, saturation, density}, 3, 520, 380);
  std::printf("wrote %s/attention_curvature.csv, %s/attention_curvature.png\n", out.c_str(), out.c_str());
}

// --x: two to kMaxX finite numbers in [-kMaxAbsX, kMaxAbsX], separated by commas.
constexpr size_t kMaxX = 64;
constexpr double kMaxAbsX = 1000;  // beyond, x + 1e-6 loses the finite differences' step

std::vector<double> parse_list(const std::string& s) {
  std::vector<double> v;
  size_t from = 0;
  while (true) {
    const size_t comma = s.find(',', from);
    const std::string item = s.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    if (item.empty())
      throw UsageError{"--x needs numbers separated by commas, got an empty item in " + printable(s)};
    if (v.size() == kMaxX)
      throw UsageError{"--x needs at most " + std::to_string(kMaxX) + " numbers, got more in " + printable(s)};
    v.push_back(cli::parse_real("--x", item, -kMaxAbsX, kMaxAbsX));
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  if (v.size() < 2) throw UsageError{"--x needs at least two numbers, got " + printable(s)};
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run("softmax_lab", [&] {
    CLI::App app{"How gradients flow back through softmax: its Jacobian, saturation, masks and curvature.",
                 "softmax_lab"};
    std::string x_text, out = "runs/softmax_lab";
    int64_t seed = 1, n = 64, trials = 200;
    cli::text(app, "--x", x_text, "the scores of the Jacobian, e.g. 1,2,3 (default: 5 drawn from N(0, 1))");
    cli::integer(app, "--seed", seed, 0, std::numeric_limits<int64_t>::max(), "random seed");
    cli::integer(app, "--n", n, 2, int64_t(1) << 16, "scores per softmax in the saturation experiment");
    cli::integer(app, "--trials", trials, 1, 1000000, "draws averaged per row of the saturation table");
    cli::text(app, "--out", out, "directory for saturation.csv and the plots");
    cli::parse(app, argc, argv);
    std::vector<double> x;
    if (!x_text.empty() || app.count("--x")) x = parse_list(x_text);
    // the largest tensors: keys [trials, n, d_k] at d_k = 1024, and a few [trials, n]; the
    // curvature's keys [n, 2048]
    cli::check_fits_in_memory("softmax_lab", 8.0 * (double(trials) * double(n) * (1024 + 16) + double(n) * 2048),
                              "the saturation experiment with --n " + std::to_string(n) + " and --trials " +
                                  std::to_string(trials));
    cli::make_output_dir("--out", out);
    if (x.empty()) {
      Generator gen((uint64_t)seed);
      x = randn({5}, kFloat64, &gen).to_vector<double>();
    }
    const bool jacobians_agree = jacobian(x);
    saturation(n, trials, (uint64_t)seed, out);
    const bool masks_hold = masks((uint64_t)seed);
    std::printf("\n");
    const bool hessians_agree = softmax_curvature(x, n, trials, (uint64_t)seed, out);
    std::printf("\n");
    attention_curvature((uint64_t)seed, out);
    if (!jacobians_agree || !masks_hold || !hessians_agree) {
      std::fprintf(stderr, "softmax_lab: %s\n",
                   !jacobians_agree ? "the Jacobians disagree"
                   : !masks_hold    ? "a blocked position got weight or gradient"
                                    : "the double-backward Hessians disagree with diag(p) - p p^T");
      return 1;
    }
    return 0;
  });
}
