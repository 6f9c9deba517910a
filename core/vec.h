// Building blocks for row kernels that the compiler can vectorise: sums and maxima kept
// in independent lanes (a fixed order, so results never depend on threads or on the
// vector width), and an exp for float built from arithmetic and integer operations
// only (libm's expf is a scalar call that stops a loop from vectorising).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace ember::vec {

constexpr int kLanes = 8;

// sum over c in [0, n) of f(c), accumulated in Acc: in blocks of 32, lane k takes the
// elements k mod 32 (four vectors of eight, added in parallel: one chain of additions
// would wait on each addition's latency); the rest in eight lanes, then the tail one by
// one. The 32 lanes, then the 8, are added pairwise, in a fixed order.
template <class Acc, class F>
inline Acc lane_sum(int64_t n, F&& f) {
  constexpr int W = 4 * kLanes;
  Acc wide[W] = {};
  int64_t c = 0;
  for (; c + W <= n; c += W)
    for (int k = 0; k < W; k++) wide[k] += (Acc)f(c + k);
  Acc acc[kLanes] = {};
  for (; c + kLanes <= n; c += kLanes)
    for (int k = 0; k < kLanes; k++) acc[k] += (Acc)f(c + k);
  Acc tail = 0;
  for (; c < n; c++) tail += (Acc)f(c);
  for (int k = 0; k < kLanes; k++) acc[k] += (wide[k] + wide[k + 2 * kLanes]) + (wide[k + kLanes] + wide[k + 3 * kLanes]);
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

// max over c in [0, n) of x[c]; -inf for n == 0. NaN-propagating like std::max chains
// are not: a NaN element is ignored unless every element is NaN. Callers that must see
// NaN get it anyway from exp(NaN - max) downstream.
template <class T>
inline T lane_max(const T* x, int64_t n) {
  T acc[kLanes];
  for (int k = 0; k < kLanes; k++) acc[k] = -std::numeric_limits<T>::infinity();
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int k = 0; k < kLanes; k++) acc[k] = x[c + k] > acc[k] ? x[c + k] : acc[k];
  T m = -std::numeric_limits<T>::infinity();
  for (int k = 0; k < kLanes; k++) m = acc[k] > m ? acc[k] : m;
  for (; c < n; c++) m = x[c] > m ? x[c] : m;
  return m;
}

// e^x for float within a few ulp: x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor
// polynomial of degree 7, times 2^n made in the exponent bits (as 2^(n/2) 2^(n - n/2),
// so that both factors stay normal). Exactly 0 below ln(smallest normal), +inf above
// ln(largest float), NaN for NaN. Branch-free, so loops over it vectorise.
inline float exp(float x) {
  const float hi = 88.72283935546875f, lo = -87.33654022216797f;
  float xc = x > lo ? x : lo;  // NaN goes to lo here (and comes back as NaN at the end):
  xc = xc < hi ? xc : hi;      // converting NaN to an integer below would be undefined
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (xc * 1.44269502162933349609375f + shifter) - shifter;
  float r = xc - n * 0.693145751953125f;  // ln 2 split in a high part exact in float
  r = r - n * 1.428606765330187045e-06f;  // and the rest
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t ni = (int32_t)n, n1 = ni >> 1, n2 = ni - n1;
  const int32_t b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, sizeof s1);
  std::memcpy(&s2, &b2, sizeof s2);
  float y = p * s1 * s2;
  y = x < lo ? 0.0f : y;
  y = x > hi ? std::numeric_limits<float>::infinity() : y;
  return x != x ? x : y;
}
inline double exp(double x) { return std::exp(x); }

}  // namespace ember::vec
