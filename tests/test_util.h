// Helpers shared by the test files.
#pragma once
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

#include "core/autograd.h"
#include "core/forward_ad.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "core/random.h"

namespace ember::testing {

// The inputs of a function under test, and such a function (one tensor out), as the op
// tables of the gradient and forward-mode tests write them.
using Inputs = std::vector<Tensor>;
using Fn = std::function<Tensor(const Inputs&)>;

// Where an input's values are drawn from, so each op is checked where it is smooth.
enum class Domain {
  Any,           // standard normal
  Positive,      // uniform in [0.5, 2)
  AwayFromZero,  // |x| uniform in [0.3, 1.5), random sign (abs, relu, divisors)
};

// Contiguous float64 values of the given shape, drawn from the domain.
inline Tensor draw(const Shape& s, Domain d, Generator& gen) {
  NoGradGuard ng;
  switch (d) {
    case Domain::Any: return normal(s, 0.0, 1.0, kFloat64, &gen);
    case Domain::Positive: return uniform(s, 0.5, 2.0, kFloat64, &gen);
    case Domain::AwayFromZero: {
      Tensor mag = uniform(s, 0.3, 1.5, kFloat64, &gen);
      Tensor sign = uniform(s, -1.0, 1.0, kFloat64, &gen);
      return where(lt(sign, 0.0), neg(mag), mag);
    }
  }
  return Tensor();
}

// x's values in a strided layout: a view whose elements sit at even, dim-reversed strides
// from offset 1 (the odd elements of a buffer [reversed(shape)..., 2], permuted back to x's
// shape). Not contiguous whenever x has more than one element.
inline Tensor strided(const Tensor& x) {
  const Shape& s = x.shape();
  Shape buf(s.rbegin(), s.rend());
  buf.push_back(2);
  Tensor t = zeros(buf, x.dtype()).select(-1, 1);
  std::vector<int64_t> rev(s.size());
  for (size_t i = 0; i < s.size(); i++) rev[i] = (int64_t)(s.size() - 1 - i);
  if (!rev.empty()) t = t.permute(rev);
  NoGradGuard ng;
  t.copy_(x);
  return t;
}

// What error_of gives when f throws nothing: a marker no expected message matches.
inline const std::string no_error = "<no ember::Error was thrown>";

// The message of the ember::Error that f throws. Any other exception escapes and fails
// the test; throwing nothing gives no_error.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return no_error;
}

// error_of(f), got in a child process that SIGALRM ends after `seconds`: a call that would
// wait or loop for ever (opening a FIFO, drawing a range it cannot divide) fails the test
// instead of hanging it, with the signal that ended the child as its message.
inline std::string error_of_within(unsigned seconds, const std::function<void()>& f) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    ::alarm(seconds);
    const std::string message = error_of(f);
    if (::write(fds[1], message.data(), message.size()) < 0) _exit(1);
    _exit(0);
  }
  ::close(fds[1]);
  std::string message;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) message.append(buf, (size_t)n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "<ended by signal " + std::to_string(sig) +
           (sig == SIGALRM ? ": still running after " + std::to_string(seconds) + " s>" : ">");
  }
  return message;
}

// A directory of the test case's own under the system's temporary directory, removed with
// everything in it when the case ends.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("ember_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  // The path of `name` in the directory.
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// Largest elementwise |a - b| (infinite where either is NaN); shapes must agree.
// A file's bytes, and a file made of given bytes (for damaging files on purpose).
inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), (std::streamsize)bytes.size());
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.defined());
  REQUIRE(b.defined());
  REQUIRE(a.shape() == b.shape());
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); i++)
    m = std::max(m, std::isnan(x[i]) || std::isnan(y[i]) ? INFINITY : std::fabs(x[i] - y[i]));
  return m;
}

