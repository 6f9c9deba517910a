#include "core/curvature.h"

#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <numeric>
#include <string>

#include "core/error.h"
#include "core/random.h"

extern "C" {
// LAPACK (in OpenBLAS): a symmetric tridiagonal and a dense symmetric eigenproblem.
void dstev_(const char* jobz, const int* n, double* d, double* e, double* z, const int* ldz, double* work,
            int* info);
void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w, double* work,
             const int* lwork, int* iwork, const int* liwork, int* info);
}

namespace ember::curvature {
namespace {

using Vec = std::vector<double>;

// BLAS's: vectorised, and the same result for the same thread count.
double dot(const Vec& a, const Vec& b) { return cblas_ddot(int(a.size()), a.data(), 1, b.data(), 1); }

void axpy(double alpha, const Vec& x, Vec& y) { cblas_daxpy(int(x.size()), alpha, x.data(), 1, y.data(), 1); }

// A number as %g prints it ("1e-09", not std::to_string's "0.000000").
std::string num(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  return b;
}

void check_size(const char* fn, int64_t n) {
  if (n < 1) throw Error(std::string(fn) + ": expected an operator size n >= 1, got " + std::to_string(n));
}

// A v, checked: the same length, every value finite.
Vec apply(const char* fn, const Operator& A, const Vec& v) {
  Vec out = A(v);
  if (out.size() != v.size())
    throw Error(std::string(fn) + ": the operator returned a vector of length " + std::to_string(out.size()) +
                " for one of length " + std::to_string(v.size()));
  for (double x : out)
    if (!std::isfinite(x)) throw Error(std::string(fn) + ": the operator returned NaN or Inf");
  return out;
}

// A random vector of +-1 entries.
Vec rademacher(Generator& g, int64_t n) {
  Vec z(n);
  uint64_t first = g.reserve(uint64_t(n));
  for (int64_t i = 0; i < n; ++i) z[i] = (g.draw(first + i) >> 63) ? 1.0 : -1.0;
  return z;
}

// A random unit vector, Gaussian in direction (Box-Muller on the generator's draws).
Vec random_unit(Generator& g, int64_t n) {
  Vec v(n);
  uint64_t first = g.reserve(2 * uint64_t(n));
  for (int64_t i = 0; i < n; ++i) {
    double u1 = (double(g.draw(first + 2 * i) >> 11) + 0.5) * 0x1.0p-53;  // in (0, 1)
    double u2 = g.uniform(first + 2 * i + 1);
    v[i] = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  double norm = std::sqrt(dot(v, v));
  for (double& x : v) x /= norm;
  return v;
}

// The eigenvalues (increasing) and eigenvectors (column-major, z[j * m + i] the i-th
// component of vector j) of the tridiagonal matrix with diagonal alpha and off-diagonal beta.
void tridiagonal_eigh(const Vec& alpha, const Vec& beta, Vec& values, Vec& z) {
  int m = int(alpha.size()), info = 0;
  values = alpha;
  Vec e(beta.begin(), beta.begin() + std::max(0, m - 1));
  e.resize(std::max(1, m - 1));
  z.assign(size_t(m) * m, 0.0);
  Vec work(std::max(1, 2 * m - 2));
  const char jobz = 'V';
  dstev_(&jobz, &m, values.data(), e.data(), z.data(), &m, work.data(), &info);
  if (info != 0) throw Error("curvature: LAPACK's dstev failed (info " + std::to_string(info) + ")");
}

// The Lanczos recurrence with full reorthogonalisation: the basis Q, alpha and beta (beta[j]
// couples q_j and q_{j+1}). Stops early when the Krylov space is exhausted (then
// `exhausted`) or when done(alpha, beta) says so (checked every few steps).
struct Lanczos {
  std::vector<Vec> q;
  Vec alpha, beta;
  bool exhausted = false;
};

Lanczos lanczos(const char* fn, const Operator& A, Vec start, int64_t steps,
                const std::function<bool(const Lanczos&)>& done) {
  Lanczos L;
  L.q.push_back(std::move(start));
  for (int64_t j = 0; j < steps; ++j) {
    Vec w = apply(fn, A, L.q[j]);
    double a = dot(L.q[j], w);
    L.alpha.push_back(a);
    axpy(-a, L.q[j], w);
    if (j > 0) axpy(-L.beta[j - 1], L.q[j - 1], w);
    // Twice is enough (Kahan, Parlett): what rounding leaves of the basis's directions.
    for (int pass = 0; pass < 2; ++pass)
      for (const Vec& qi : L.q) axpy(-dot(qi, w), qi, w);
    double b = std::sqrt(dot(w, w));
    double scale = 0;
    for (double x : L.alpha) scale = std::max(scale, std::abs(x));
    for (double x : L.beta) scale = std::max(scale, std::abs(x));
    if (j + 1 == int64_t(L.q[0].size()) || b <= 1e-12 * std::max(scale, 1e-300)) {
      L.exhausted = true;
      L.beta.push_back(b);
      break;
    }
    L.beta.push_back(b);
    if (j + 1 == steps || (done && done(L))) break;
    for (double& x : w) x /= b;
    L.q.push_back(std::move(w));
  }
  L.q.resize(L.alpha.size());
  return L;
}

// The indices of the Ritz values (increasing in `values`) at the wanted end, best first.
std::vector<int64_t> wanted(const Vec& values, int64_t k, Order order) {
  std::vector<int64_t> idx(values.size());
  std::iota(idx.begin(), idx.end(), 0);
  if (order == Order::Largest)
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return values[a] > values[b]; });
  else
    std::stable_sort(idx.begin(), idx.end(),
                     [&](int64_t a, int64_t b) { return std::abs(values[a]) > std::abs(values[b]); });
  idx.resize(std::min<int64_t>(k, int64_t(idx.size())));
  return idx;
}

}  // namespace

