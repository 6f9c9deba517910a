// Curvature from Hessian-vector products (core/curvature.h, nn/curvature.h): Lanczos's top
// eigenpairs, Hutchinson's trace and stochastic Lanczos quadrature's density, first on
// matrices whose spectrum is known, then on the loss Hessian of a whole Transformer of
// about 1,700 parameters in float64, against the dense Hessian (ember::hessian, one backward
// per parameter) and LAPACK's dsyevd: the whole model, one attention head's block, fused and
// tiled attention.
#include <catch2/catch.hpp>
#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/autograd_functional.h"
#include "core/curvature.h"
#include "core/ops.h"
#include "core/random.h"
#include "nn/attention.h"
#include "nn/curvature.h"
#include "nn/functional.h"
#include "nn/transformer.h"
#include "tiny_model.h"

using namespace ember;
using ember::testing::error_of;

namespace {

using Vec = std::vector<double>;

// A dense symmetric matrix as an operator.
curvature::Operator matrix_operator(const Vec& a, int64_t n) {
  return [a, n](const Vec& v) {
    Vec out(n, 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) out[i] += a[i * n + j] * v[j];
    return out;
  };
}

// Q diag(values) Q^T for a random orthogonal Q (from LAPACK's vectors of a random symmetric matrix).
Vec with_spectrum(const Vec& values, uint64_t seed) {
  int64_t n = int64_t(values.size());
  Generator g(seed);
  Vec r(n * n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) r[i * n + j] = r[j * n + i] = g.next_uniform() - 0.5;
  auto q = curvature::dense_eigh(r, n).second;
  Vec a(n * n, 0.0);
  for (int64_t k = 0; k < n; ++k)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) a[i * n + j] += values[k] * q[k][i] * q[k][j];
  return a;
}

double dot(const Vec& a, const Vec& b) { return std::inner_product(a.begin(), a.end(), b.begin(), 0.0); }

double trace_of(const Vec& a, int64_t n, int64_t start = 0, int64_t length = -1) {
  if (length < 0) length = n;
  double t = 0;
  for (int64_t i = start; i < start + length; ++i) t += a[i * n + i];
  return t;
}

// The square block of a on the given indices.
Vec sub_block(const Vec& a, int64_t n, const std::vector<int64_t>& idx) {
  int64_t m = int64_t(idx.size());
  Vec out(m * m);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < m; ++j) out[i * m + j] = a[idx[i] * n + idx[j]];
  return out;
}

}  // namespace

TEST_CASE("Lanczos finds the largest eigenpairs of a matrix of known spectrum") {
  const int64_t n = 60;
  Vec values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = std::sin(0.7 * double(i)) * 3.0;  // both signs
  values[7] = 25.0, values[31] = 24.0, values[44] = -40.0;  // two large ones and a larger negative one
  const Vec a = with_spectrum(values, 3);
  const curvature::Operator A = matrix_operator(a, n);

  const curvature::Eigen top = curvature::top_eigen(A, n, 3, {.seed = 1});
  Vec sorted = values;
  std::sort(sorted.rbegin(), sorted.rend());
  REQUIRE(top.values.size() == 3);
  CHECK(top.converged);
  CHECK(top.steps <= n);
  for (int i = 0; i < 3; ++i) {
    CHECK(std::abs(top.values[i] - sorted[i]) < 1e-9 * std::abs(sorted[i]));
    const Vec ax = A(top.vectors[i]);
    double r = 0;
    for (int64_t j = 0; j < n; ++j) r += std::pow(ax[j] - top.values[i] * top.vectors[i][j], 2);
    CHECK(std::sqrt(r) < 1e-7 * std::abs(sorted[i]));
    CHECK(std::abs(dot(top.vectors[i], top.vectors[i]) - 1) < 1e-12);
  }
  CHECK(std::abs(dot(top.vectors[0], top.vectors[1])) < 1e-9);

  const curvature::Eigen mag = curvature::top_eigen(A, n, 1, {.seed = 2, .order = curvature::Order::Magnitude});
  CHECK(std::abs(mag.values[0] - (-40.0)) < 1e-9 * 40);

  SECTION("a low-rank matrix exhausts the Krylov space: exact, in as many steps as its rank + 1") {
    Vec low(n, 0.0);
    low[0] = 5, low[1] = 2, low[2] = -1;
    const Vec b = with_spectrum(low, 9);
    const curvature::Eigen e = curvature::top_eigen(matrix_operator(b, n), n, 2, {.seed = 4});
    CHECK(e.steps <= 4);
    CHECK(e.converged);
    CHECK(std::abs(e.values[0] - 5) < 1e-12 * 5);
    CHECK(std::abs(e.values[1] - 2) < 1e-12 * 5);
  }
  SECTION("the same seed gives the same result bitwise; another seed another start") {
    const curvature::Eigen again = curvature::top_eigen(A, n, 3, {.seed = 1});
    CHECK(again.values == top.values);
    CHECK(again.vectors == top.vectors);
  }
}

