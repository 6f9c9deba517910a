// Eigenvalues, trace and spectral density of a symmetric matrix known only through its
// products with vectors - a loss's Hessian, whose Hessian-vector products double backward
// gives without ever forming it (nn/curvature.h builds that operator over any set of
// parameters). What PyHessian computes for PyTorch models:
//
//   top_eigen(A, n, k)          the k largest eigenvalues and their eigenvectors, by Lanczos
//                               with full reorthogonalisation (each step one product)
//   hutchinson(A, n, probes)    the trace as the mean of z^T A z over random sign vectors z,
//                               with its standard error; per block of the vector at once
//                               (each block's z^T A z estimates that block's trace)
//   spectral_density(A, n, ..)  the density of the eigenvalues by stochastic Lanczos
//                               quadrature: per probe, a Lanczos run's Ritz values as nodes
//                               and their first components squared as weights
//
// Vectors are float64 of length n, whatever the operator computes in; every result is a
// pure function of the operator, the arguments and the seed.
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace ember::curvature {

// A symmetric linear operator on vectors of length n: v -> A v (same length).
using Operator = std::function<std::vector<double>(const std::vector<double>&)>;

// Which end of the spectrum top_eigen finds.
enum class Order {
  Largest,    // the k largest eigenvalues (algebraically): the sharpest directions
  Magnitude,  // the k of largest absolute value (as power iteration finds them)
};

// How top_eigen runs.
struct LanczosOptions {
  int64_t max_steps = 100;  // at most this many products (capped at n)
  double tol = 1e-9;  // stop when every wanted Ritz pair's residual is below tol * |value|
  uint64_t seed = 0;  // of the random start vector
  Order order = Order::Largest;  // which eigenvalues are wanted
  // The start vector (normalised here; empty: random from seed) - an eigenvector found
  // before, for an operator that changed little, converges in fewer steps.
  std::vector<double> start;
};

// Eigenvalues in decreasing order (of value, or of magnitude), their unit eigenvectors,
// each pair's residual bound |A x - value x| and the number of products used.
struct Eigen {
  std::vector<double> values;  // decreasing
  std::vector<std::vector<double>> vectors;  // vectors[i] goes with values[i]
  std::vector<double> residuals;  // |A x - value x| for each pair (from the Lanczos recurrence)
  int64_t steps = 0;  // products of A used
  bool converged = false;  // every residual below tol * |value| (or the Krylov space exhausted)
};

// The k eigenpairs of A at the wanted end, by Lanczos with full reorthogonalisation from a
// random unit start (or options.start): stops when they have converged, the Krylov space
// is exhausted (then exact) or max_steps is reached. An Error when n < 1, k < 1 or k > n,
// max_steps < k, tol is not positive, start has neither n elements nor none or is zero,
// or A returns a vector of another length or with NaN or Inf.
Eigen top_eigen(const Operator& A, int64_t n, int64_t k, const LanczosOptions& options = {});

// A trace estimate: the mean of the probes' z^T A z and its standard error (the probes'
// standard deviation / sqrt(probes); the estimate is within 2 of them of the trace about
// 95% of the time).
struct Trace {
  double value = 0;  // the estimate
  double std_error = 0;  // its standard error (0 with one probe)
  int64_t probes = 0;  // the number of products used
};

// Hutchinson's estimate of A's trace from `probes` random sign vectors. An Error when
// n < 1, probes < 1 or A returns a vector of another length or with NaN or Inf.
Trace hutchinson(const Operator& A, int64_t n, int64_t probes, uint64_t seed = 0);

// The same probes estimating the trace of several diagonal blocks at once: blocks are
// {start, length} ranges of the vector (disjoint, within n); block i's estimate is the
// mean of z_i^T (A z)_i - the cross terms average to zero, so one product per probe
// serves every block, at the price of a larger error than a probe of the block alone.
std::vector<Trace> hutchinson_blocks(const Operator& A, int64_t n, const std::vector<std::pair<int64_t, int64_t>>& blocks,
                                     int64_t probes, uint64_t seed = 0);

// The eigenvalue density by stochastic Lanczos quadrature (Ghorbani et al. 2019; Lin, Saad
// and Yang 2016): per probe, the Ritz values of `steps` Lanczos steps from a random unit
// sign vector v, and their weights (the first components of the Ritz vectors, squared),
// which sum to 1. For a polynomial p of degree below 2 * steps, sum weights * p(nodes) is
// exactly v^T p(A) v, whose mean over v is trace(p(A)) / n.
struct SpectralDensity {
  int64_t n = 0;  // the operator's size
  std::vector<std::vector<double>> nodes;  // per probe, increasing
  std::vector<std::vector<double>> weights;  // per probe, summing to 1
  // The density at x, each node a Gaussian of width sigma: integrates to 1 over x.
  double at(double x, double sigma) const;
  // at() over the grid lo..hi in `points` steps (points >= 2).
  std::vector<double> on_grid(double lo, double hi, int64_t points, double sigma) const;
  // The estimate of trace(A): n times the mean over probes of sum weights * nodes.
  double trace() const;
  // The smallest and largest node of every probe.
  std::pair<double, double> range() const;
};

// The density from `probes` Lanczos runs of `steps` steps (capped at n). An Error when n < 1,
// steps < 1, probes < 1 or A returns a vector of another length or with NaN or Inf.
SpectralDensity spectral_density(const Operator& A, int64_t n, int64_t steps, int64_t probes, uint64_t seed = 0);

// The eigenvalues (increasing) and eigenvectors (row i goes with value i) of a dense
// symmetric n x n matrix, row-major (LAPACK's dsyevd): the reference the estimates are
// checked against, for matrices small enough to form. An Error when a.size() != n * n, a
// value is not finite, or a[i][j] and a[j][i] differ by more than 1e-6 of the largest value.
std::pair<std::vector<double>, std::vector<std::vector<double>>> dense_eigh(const std::vector<double>& a, int64_t n);

}  // namespace ember::curvature