Eigen top_eigen(const Operator& A, int64_t n, int64_t k, const LanczosOptions& options) {
  check_size("top_eigen", n);
  if (k < 1 || k > n)
    throw Error("top_eigen: expected 1 <= k <= n (" + std::to_string(n) + "), got k = " + std::to_string(k));
  if (options.max_steps < k)
    throw Error("top_eigen: expected max_steps >= k (" + std::to_string(k) + "), got " +
                std::to_string(options.max_steps));
  if (!(options.tol > 0) || !std::isfinite(options.tol))
    throw Error("top_eigen: expected a positive, finite tol, got " + num(options.tol));
  Generator g(options.seed);
  int64_t steps = std::min(options.max_steps, n);
  // Residual of Ritz pair i after j steps: |beta_j * (last component of its vector)|.
  auto converged = [&](const Lanczos& L) {
    int64_t m = int64_t(L.alpha.size());
    if (m < k || (m % 4 != 0 && m != k)) return false;
    Vec values, z;
    tridiagonal_eigh(L.alpha, L.beta, values, z);
    for (int64_t i : wanted(values, k, options.order))
      if (std::abs(L.beta.back() * z[i * m + m - 1]) > options.tol * std::max(std::abs(values[i]), 1e-300))
        return false;
    return true;
  };
  Vec start = options.start;
  if (start.empty()) {
    start = random_unit(g, n);
  } else {
    if (int64_t(start.size()) != n)
      throw Error("top_eigen: expected a start vector of length " + std::to_string(n) + ", got " +
                  std::to_string(start.size()));
    const double norm = std::sqrt(dot(start, start));
    if (!(norm > 0) || !std::isfinite(norm)) throw Error("top_eigen: the start vector is zero or not finite");
    for (double& x : start) x /= norm;
  }
  Lanczos L = lanczos("top_eigen", A, std::move(start), steps, converged);
  int64_t m = int64_t(L.alpha.size());
  Vec values, z;
  tridiagonal_eigh(L.alpha, L.beta, values, z);
  Eigen out;
  out.steps = m;
  out.converged = true;
  for (int64_t i : wanted(values, k, options.order)) {
    Vec x(n, 0.0);
    for (int64_t j = 0; j < m; ++j) axpy(z[i * m + j], L.q[j], x);
    double residual = L.exhausted ? 0.0 : std::abs(L.beta.back() * z[i * m + m - 1]);
    out.values.push_back(values[i]);
    out.vectors.push_back(std::move(x));
    out.residuals.push_back(residual);
    if (residual > options.tol * std::max(std::abs(values[i]), 1e-300)) out.converged = false;
  }
  return out;
}