TEST_CASE("Hutchinson's trace: exact on a diagonal, within its stated error otherwise, per block at once") {
  const int64_t n = 40;
  Vec d(n * n, 0.0);
  for (int64_t i = 0; i < n; ++i) d[i * n + i] = double(i) - 7.5;
  const curvature::Trace exact = curvature::hutchinson(matrix_operator(d, n), n, 5, 3);
  CHECK(exact.value == Approx(trace_of(d, n)).epsilon(1e-13));
  CHECK(exact.std_error == 0.0);  // z^T D z = trace(D) for every sign vector
  CHECK(exact.probes == 5);

  Vec values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = std::cos(double(i)) * 2 + 0.5;
  const Vec a = with_spectrum(values, 5);
  const int64_t probes = 400;
  const curvature::Trace t = curvature::hutchinson(matrix_operator(a, n), n, probes, 11);
  const double truth = trace_of(a, n);
  CHECK(std::abs(t.value - truth) < 4 * t.std_error);
  // The variance of z^T A z over sign vectors is 2 sum_{i != j} a_ij^2: the stated error agrees.
  double off = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) off += i == j ? 0 : a[i * n + j] * a[i * n + j];
  CHECK(t.std_error * std::sqrt(double(probes)) == Approx(std::sqrt(2 * off)).epsilon(0.15));

  const std::vector<std::pair<int64_t, int64_t>> blocks{{0, 10}, {10, 25}, {35, 5}};
  const auto per_block = curvature::hutchinson_blocks(matrix_operator(a, n), n, blocks, probes, 11);
  for (size_t b = 0; b < blocks.size(); ++b)
    CHECK(std::abs(per_block[b].value - trace_of(a, n, blocks[b].first, blocks[b].second)) <
          4 * per_block[b].std_error);

  CHECK_THROWS_WITH(curvature::hutchinson_blocks(matrix_operator(a, n), n, {{0, 10}, {5, 10}}, 3),
                    Catch::Contains("hutchinson_blocks: expected disjoint blocks"));
  CHECK_THROWS_WITH(curvature::hutchinson_blocks(matrix_operator(a, n), n, {{35, 10}}, 3),
                    Catch::Contains("within n = 40"));
}

