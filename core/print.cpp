// Printing tensors as PyTorch does: one format for all elements (integers, fixed or
// scientific), nested brackets, and large tensors summarised with "..." at their edges.
// The printer walks the shown elements once, by strides, without recursion: its time is
// linear in what it prints, whatever the number of dims and sizes, and it prints at most
// kMaxPrinted elements and about kMaxBytes of text, whatever the options ask.
#include "core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "core/autograd.h"
#include "core/kernels/dispatch.h"

namespace ember {

namespace {

PrintOptions g_options;
constexpr int64_t kMaxPrinted = int64_t(1) << 20;  // 1024 x 1024
constexpr int64_t kMaxBytes = int64_t(1) << 26;    // 64 MiB of text

struct Formatter {
  enum Mode { Int, Fixed, Sci, Bool, Whole } mode = Fixed;
  int precision = 4;

  std::string fmt(double v) const {
    char buf[400];  // the longest: 1.8e308 with 30 digits after the point
    if (mode == Bool) return v != 0 ? "True" : "False";
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    switch (mode) {
      case Whole: std::snprintf(buf, sizeof buf, "%.0f.", v); break;
      case Sci: std::snprintf(buf, sizeof buf, "%.*e", precision, v); break;
      default: std::snprintf(buf, sizeof buf, "%.*f", precision, v); break;
    }
    return buf;
  }
};

// The shown positions of a dim of n elements: all of them, or the first and last
// `edge` around a "..." gap (index -1). Computed, never listed: n may be 2^50.
struct Shown {
  int64_t n, edge;
  bool gap;
  Shown(int64_t n, bool summarize) : n(n), edge(g_options.edgeitems), gap(summarize && n > 2 * edge) {}
  int64_t count() const { return gap ? 2 * edge + 1 : n; }
  int64_t index(int64_t pos) const {
    if (!gap || pos < edge) return pos;
    return pos == edge ? -1 : n - edge + (pos - edge - 1);
  }
};

// Walks the shown elements of t in row-major order, writing brackets, separators and
// gaps to `os` (when given) and calling element(offset) for each element, at most
// kMaxPrinted times. Returns false if it stopped at that bound.
template <class Element>
bool walk(const Tensor& t, bool summarize, std::ostringstream* os, int indent, Element&& element) {
  const int64_t D = t.dim();
  std::vector<Shown> idx;
  for (int64_t d = 0; d < D; d++) idx.emplace_back(t.size(d), summarize);
  std::vector<int64_t> pos(D, 0);
  std::vector<int64_t> off(D + 1, 0);
  int64_t printed = 0;
  int64_t d = 0;
  if (os) *os << "[";
  for (;;) {
    if (pos[d] == idx[d].count()) {  // this dim is done: close it and step the one above
      if (os) *os << "]";
      if (d == 0) return true;
      pos[--d]++;
      continue;
    }
    if (pos[d] > 0 && os) {
      *os << ",";
      if (d == D - 1) *os << " ";
      else *os << std::string(D - 1 - d, '\n') << std::string(indent + d + 1, ' ');
    }
    const int64_t i = idx[d].index(pos[d]);
    if (i < 0) {
      if (os) *os << "...";
      pos[d]++;
      continue;
    }
    off[d + 1] = off[d] + i * t.stride(d);
    if (d == D - 1) {
      if (printed == kMaxPrinted || (os && os->tellp() > kMaxBytes)) {
        if (os) *os << "... (printing stops at " << printed << " elements)" << std::string(D, ']');
        return false;
      }
      element(off[D]);
      printed++;
      pos[d]++;
      continue;
    }
    pos[++d] = 0;
    if (os) *os << "[";
  }
}

}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  const bool summarize = numel() > g_options.threshold;
  // The shown elements, read once: exact integers for int64, doubles otherwise.
  std::vector<double> reals;
  std::vector<int64_t> ints;
  if (numel() > 0 && dim() > 0) {
    dispatch_all(dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* base = static_cast<const T*>(raw_data());
      walk(*this, summarize, nullptr, 0, [&](int64_t o) {
        if constexpr (std::is_same_v<T, int64_t>) ints.push_back(base[o]);
        else reals.push_back((double)base[o]);
      });
    });
  } else if (numel() > 0) {
    if (dtype() == kInt64) ints.push_back(integer_item<int64_t>());
    else reals.push_back(item());
  }

  Formatter f;
  f.precision = g_options.precision;
  if (dtype() == kBool) f.mode = Formatter::Bool;
  else if (dtype() == kInt64) f.mode = Formatter::Int;
  else {
    double mx = 0, mn = INFINITY;
    bool whole = true;
    for (double v : reals) {
      if (!std::isfinite(v)) continue;
      double a = std::fabs(v);
      mx = std::max(mx, a);
      if (a > 0) mn = std::min(mn, a);
      if (v != std::round(v)) whole = false;
    }
    if (g_options.sci_mode) f.mode = *g_options.sci_mode ? Formatter::Sci : Formatter::Fixed;
    else if (whole && mx < 1e8) f.mode = Formatter::Whole;
    else if (mx >= 1e8 || (mn < 1e-4 && mn > 0) || (mn > 0 && mx / mn > 1e4)) f.mode = Formatter::Sci;
    else f.mode = Formatter::Fixed;
  }
  auto text = [&](size_t k) { return f.mode == Formatter::Int ? std::to_string(ints[k]) : f.fmt(reals[k]); };
  // the width of the elements that will be printed: those before the text's bound
  const size_t count = ints.size() + reals.size();
  size_t width = 1;
  for (size_t k = 0; k < count && (int64_t)(k * (width + 2)) <= kMaxBytes; k++) width = std::max(width, text(k).size());

  std::ostringstream os;
  os << "tensor(";
  if (numel() == 0) os << "[]";
  else if (dim() == 0) os << text(0);
  else {
    size_t k = 0;
    walk(*this, summarize, &os, 7, [&](int64_t) {
      std::string s = text(k++);
      os << std::string(width - s.size(), ' ') << s;
    });
  }
  os << ", shape=" << shape() << ", dtype=" << dtype_name(dtype());
  if (impl_->grad_fn) os << ", grad_fn=<" << impl_->grad_fn->name << ">";
  else if (requires_grad()) os << ", requires_grad=True";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

void set_printoptions(const PrintOptions& options) {
  const char* op = "set_printoptions";
  if (options.precision < 0 || options.precision > 30) fail(op, "precision must be in [0, 30], got ", options.precision);
  if (options.threshold < 0) fail(op, "threshold must be non-negative, got ", options.threshold);
  if (options.edgeitems < 1 || options.edgeitems > 1000000)
    fail(op, "edgeitems must be in [1, 1000000], got ", options.edgeitems);
  g_options = options;
}

PrintOptions get_printoptions() { return g_options; }

}  // namespace ember