namespace {

std::vector<Trace> block_traces(const char* fn, const Operator& A, int64_t n,
                                const std::vector<std::pair<int64_t, int64_t>>& blocks, int64_t probes, uint64_t seed) {
  check_size(fn, n);
  if (probes < 1) throw Error(std::string(fn) + ": expected probes >= 1, got " + std::to_string(probes));
  if (blocks.empty()) throw Error(std::string(fn) + ": expected at least one block, got none");
  std::vector<std::pair<int64_t, int64_t>> sorted = blocks;
  std::sort(sorted.begin(), sorted.end());
  int64_t end = 0;
  for (auto [start, length] : sorted) {
    if (start < end || length < 1 || start > n || length > n - start)  // no start + length: it may overflow
      throw Error(std::string(fn) + ": expected disjoint blocks {start, length} within n = " + std::to_string(n) +
                  ", got {" + std::to_string(start) + ", " + std::to_string(length) + "}");
    end = start + length;
  }
  Generator g(seed);
  std::vector<Vec> samples(blocks.size());
  for (int64_t p = 0; p < probes; ++p) {
    Vec z = rademacher(g, n);
    Vec az = apply(fn, A, z);
    for (size_t b = 0; b < blocks.size(); ++b) {
      double s = 0;
      for (int64_t i = blocks[b].first; i < blocks[b].first + blocks[b].second; ++i) s += z[i] * az[i];
      samples[b].push_back(s);
    }
  }
  std::vector<Trace> out;
  for (const Vec& s : samples) {
    Trace t;
    t.probes = probes;
    t.value = std::accumulate(s.begin(), s.end(), 0.0) / double(probes);
    if (probes > 1) {
      double var = 0;
      for (double x : s) var += (x - t.value) * (x - t.value);
      t.std_error = std::sqrt(var / double(probes - 1) / double(probes));
    }
    out.push_back(t);
  }
  return out;
}

}  // namespace

std::vector<Trace> hutchinson_blocks(const Operator& A, int64_t n,
                                     const std::vector<std::pair<int64_t, int64_t>>& blocks, int64_t probes,
                                     uint64_t seed) {
  return block_traces("hutchinson_blocks", A, n, blocks, probes, seed);
}

Trace hutchinson(const Operator& A, int64_t n, int64_t probes, uint64_t seed) {
  check_size("hutchinson", n);
  return block_traces("hutchinson", A, n, {{0, n}}, probes, seed)[0];
}

SpectralDensity spectral_density(const Operator& A, int64_t n, int64_t steps, int64_t probes, uint64_t seed) {
  check_size("spectral_density", n);
  if (steps < 1) throw Error("spectral_density: expected steps >= 1, got " + std::to_string(steps));
  if (probes < 1) throw Error("spectral_density: expected probes >= 1, got " + std::to_string(probes));
  Generator g(seed);
  SpectralDensity d;
  d.n = n;
  for (int64_t p = 0; p < probes; ++p) {
    Vec v = rademacher(g, n);
    for (double& x : v) x /= std::sqrt(double(n));
    Lanczos L = lanczos("spectral_density", A, std::move(v), std::min(steps, n), nullptr);
    int64_t m = int64_t(L.alpha.size());
    Vec values, z;
    tridiagonal_eigh(L.alpha, L.beta, values, z);
    Vec w(m);
    for (int64_t i = 0; i < m; ++i) w[i] = z[i * m] * z[i * m];
    d.nodes.push_back(std::move(values));
    d.weights.push_back(std::move(w));
  }
  return d;
}

namespace {

// Nodes and weights of the same shape, at least one probe with a node: an Error naming fn.
void check_density(const SpectralDensity& d, const char* fn) {
  bool any = false;
  if (d.weights.size() != d.nodes.size())
    throw Error(std::string(fn) + ": expected weights for each of the " + std::to_string(d.nodes.size()) +
                " probes' nodes, got " + std::to_string(d.weights.size()));
  for (size_t p = 0; p < d.nodes.size(); ++p) {
    if (d.weights[p].size() != d.nodes[p].size())
      throw Error(std::string(fn) + ": probe " + std::to_string(p) + " has " + std::to_string(d.nodes[p].size()) +
                  " nodes and " + std::to_string(d.weights[p].size()) + " weights");
    any = any || !d.nodes[p].empty();
  }
  if (!any) throw Error(std::string(fn) + ": the density has no nodes");
}

}  // namespace