TEST_CASE("stochastic Lanczos quadrature: its moments are the probes' exactly, its density the spectrum's") {
  const int64_t n = 30;
  Vec values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = double(i % 3) * 2 - 1 + 0.01 * double(i);  // three clusters
  const Vec a = with_spectrum(values, 8);
  const curvature::Operator A = matrix_operator(a, n);
  const curvature::SpectralDensity d = curvature::spectral_density(A, n, 8, 6, 21);
  REQUIRE(d.nodes.size() == 6);
  for (size_t p = 0; p < d.nodes.size(); ++p) {
    CHECK(std::accumulate(d.weights[p].begin(), d.weights[p].end(), 0.0) == Approx(1).epsilon(1e-12));
    CHECK(std::is_sorted(d.nodes[p].begin(), d.nodes[p].end()));
  }
  // sum w * theta is v^T A v, and sum w theta^2 is |A v|^2, for the same sign vectors
  // Hutchinson draws from the same seed: n times their means are its estimates.
  CHECK(d.trace() == Approx(curvature::hutchinson(A, n, 6, 21).value).epsilon(1e-10));
  const curvature::Operator A2 = [&](const Vec& v) { return A(A(v)); };
  double second = 0;
  for (size_t p = 0; p < d.nodes.size(); ++p)
    for (size_t i = 0; i < d.nodes[p].size(); ++i) second += d.weights[p][i] * d.nodes[p][i] * d.nodes[p][i];
  CHECK(double(n) * second / 6 == Approx(curvature::hutchinson(A2, n, 6, 21).value).epsilon(1e-10));

  // Three clusters, ten eigenvalues each: the smoothed density has a third of its mass
  // around each (steps = 8 >= the clusters' count resolves them).
  auto mass = [&](double lo, double hi) {
    const int64_t points = 400;
    const Vec grid = d.on_grid(lo, hi, points, 0.1);
    return std::accumulate(grid.begin(), grid.end(), 0.0) * (hi - lo) / double(points - 1);
  };
  CHECK(mass(-1.6, 0.0) == Approx(1.0 / 3).margin(0.03));
  CHECK(mass(0.5, 1.9) == Approx(1.0 / 3).margin(0.03));
  CHECK(mass(2.5, 3.9) == Approx(1.0 / 3).margin(0.03));
  CHECK(d.range().first > -1.0 - 1e-9);
  CHECK(d.range().second < 3.3 + 1e-9);
}

TEST_CASE("curvature's functions refuse what they cannot use, by name") {
  const Vec a{2, 1, 1, 3};
  const curvature::Operator A = matrix_operator(a, 2);
  CHECK_THROWS_WITH(curvature::top_eigen(A, 2, 3), Catch::Contains("top_eigen: expected 1 <= k <= n (2), got k = 3"));
  CHECK_THROWS_WITH(curvature::top_eigen(A, 0, 1), Catch::Contains("top_eigen: expected an operator size n >= 1, got 0"));
  CHECK_THROWS_WITH(curvature::top_eigen(A, 2, 2, {.max_steps = 1}), Catch::Contains("max_steps >= k"));
  CHECK_THROWS_WITH(curvature::hutchinson(A, 2, 0), Catch::Contains("hutchinson: expected probes >= 1, got 0"));
  CHECK_THROWS_WITH(curvature::spectral_density(A, 2, 0, 1), Catch::Contains("spectral_density: expected steps >= 1"));
  const curvature::Operator wrong = [](const Vec&) { return Vec(3, 0.0); };
  CHECK_THROWS_WITH(curvature::hutchinson(wrong, 2, 1),
                    Catch::Contains("the operator returned a vector of length 3 for one of length 2"));
  const curvature::Operator nan = [](const Vec& v) { return Vec(v.size(), NAN); };
  CHECK_THROWS_WITH(curvature::top_eigen(nan, 2, 1), Catch::Contains("top_eigen: the operator returned NaN or Inf"));
  CHECK_THROWS_WITH(curvature::dense_eigh({1, 2, 3}, 2), Catch::Contains("dense_eigh: expected 2 x 2 = 4 values, got 3"));
}

