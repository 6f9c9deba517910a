// Printing tensors as PyTorch does: one format for all elements (integers, fixed or
// scientific), nested brackets, and large tensors summarised with "..." at their edges.
#include "core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "core/autograd.h"
#include "core/kernels/dispatch.h"

namespace ember {

// ---------------------------------------------------------------- printing
namespace {

PrintOptions g_options;

struct Formatter {
  enum Mode { Int, Fixed, Sci, Bool, Whole } mode = Fixed;
  int width = 1;
  int precision = 4;

  // An int64 element, printed from its own value (a double would round past 2^53).
  std::string fmt_int(int64_t v) const { return std::to_string(v); }

  std::string fmt(double v) const {
    char buf[64];
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

// Indices of dim d to print (-1 marks the "..." gap).
std::vector<int64_t> shown(int64_t n, bool summarize) {
  std::vector<int64_t> r;
  const int64_t edge = g_options.edgeitems;
  if (summarize && n > 2 * edge) {
    for (int64_t i = 0; i < edge; i++) r.push_back(i);
    r.push_back(-1);
    for (int64_t i = n - edge; i < n; i++) r.push_back(i);
  } else {
    for (int64_t i = 0; i < n; i++) r.push_back(i);
  }
  return r;
}

// The shown elements as text, in order (each tensor prints with one format).
std::string element(const Tensor& t, const Formatter& f) {
  return f.mode == Formatter::Int ? f.fmt_int(t.item<int64_t>()) : f.fmt(t.item());
}

void collect(const Tensor& t, bool summarize, std::vector<double>& out) {
  if (t.dim() == 0) {
    out.push_back(t.dtype() == kInt64 ? 0.0 : t.item());  // int64 values are printed from the tensor
    return;
  }
  for (int64_t i : shown(t.size(0), summarize))
    if (i >= 0) collect(t.select(0, i), summarize, out);
}

void width_of_ints(const Tensor& t, bool summarize, Formatter& f) {
  if (t.dim() == 0) {
    f.width = std::max<int>(f.width, (int)element(t, f).size());
    return;
  }
  for (int64_t i : shown(t.size(0), summarize))
    if (i >= 0) width_of_ints(t.select(0, i), summarize, f);
}

void emit(std::ostringstream& os, const Tensor& t, const Formatter& f, bool summarize, int indent) {
  if (t.dim() == 0) {
    std::string s = element(t, f);
    os << std::string(f.width > (int)s.size() ? f.width - s.size() : 0, ' ') << s;
    return;
  }
  os << "[";
  auto idx = shown(t.size(0), summarize);
  for (size_t k = 0; k < idx.size(); k++) {
    if (k) {
      os << ",";
      if (t.dim() == 1) os << " ";
      else os << std::string(t.dim() - 1, '\n') << std::string(indent + 1, ' ');
    }
    if (idx[k] < 0) os << "...";
    else emit(os, t.select(0, idx[k]), f, summarize, indent + 1);
  }
  os << "]";
}

}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  NoGradGuard ng;
  Tensor t = detach();
  bool summarize = numel() > g_options.threshold;
  std::vector<double> vals;
  if (numel() > 0) collect(t, summarize, vals);
  Formatter f;
  f.precision = g_options.precision;
  if (dtype() == kBool) f.mode = Formatter::Bool;
  else if (dtype() == kInt64) f.mode = Formatter::Int;
  else {
    double mx = 0, mn = INFINITY;
    bool whole = true;
    for (double v : vals) {
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
  if (f.mode == Formatter::Int) width_of_ints(t, summarize, f);
  else
    for (double v : vals) f.width = std::max<int>(f.width, (int)f.fmt(v).size());
  std::ostringstream os;
  os << "tensor(";
  if (numel() == 0) os << "[]";
  else emit(os, t, f, summarize, 7);
  os << ", shape=" << shape_str(shape()) << ", dtype=" << dtype_name(dtype());
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