double SpectralDensity::at(double x, double sigma) const {
  check_density(*this, "SpectralDensity::at");
  if (!(sigma > 0) || !std::isfinite(sigma)) throw Error("SpectralDensity::at: expected a positive, finite sigma, got " + num(sigma));
  double s = 0;
  for (size_t p = 0; p < nodes.size(); ++p)
    for (size_t i = 0; i < nodes[p].size(); ++i) {
      double u = (x - nodes[p][i]) / sigma;
      s += weights[p][i] * std::exp(-0.5 * u * u);
    }
  return s / (double(nodes.size()) * sigma * 2.5066282746310002);
}

std::vector<double> SpectralDensity::on_grid(double lo, double hi, int64_t points, double sigma) const {
  if (points < 2 || !(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi))
    throw Error("SpectralDensity::on_grid: expected points >= 2 and finite lo < hi, got " + std::to_string(points) +
                " points over [" + num(lo) + ", " + num(hi) + "]");
  if (points > (int64_t(1) << 24))
    throw Error("SpectralDensity::on_grid: expected at most 2^24 points, got " + std::to_string(points));
  std::vector<double> out;
  for (int64_t i = 0; i < points; ++i) out.push_back(at(lo + (hi - lo) * double(i) / double(points - 1), sigma));
  return out;
}

double SpectralDensity::trace() const {
  check_density(*this, "SpectralDensity::trace");
  double s = 0;
  for (size_t p = 0; p < nodes.size(); ++p)
    for (size_t i = 0; i < nodes[p].size(); ++i) s += weights[p][i] * nodes[p][i];
  return double(n) * s / double(nodes.size());
}

std::pair<double, double> SpectralDensity::range() const {
  check_density(*this, "SpectralDensity::range");
  double lo = INFINITY, hi = -INFINITY;
  for (const Vec& v : nodes)
    if (!v.empty()) lo = std::min(lo, v.front()), hi = std::max(hi, v.back());
  return {lo, hi};
}

std::pair<std::vector<double>, std::vector<std::vector<double>>> dense_eigh(const std::vector<double>& a, int64_t n) {
  check_size("dense_eigh", n);
  if (int64_t(a.size()) != n * n)
    throw Error("dense_eigh: expected " + std::to_string(n) + " x " + std::to_string(n) + " = " +
                std::to_string(n * n) + " values, got " + std::to_string(a.size()));
  double scale = 0;
  for (int64_t i = 0; i < n * n; ++i) {
    if (!std::isfinite(a[i]))
      throw Error("dense_eigh: expected finite values, got " + num(a[i]) + " at [" + std::to_string(i / n) + ", " +
                  std::to_string(i % n) + "]");
    scale = std::max(scale, std::abs(a[i]));
  }
  // symmetric to rounding (a Hessian formed from products is), relative to the largest value
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < i; ++j) {
      const double a_ij = a[i * n + j], a_ji = a[j * n + i];
      if (std::abs(a_ij - a_ji) > 1e-6 * scale)
        throw Error("dense_eigh: expected a symmetric matrix, got [" + std::to_string(i) + ", " + std::to_string(j) +
                    "] = " + num(a_ij) + " and [" + std::to_string(j) + ", " + std::to_string(i) + "] = " + num(a_ji));
    }
  int ni = int(n), info = 0, lwork = -1, liwork = -1, iquery = 0;
  Vec m = a, w(n), query(1);
  const char jobz = 'V', uplo = 'U';
  dsyevd_(&jobz, &uplo, &ni, m.data(), &ni, w.data(), query.data(), &lwork, &iquery, &liwork, &info);
  lwork = int(query[0]), liwork = iquery;
  Vec work(std::max(1, lwork));
  std::vector<int> iwork(std::max(1, liwork));
  dsyevd_(&jobz, &uplo, &ni, m.data(), &ni, w.data(), work.data(), &lwork, iwork.data(), &liwork, &info);
  if (info != 0) throw Error("dense_eigh: LAPACK's dsyevd failed (info " + std::to_string(info) + ")");
  // Column-major in LAPACK's view of the row-major (symmetric) input: vector j is row j.
  std::vector<Vec> vectors(n, Vec(n));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < n; ++i) vectors[j][i] = m[j * n + i];
  return {w, vectors};
}

}  // namespace ember::curvature