namespace {

// A Transformer of about 1,700 parameters in float64 and its loss on a padded batch.
struct TinyLoss {
  Generator gen{17};
  nn::Transformer model{ember::testing::tiny_transformer({.src_vocab = 7,
                                                          .tgt_vocab = 9,
                                                          .d_model = 8,
                                                          .num_heads = 2,
                                                          .dim_feedforward = 16,
                                                          .layers = 1,
                                                          .max_len = 8,
                                                          .dropout_p = 0.0}),
                        &gen, kFloat64};
  Tensor src = tensor({3, 4, 5, 2, 1, 6, 0, 0, 2, 2, 3, 0}, kInt64).reshape({3, 4});
  Tensor tgt_in = tensor({1, 3, 4, 5, 1, 8, 0, 0, 1, 2, 6, 0}, kInt64).reshape({3, 4});
  Tensor tgt_out = tensor({3, 4, 5, 2, 8, 2, 0, 0, 2, 6, 7, 0}, kInt64).reshape({3, 4});

  Tensor loss() {
    return nn::cross_entropy(model.forward(src, tgt_in).reshape({-1, 9}), tgt_out.reshape({-1}), 0);
  }
};

// The dense Hessian of the loss over every parameter, in named_parameters()' order, by
// ember::hessian at fresh leaves through functional_call: the reference.
Vec dense_reference(TinyLoss& t, int64_t& n) {
  const auto named = t.model.named_parameters();
  std::vector<Tensor> xs;
  for (const auto& [name, p] : named) xs.push_back(p.detach());
  auto f = [&](const std::vector<Tensor>& in) {
    nn::StateDict replaced;
    for (size_t i = 0; i < in.size(); ++i) replaced[named[i].first] = in[i];
    return t.model.functional_call(replaced, [&] { return t.loss(); });
  };
  const auto blocks = hessian(f, xs);
  std::vector<int64_t> offset{0};
  for (const Tensor& x : xs) offset.push_back(offset.back() + x.numel());
  n = offset.back();
  Vec h(n * n);
  for (size_t a = 0; a < xs.size(); ++a)
    for (size_t b = 0; b < xs.size(); ++b) {
      const Vec block = blocks[a][b].template to_vector<double>();
      const int64_t na = xs[a].numel(), nb = xs[b].numel();
      for (int64_t i = 0; i < na; ++i)
        for (int64_t j = 0; j < nb; ++j) h[(offset[a] + i) * n + offset[b] + j] = block[i * nb + j];
    }
  return h;
}

// The indices, in the whole model's flat vector, of a parameter set's elements.
std::vector<int64_t> flat_indices(const nn::Module& model, const nn::ParameterSet& set) {
  std::map<std::string, int64_t> offset;
  int64_t at = 0;
  for (const auto& [name, p] : model.named_parameters()) offset[name] = at, at += p.numel();
  std::vector<int64_t> idx;
  for (const nn::ParameterPart& part : set) {
    const Shape& s = part.param.shape();
    const int64_t base = offset.at(part.name);
    for (int64_t i = 0; i < part.param.numel(); ++i) {
      // the element's index along part.dim (row-major)
      int64_t stride = 1;
      for (int64_t d = int64_t(s.size()) - 1; d > part.dim && part.dim >= 0; --d) stride *= s[d];
      const int64_t along = part.dim < 0 ? 0 : (i / stride) % s[part.dim];
      if (part.dim < 0 || (along >= part.start && along < part.start + part.length)) idx.push_back(base + i);
    }
  }
  return idx;
}

// The model, its dense Hessian and that Hessian's eigenpairs, computed once for every section.
struct Reference {
  TinyLoss t;
  int64_t n = 0;
  Vec h;
  Vec values;  // increasing
  std::vector<Vec> vectors;
  Reference() {
    h = dense_reference(t, n);
    std::tie(values, vectors) = curvature::dense_eigh(h, n);
  }
};

Reference& reference() {
  static Reference r;
  return r;
}

}  // namespace

