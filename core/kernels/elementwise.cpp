// Elementwise kernels: copies with conversion, fill, in-place add, the finiteness and
// int64-range checks, and the row offsets of a strided tensor.
#include "core/kernels/elementwise.h"

#include <atomic>

namespace ember {

void check_fits_int64(const Tensor& src, const char* op) {
  if (!is_floating(src.dtype())) return;
  const Tensor c = src.detach().contiguous();
  auto scan = [&](const auto* p) {
    for (int64_t i = 0; i < c.numel(); i++)
      if (!fits_int64((double)p[i]))
        fail(op, "element ", i, " (", (double)p[i], ") of a ", dtype_name(src.dtype()), " tensor of shape ", src.shape(),
             int64_refusal((double)p[i]));
  };
  if (src.dtype() == kBFloat16) return scan(c.data<BFloat16>());
  dispatch_float(src.dtype(), op, [&](auto tag) { scan(c.data<decltype(tag)>()); });
}

}  // namespace ember

namespace ember::kernel {

void copy(const Tensor& dst, const Tensor& src) {
  dispatch_all(dst.dtype(), [&](auto to) {
    using To = decltype(to);
    dispatch_all(src.dtype(), [&](auto ti) {
      using Ti = decltype(ti);
      map1<To, Ti>(dst, src, [](Ti v) {
        if constexpr (std::is_same_v<To, uint8_t>) return (uint8_t)(v != Ti(0));
        else return static_cast<To>(v);
      });
    });
  });
  dst.storage()->version++;
}

void fill(const Tensor& dst, double value) {
  dispatch_all(dst.dtype(), [&](auto to) {
    using To = decltype(to);
    To v = std::is_same_v<To, uint8_t> ? To(value != 0) : static_cast<To>(value);
    To* p = dst.data<To>();
    for_each_strided<1>(dst.shape(), {dst.strides()}, [&](const int64_t* off, int64_t n, const int64_t* s) {
      for (int64_t i = 0; i < n; i++) p[off[0] + i * s[0]] = v;
    });
  });
  dst.storage()->version++;
}

void add_inplace(const Tensor& dst, const Tensor& src) {
  dispatch_numeric(dst.dtype(), "add_", [&](auto t) {
    using T = decltype(t);
    T* d = dst.data<T>();
    const T* s = src.data<T>();
    for_each_strided<2>(dst.shape(), {dst.strides(), src.strides()},
                        [&](const int64_t* off, int64_t n, const int64_t* st) {
                          for (int64_t i = 0; i < n; i++) d[off[0] + i * st[0]] = wrapping_add(d[off[0] + i * st[0]], s[off[1] + i * st[1]]);
                        });
  });
  dst.storage()->version++;
}

bool all_finite(const Tensor& t) {
  if (!is_floating(t.dtype())) return true;
  if (t.dtype() == kBFloat16) return all_finite(t.detach().to(kFloat32));  // exact
  std::atomic<bool> ok{true};
  dispatch_float(t.dtype(), "all_finite", [&](auto tag) {
    using T = decltype(tag);
    const T* p = t.data<T>();
    for_each_strided<1>(t.shape(), {t.strides()}, [&](const int64_t* off, int64_t n, const int64_t* s) {
      for (int64_t i = 0; i < n; i++)
        if (!std::isfinite(p[off[0] + i * s[0]])) ok.store(false, std::memory_order_relaxed);
    });
  });
  return ok.load();
}

// ---------------------------------------------------------------- rows of a strided tensor
std::vector<int64_t> row_starts(const Tensor& t) {
  const int64_t nd = t.dim() - 1;
  int64_t rows = 1;
  for (int64_t d = 0; d < nd; d++) rows *= t.size(d);
  std::vector<int64_t> starts(rows);
  Shape idx(nd, 0);
  int64_t off = 0;
  for (int64_t r = 0; r < rows; r++) {
    starts[r] = off;
    for (int64_t d = nd - 1; d >= 0; d--) {
      off += t.stride(d);
      if (++idx[d] < t.size(d)) break;
      off -= idx[d] * t.stride(d);
      idx[d] = 0;
    }
  }
  return starts;
}

}  // namespace ember::kernel