// Runs `compute` with 1 thread and then with 2, checks that nothing changed the thread
// count meanwhile, and that every result is bitwise equal.
inline void check_same_with_1_and_2_threads(const std::function<std::vector<Tensor>()>& compute) {
  std::vector<Tensor> one, two;
  {
    NumThreadsGuard threads(1);
    REQUIRE(num_threads() == 1);
    one = compute();
    REQUIRE(num_threads() == 1);
  }
  {
    NumThreadsGuard threads(2);
    REQUIRE(num_threads() == 2);
    two = compute();
    REQUIRE(num_threads() == 2);  // nothing (OpenBLAS included) changed the thread count
  }
  REQUIRE(one.size() == two.size());
  for (size_t i = 0; i < one.size(); i++) {
    INFO("result " << i << " of shape " << shape_str(one[i].shape()));
    REQUIRE(one[i].defined());
    CHECK(equal(one[i], two[i]));
  }
}

// f on dual inputs (tangent v[i] where defined): {primal, tangent}, an undefined tangent as zeros.
inline std::pair<Tensor, Tensor> forward_jvp(const Fn& f, const Inputs& x, const Inputs& v) {
  DualLevel level;
  Inputs duals;
  for (size_t i = 0; i < x.size(); i++) duals.push_back(v[i].defined() ? make_dual(x[i], v[i]) : x[i]);
  const Tensor y = f(duals);
  UnpackedDual u = unpack_dual(y);
  Tensor t = u.tangent.defined() ? u.tangent.contiguous() : zeros_like(y);
  return {u.primal.detach(), t.detach()};
}

// J v of f at x along v (undefined v[i]: input i has no tangent), in float64, checked against
// reverse mode (<u, J v> == <J^T u, v> to 1e-12 of the terms' size, u random) and central
// differences (to 1e-6), its primal bitwise against f without a level; returned.
inline Tensor check_jvp(const Fn& f, const Inputs& x, const Inputs& v, Generator& gen) {
  auto dot = [](const Tensor& a, const Tensor& b) { return sum(mul(a, b)).item(); };
  auto abs_dot = [](const Tensor& a, const Tensor& b) { return sum(mul(abs(a), abs(b))).item(); };
  REQUIRE_FALSE(dual_level_open());
  const Tensor plain = f(x).detach();
  const auto [primal, jv] = forward_jvp(f, x, v);
  REQUIRE(jv.shape() == plain.shape());
  CHECK(equal(primal, plain));  // the values are untouched by the tangents

  // reverse mode: <u, J v> == <J^T u, v>
  Inputs leaves;
  for (const Tensor& xi : x) leaves.push_back(xi.detach().requires_grad_());
  const Tensor y = f(leaves);
  const Tensor u = randn(y.shape(), kFloat64, &gen);
  const std::vector<Tensor> g = grad({y}, leaves, {u}, {.allow_unused = true});
  double lhs = dot(u, jv), rhs = 0, scale = abs_dot(u, jv);
  for (size_t i = 0; i < x.size(); i++)
    if (v[i].defined() && g[i].defined()) rhs += dot(g[i], v[i]), scale += abs_dot(g[i], v[i]);
  INFO("<u, J v> = " << lhs << ", <J^T u, v> = " << rhs);
  CHECK(std::abs(lhs - rhs) <= 1e-12 * std::max(scale, 1e-300));

  // central differences along v
  const double eps = 1e-6;
  Inputs plus, minus;
  for (size_t i = 0; i < x.size(); i++) {
    plus.push_back(v[i].defined() ? add(x[i], mul(v[i], eps)) : x[i]);
    minus.push_back(v[i].defined() ? sub(x[i], mul(v[i], eps)) : x[i]);
  }
  const Tensor fd = div(sub(f(plus), f(minus)), 2 * eps);
  const double err = max_abs_diff(fd, jv), size = max_abs_diff(jv, zeros_like(jv));
  INFO("finite differences differ by " << err << " (|J v| up to " << size << ")");
  CHECK(err <= 1e-6 * std::max(1.0, size));
  return jv;
}

}  // namespace ember::testing