TEST_CASE("a Transformer's loss Hessian: eigenvalues, trace and density agree with the dense Hessian's") {
  Reference& r = reference();
  TinyLoss& t = r.t;
  const int64_t n = r.n;
  const Vec& ref = r.h;
  const Vec& values = r.values;
  const std::vector<Vec>& vectors = r.vectors;
  REQUIRE(n > 1500);
  REQUIRE(n < 2500);
  const double scale = std::max(std::abs(values.front()), std::abs(values.back()));

  const nn::ParameterSet all = nn::parameters_under(t.model);
  const nn::LossHessian h([&] { return t.loss(); }, all);
  CHECK(nn::numel(all) == n);
  CHECK(h.loss() == Approx(t.loss().item()).epsilon(1e-14));

  SECTION("the operator's dense form is the Hessian") {
    const Vec mine = h.dense(all);
    double worst = 0;
    for (int64_t i = 0; i < n * n; ++i) worst = std::max(worst, std::abs(mine[i] - ref[i]));
    CHECK(worst < 1e-10 * scale);
    CHECK(h.products() == n);
  }
  SECTION("the top eigenvalues to 1e-6, by Lanczos") {
    const curvature::Eigen top = curvature::top_eigen(h.on(all), n, 3, {.max_steps = 300, .tol = 1e-8, .seed = 1});
    for (int i = 0; i < 3; ++i) CHECK(std::abs(top.values[i] - values[n - 1 - i]) < 1e-6 * std::abs(values[n - 1 - i]));
    CHECK(std::abs(dot(top.vectors[0], vectors[n - 1])) > 1 - 1e-6);
    CHECK(h.products() == top.steps);
    const curvature::Eigen mag =
        curvature::top_eigen(h.on(all), n, 1, {.max_steps = 300, .tol = 1e-8, .order = curvature::Order::Magnitude});
    CHECK(std::abs(std::abs(mag.values[0]) - scale) < 1e-6 * scale);
  }
  SECTION("the trace within its stated error, and the density's mass where the eigenvalues are") {
    const double truth = trace_of(ref, n);
    const curvature::Trace tr = curvature::hutchinson(h.on(all), n, 30, 5);
    CHECK(std::abs(tr.value - truth) < 3 * tr.std_error);
    CHECK(tr.std_error < std::abs(truth));  // an estimate that says something
    const curvature::SpectralDensity d = curvature::spectral_density(h.on(all), n, 40, 4, 6);
    CHECK(d.trace() == Approx(curvature::hutchinson(h.on(all), n, 4, 6).value).epsilon(1e-8));
    CHECK(d.range().first >= values.front() - 1e-8 * scale);
    CHECK(d.range().second <= values.back() + 1e-8 * scale);
    CHECK(d.range().second == Approx(values.back()).epsilon(1e-6));  // Lanczos finds the extremes first
    // Most eigenvalues sit near zero, as for any network's Hessian: the share within
    // |lambda| < 1% of the largest, from the density and from the dense spectrum.
    const double w = 0.01 * scale;
    const int64_t near = std::count_if(values.begin(), values.end(), [&](double v) { return std::abs(v) < w; });
    const Vec grid = d.on_grid(-w, w, 201, w / 10);
    const double mass = std::accumulate(grid.begin(), grid.end(), 0.0) * 2 * w / 200;
    CHECK(mass == Approx(double(near) / double(n)).margin(0.1));
  }
  SECTION("one head's block: its dense form is the Hessian's block, its eigenvalues and trace too") {
    const nn::ParameterSet head = nn::head_parameters(t.model, "encoder.layers.0.self_attn", 1);
    REQUIRE(nn::numel(head) == 4 * 4 * 8 + 3 * 4);  // rows of Wq, Wk, Wv (+ biases), columns of Wo
    const std::vector<int64_t> idx = flat_indices(t.model, head);
    const Vec block = sub_block(ref, n, idx);
    const int64_t m = int64_t(idx.size());
    const Vec mine = h.dense(head);
    for (int64_t i = 0; i < m * m; ++i) REQUIRE(std::abs(mine[i] - block[i]) < 1e-10 * scale);
    const auto block_values = curvature::dense_eigh(block, m).first;
    const curvature::Eigen top = curvature::top_eigen(h.on(head), m, 2, {.tol = 1e-9});
    CHECK(std::abs(top.values[0] - block_values[m - 1]) < 1e-6 * std::abs(block_values[m - 1]));
    CHECK(std::abs(top.values[1] - block_values[m - 2]) < 1e-6 * std::abs(block_values[m - 1]));

    // Every head of every attention module at once: one product per probe for all blocks.
    nn::ParameterSet heads;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    std::vector<double> truths;
    for (const char* module : {"encoder.layers.0.self_attn", "decoder.layers.0.self_attn",
                               "decoder.layers.0.cross_attn"})
      for (int64_t hd = 0; hd < 2; ++hd) {
        const nn::ParameterSet one = nn::head_parameters(t.model, module, hd);
        ranges.push_back({nn::numel(heads), nn::numel(one)});
        truths.push_back(trace_of(sub_block(ref, n, flat_indices(t.model, one)), nn::numel(one)));
        heads.insert(heads.end(), one.begin(), one.end());
      }
    const auto traces = curvature::hutchinson_blocks(h.on(heads), nn::numel(heads), ranges, 60, 3);
    for (size_t b = 0; b < ranges.size(); ++b) CHECK(std::abs(traces[b].value - truths[b]) < 4 * traces[b].std_error);
  }
}

