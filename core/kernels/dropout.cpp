// Dropout's loops (see dropout.h): one pass each way and no mask in memory, every
// decision made again from its row's key and its column.
#include "core/kernels/dropout.h"

#include <algorithm>

#include "core/parallel.h"

namespace ember::kernel {

namespace {

// With Relu, relu first: out = x * scale where x > 0 and kept, else 0, in the same pass.
// With Keep, each element's decision is written to kept too.
template <class T, bool Relu, bool Keep>
void dropout_apply(T* out, const T* in, int64_t rows, int64_t cols, const uint64_t* keys, const DropoutDraws& d,
                   uint8_t* kept) {
  parallel_for(rows, cols * cost::kExp, [&](int64_t b, int64_t e) {
    // what the loop reads, as locals (so that it vectorises: a byte store may alias anything)
    const Generator gen = d.gen;
    const uint64_t threshold = d.threshold;
    const int64_t n = cols;
    const T scale = T(d.scale);
    for (int64_t r = b; r < e; r++) {
      const uint64_t key = keys[r];
      const T* __restrict x = in + r * n;
      T* __restrict y = out + r * n;
      uint8_t* __restrict k = Keep ? kept + r * n : nullptr;
      for (int64_t c = 0; c < n; c++) {
        // x read unconditionally, and relu as max (NaN: 0), so that the loop vectorises
        const T value = (Relu ? std::max(T(0), x[c]) : x[c]) * scale;
        const bool drop = gen.below(key + (uint64_t)c, threshold);
        if constexpr (Keep) k[c] = !drop;
        y[c] = drop ? T(0) : value;
      }
    }
  });
}

// out = x * scale where kept, else 0: the decisions of an earlier dropout_apply
template <class T>
void kept_apply(T* out, const T* in, int64_t n, const uint8_t* kept, T scale) {
  parallel_for(n, cost::kCopy, [=](int64_t b, int64_t e) {
    T* __restrict o = out;
    const T* __restrict x = in;
    const uint8_t* __restrict k = kept;
    for (int64_t i = b; i < e; i++) {
      const T v = x[i] * scale;  // read unconditionally, so that the loop vectorises
      o[i] = k[i] ? v : T(0);
    }
  });
}

template <class T>
void relu_dropout_backward_of(T* pd, const T* pg, const T* py, int64_t n, T sc) {
  parallel_for(n, cost::kCopy, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) {
      const T kept = pg[i] * sc;  // read unconditionally, so that the loop vectorises
      pd[i] = py[i] > T(0) ? kept : T(0);
    }
  });
}

template <class T>
void dropout_rows_of(T* out, uint8_t* kept, const T* x, const uint64_t* keys, int64_t rows, int64_t cols,
                     const DropoutDraws& draws, bool relu) {
  if (relu) dropout_apply<T, true, false>(out, x, rows, cols, keys, draws, nullptr);
  else if (kept) dropout_apply<T, false, true>(out, x, rows, cols, keys, draws, kept);
  else dropout_apply<T, false, false>(out, x, rows, cols, keys, draws, nullptr);
}

}  // namespace

void dropout_rows(float* out, uint8_t* kept, const float* x, const uint64_t* keys, int64_t rows, int64_t cols,
                  const DropoutDraws& draws, bool relu) {
  dropout_rows_of(out, kept, x, keys, rows, cols, draws, relu);
}
void dropout_rows(double* out, uint8_t* kept, const double* x, const uint64_t* keys, int64_t rows, int64_t cols,
                  const DropoutDraws& draws, bool relu) {
  dropout_rows_of(out, kept, x, keys, rows, cols, draws, relu);
}
void dropout_kept(float* out, const float* x, const uint8_t* kept, int64_t n, float scale) {
  kept_apply<float>(out, x, n, kept, scale);
}
void dropout_kept(double* out, const double* x, const uint8_t* kept, int64_t n, double scale) {
  kept_apply<double>(out, x, n, kept, scale);
}
void relu_dropout_backward(float* dx, const float* dy, const float* y, int64_t n, float scale) {
  relu_dropout_backward_of(dx, dy, y, n, scale);
}
void relu_dropout_backward(double* dx, const double* dy, const double* y, int64_t n, double scale) {
  relu_dropout_backward_of(dx, dy, y, n, scale);
}

}  // namespace ember::kernel
