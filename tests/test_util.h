// Helpers shared by the test files.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "core/ops.h"

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

}  // namespace ember::testing