TEST_CASE("a head's curvature through tiled attention is the same as through fused attention") {
  TinyLoss t;
  const nn::ParameterSet head = nn::head_parameters(t.model, "decoder.layers.0.cross_attn", 0);
  Vec dense[2];
  int i = 0;
  for (nn::AttentionImpl impl : {nn::AttentionImpl::Fused, nn::AttentionImpl::Tiled}) {
    nn::AttentionImplGuard guard(impl);
    const nn::LossHessian h([&] { return t.loss(); }, nn::parameters_under(t.model));
    dense[i++] = h.dense(head);
  }
  double worst = 0, scale = 0;
  for (size_t k = 0; k < dense[0].size(); ++k)
    worst = std::max(worst, std::abs(dense[0][k] - dense[1][k])), scale = std::max(scale, std::abs(dense[0][k]));
  CHECK(scale > 0);
  CHECK(worst < 1e-11 * scale);
}

TEST_CASE("LossHessian and the parameter sets refuse what they cannot use, by name") {
  TinyLoss t;
  CHECK_THROWS_WITH(nn::head_parameters(t.model, "encoder.layers.0", 0),
                    Catch::Contains("head_parameters: \"encoder.layers.0\" is not a MultiHeadAttention of the model"));
  CHECK_THROWS_WITH(nn::head_parameters(t.model, "encoder.layers.0.self_attn", 2),
                    Catch::Contains("head_parameters: expected a head in [0, 2), got 2"));
  CHECK_THROWS_WITH(nn::parameters_under(t.model, "nothing"), Catch::Contains("no parameter's name starts with \"nothing\""));
  const nn::ParameterSet enc = nn::parameters_under(t.model, "encoder.");
  CHECK_THROWS_WITH(nn::LossHessian([] { return Tensor(); }, enc),
                    Catch::Contains("LossHessian: expected loss() to return a one-element float tensor, got an undefined tensor"));
  CHECK_THROWS_WITH(nn::LossHessian([&] { return t.model.forward(t.src, t.tgt_in); }, enc),
                    Catch::Contains("got [3,4,9] float64"));
  const nn::LossHessian h([&] { return t.loss(); }, enc);
  CHECK_THROWS_WITH(h.on(nn::parameters_under(t.model, "decoder.")),
                    Catch::Contains("is not among the parameters the Hessian was recorded for"));
  nn::ParameterSet twice = nn::head_parameters(t.model, "encoder.layers.0.self_attn", 0);
  twice.push_back(enc[0]);
  CHECK_THROWS_WITH(h.on(twice), Catch::Contains("overlap"));
  nn::ParameterPart out_of_range = enc[0];
  out_of_range.dim = 0, out_of_range.start = 7, out_of_range.length = 4;
  CHECK_THROWS_WITH(h.on({out_of_range}), Catch::Contains("out of range for a parameter of shape"));
  CHECK_THROWS_WITH(h.on(enc)(Vec(3, 0.0)), Catch::Contains("LossHessian: expected a vector of length"));
}

