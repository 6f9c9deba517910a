// Helpers shared by the test files.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/parallel.h"

namespace ember::testing {

// The message of the ember::Error that f throws. Any other exception escapes and fails
// the test; throwing nothing gives a marker no expectation matches.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no ember::Error was thrown>";
}

// Largest elementwise |a - b| (infinite where either is NaN); shapes must agree.
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

}  // namespace ember::testing