TEST_CASE("curvature's checks: overflowing blocks, densities of mismatched shapes, tolerances, symmetric input") {
  const Vec a{2, 1, 1, 3};
  const curvature::Operator A = matrix_operator(a, 2);
  CHECK_THROWS_WITH(curvature::hutchinson_blocks(A, 2, {{1, INT64_MAX}}, 3),
                    Catch::Contains("hutchinson_blocks: expected disjoint blocks {start, length} within n = 2"));
  CHECK_THROWS_WITH(curvature::hutchinson_blocks(A, 2, {{INT64_MAX, 2}}, 3), Catch::Contains("within n = 2"));
  CHECK_THROWS_WITH(curvature::hutchinson_blocks(A, 2, {}, 3), Catch::Contains("hutchinson_blocks: expected at least one block"));
  CHECK_THROWS_WITH(curvature::top_eigen(A, 2, 1, {.tol = INFINITY}), Catch::Contains("expected a positive, finite tol, got inf"));
  CHECK_THROWS_WITH(curvature::dense_eigh({1, 5, 0, 1}, 2), Catch::Contains("dense_eigh: expected a symmetric matrix, got [1, 0] = 0"));
  CHECK_THROWS_WITH(curvature::dense_eigh({1, NAN, NAN, 1}, 2), Catch::Contains("dense_eigh: expected finite values"));
  curvature::SpectralDensity d;
  d.n = 10;
  CHECK_THROWS_WITH(d.trace(), Catch::Contains("SpectralDensity::trace: expected weights for each of the 0 probes' nodes")
                                   || Catch::Contains("SpectralDensity::trace: the density has no nodes"));
  d.nodes = {{1, 2}};
  CHECK_THROWS_WITH(d.trace(), Catch::Contains("SpectralDensity::trace: expected weights for each of the 1 probes' nodes, got 0"));
  d.weights = {{0.5}};
  CHECK_THROWS_WITH(d.at(1, 0.5), Catch::Contains("SpectralDensity::at: probe 0 has 2 nodes and 1 weights"));
  d.weights = {{0.5, 0.5}};
  CHECK(d.trace() == Approx(15));
  CHECK_THROWS_WITH(d.at(1, 1e-9 * 0), Catch::Contains("expected a positive, finite sigma, got 0"));
  CHECK_THROWS_WITH(d.on_grid(0, INFINITY, 3, 1), Catch::Contains("expected points >= 2 and finite lo < hi"));
}

TEST_CASE("a loss linear in the parameters, or not reaching them, has a zero Hessian") {
  Generator g(3);
  const Tensor w = randn({3, 4}, kFloat64, &g).requires_grad_();
  const nn::ParameterSet set{{"w", w}};
  const nn::LossHessian linear([&] { return sum(mul(w, 2.0)); }, set);
  CHECK(linear.dense(set) == Vec(144, 0.0));
  CHECK(linear.gradient(set) == Vec(12, 2.0));
  const nn::LossHessian detached([&] { return sum(w.detach()); }, set);
  CHECK(detached.dense(set) == Vec(144, 0.0));
  CHECK(curvature::top_eigen(detached.on(set), 12, 1).values[0] == 0.0);
  nn::ParameterPart bad{"w", w, -2};
  CHECK_THROWS_WITH(linear.on({bad}), Catch::Contains("LossHessian::on: the part of w has dim -2 (expected -1 for the whole tensor"));
}
