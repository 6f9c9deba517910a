// Op implementations: forward through kernels, backward recorded only when needed.
// Backward functions run with grad mode off and may use other ops.
#include "core/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/kernels.h"

namespace ember {

namespace {

using kernel::map1;
using kernel::map2;
using kernel::map3;

void same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    fail(op, "expected both operands to have the same dtype, got ", dtype_name(a.dtype()), " ", a.shape(), " and ",
         dtype_name(b.dtype()), " ", b.shape(), " (convert one with .to())");
}

void need_float(const char* op, const Tensor& a) {
  if (!is_floating(a.dtype()))
    fail(op, "expected a float32 or float64 tensor, got ", dtype_name(a.dtype()), " of shape ", a.shape());
}

// Elementwise binary forward over the broadcast shape.
template <class Op>
Tensor binary_forward(const char* name, const Tensor& a, const Tensor& b, bool float_only, Op op) {
  same_dtype(name, a, b);
  if (float_only) need_float(name, a);
  Shape s = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = empty(s, a.dtype());
  Tensor ae = a.detach().expand(s), be = b.detach().expand(s);
  dispatch_numeric(a.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    map2<T, T, T>(out, ae, be, [&](T x, T y) { return op(x, y); });
  });
  return out;
}

template <class Op>
Tensor scalar_forward(const char* name, const Tensor& a, bool float_only, Op op) {
  if (float_only) need_float(name, a);
  Tensor out = empty(a.shape(), a.dtype());
  dispatch_numeric(a.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    map1<T, T>(out, a.detach(), [&](T x) { return op(x); });
  });
  return out;
}

// A new tensor shaped like g with elements df(g, s), s a saved tensor of g's shape.
template <class DF>
Tensor zip_grad(const char* name, const Tensor& g, const Tensor& s, DF df) {
  Tensor out = empty(g.shape(), g.dtype());
  dispatch_float(g.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    map2<T, T, T>(out, g, s, [&](T gv, T sv) { return df(gv, sv); });
  });
  return out;
}

enum class Save { Input, Output };

// Unary float op y = f(x) with dx = df(g, saved) where saved is x or y: one kernel pass
// in a plain backward; under create_graph dx = dt(g, saved), the same derivative written
// with ops, so that it is recorded.
template <class F, class DF, class DT>
Tensor unary_op(const char* name, const Tensor& a, const Loc& loc, Save save, F f, DF df, DT dt) {
  need_float(name, a);
  Tensor x = a.detach();
  Tensor out = empty(a.shape(), a.dtype());
  dispatch_float(a.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    map1<T, T>(out, x, [&](T v) { return f(v); });
  });
  BackwardFn bw;
  if (wants_grad(a)) {
    SavedTensor s = save == Save::Input ? SavedTensor(a) : SavedTensor(out, /*is_output=*/true);
    bw = [s, df, dt, name](const Tensor& g) {
      if (grad_enabled()) return std::vector<Tensor>{dt(g, s.get())};
      return std::vector<Tensor>{zip_grad(name, g, s.data(), df)};
    };
  }
  return record(name, loc, out, {a}, std::move(bw), {save == Save::Input ? x : out});
}

std::vector<bool> dims_mask(const Tensor& a, const Dims& dims, const char* op) {
  std::vector<bool> m(a.dim(), dims.empty());
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, a.dim(), op);
    if (a.dim() == 0) continue;
    if (m[w]) fail(op, "dim ", d, " appears more than once in ", (Shape)dims);
    m[w] = true;
  }
  return m;
}

Shape keep_shape(const Tensor& a, const std::vector<bool>& m) {
  Shape s = a.shape();
  for (int64_t d = 0; d < a.dim(); d++)
    if (m[d]) s[d] = 1;
  return s;
}

}  // namespace

// ------------------------------------------------------------------ binary
Tensor add(const Tensor& a, const Tensor& b, Loc loc) {
  check_defined(a, "add", "the first operand");
  check_defined(b, "add", "the second operand");
  Tensor out = binary_forward("add", a, b, false, [](auto x, auto y) { return x + y; });
  return record("add", loc, out, {a, b}, wants_grad(a, b) ? BackwardFn([](const Tensor& g) {
    return std::vector<Tensor>{g, g};
  }) : nullptr);
}

Tensor sub(const Tensor& a, const Tensor& b, Loc loc) {
  check_defined(a, "sub", "the first operand");
  check_defined(b, "sub", "the second operand");
  Tensor out = binary_forward("sub", a, b, false, [](auto x, auto y) { return x - y; });
  bool gb = b.requires_grad();
  return record("sub", loc, out, {a, b}, wants_grad(a, b) ? BackwardFn([gb](const Tensor& g) {
    return std::vector<Tensor>{g, gb ? neg(g) : Tensor()};
  }) : nullptr);
}

Tensor mul(const Tensor& a, const Tensor& b, Loc loc) {
  check_defined(a, "mul", "the first operand");
  check_defined(b, "mul", "the second operand");
  Tensor out = binary_forward("mul", a, b, false, [](auto x, auto y) { return x * y; });
  BackwardFn bw;
  Tensor sa, sb;
  if (wants_grad(a, b)) {
    sa = b.requires_grad() ? a : Tensor();
    sb = a.requires_grad() ? b : Tensor();
    bw = [xa = SavedTensor(sa), xb = SavedTensor(sb)](const Tensor& g) {
      return std::vector<Tensor>{xb.defined() ? mul(g, xb.get()) : Tensor(),
                                 xa.defined() ? mul(g, xa.get()) : Tensor()};
    };
  }
  return record("mul", loc, out, {a, b}, std::move(bw), {sa, sb});
}

Tensor div(const Tensor& a, const Tensor& b, Loc loc) {
  check_defined(a, "div", "the first operand");
  check_defined(b, "div", "the second operand");
  Tensor out = binary_forward("div", a, b, true, [](auto x, auto y) { return x / y; });
  BackwardFn bw;
  if (wants_grad(a, b)) {
    bool ga = a.requires_grad(), gb = b.requires_grad();
    bw = [xa = SavedTensor(a), xb = SavedTensor(b), ga, gb](const Tensor& g) {
      Tensor sb = xb.get(), gq = div(g, sb);
      return std::vector<Tensor>{ga ? gq : Tensor(), gb ? neg(mul(gq, div(xa.get(), sb))) : Tensor()};
    };
  }
  return record("div", loc, out, {a, b}, std::move(bw), {a, b});
}

Tensor pow(const Tensor& a, const Tensor& b, Loc loc) {
  check_defined(a, "pow", "the first operand");
  check_defined(b, "pow", "the second operand");
  Tensor out = binary_forward("pow", a, b, true, [](auto x, auto y) { return std::pow(x, y); });
  BackwardFn bw;
  if (wants_grad(a, b)) {
    bool ga = a.requires_grad(), gb = b.requires_grad();
    bw = [xa = SavedTensor(a), xb = SavedTensor(b), xo = SavedTensor(out, true), ga, gb](const Tensor& g) {
      Tensor da, db, sa = xa.get(), sb = xb.get();
      if (ga) da = mul(g, mul(sb, pow(sa, sub(sb, 1.0))));
      if (gb) {
        // d/db a^b = a^b log a; taken as 0 where a == 0 (as PyTorch does), with no log(0)
        // on the way, so that a second derivative is finite there too
        Tensor zero = eq(xa.data(), 0.0);
        Tensor la = where(zero, zeros_like(xa.data()), log(where(zero, ones_like(xa.data()), sa)));
        db = mul(g, mul(xo.get(), la));
      }
      return std::vector<Tensor>{da, db};
    };
  }
  return record("pow", loc, out, {a, b}, std::move(bw), {a, b, out});
}

static Tensor extreme2(const char* name, const Tensor& a, const Tensor& b, const Loc& loc, bool is_max) {
  Tensor out = binary_forward(name, a, b, true, [is_max](auto x, auto y) {
    if (x != x || y != y) return x + y;  // NaN propagates
    return is_max ? (x > y ? x : y) : (x < y ? x : y);
  });
  BackwardFn bw;
  if (wants_grad(a, b)) {
    Tensor sa = a.detach(), sb = b.detach();
    bw = [sa, sb, is_max, name](const Tensor& g) {  // the weights are constants: data only
      // the winner takes the gradient; a tie splits it evenly
      Tensor wa = binary_forward(name, sa, sb, true, [is_max](auto x, auto y) {
        using T = decltype(x);
        return x == y ? T(0.5) : ((is_max ? x > y : x < y) ? T(1) : T(0));
      });
      Tensor ga = mul(g, wa);
      return std::vector<Tensor>{ga, sub(g, ga)};
    };
  }
  return record(name, loc, out, {a, b}, std::move(bw), {a, b});
}
Tensor maximum(const Tensor& a, const Tensor& b, Loc loc) {
  check_defined(a, "maximum", "the first operand");
  check_defined(b, "maximum", "the second operand");
  return extreme2("maximum", a, b, loc, true);
}
Tensor minimum(const Tensor& a, const Tensor& b, Loc loc) {
  check_defined(a, "minimum", "the first operand");
  check_defined(b, "minimum", "the second operand");
  return extreme2("minimum", a, b, loc, false);
}

// ------------------------------------------------------------------ with a scalar
static BackwardFn pass_through(const Tensor& a, double scale) {
  if (!wants_grad(a)) return nullptr;
  if (scale == 1.0) return [](const Tensor& g) { return std::vector<Tensor>{g}; };
  return [scale](const Tensor& g) { return std::vector<Tensor>{mul(g, scale)}; };
}

Tensor add(const Tensor& a, double s, Loc loc) {
  check_defined(a, "add", "the input");
  Tensor out = scalar_forward("add", a, false, [s](auto x) { return x + static_cast<decltype(x)>(s); });
  return record("add", loc, out, {a}, pass_through(a, 1.0));
}
Tensor sub(const Tensor& a, double s, Loc loc) {
  check_defined(a, "sub", "the input");
  Tensor out = scalar_forward("sub", a, false, [s](auto x) { return x - static_cast<decltype(x)>(s); });
  return record("sub", loc, out, {a}, pass_through(a, 1.0));
}
Tensor rsub(double s, const Tensor& a, Loc loc) {
  check_defined(a, "rsub", "the input");
  Tensor out = scalar_forward("rsub", a, false, [s](auto x) { return static_cast<decltype(x)>(s) - x; });
  return record("rsub", loc, out, {a}, pass_through(a, -1.0));
}
Tensor mul(const Tensor& a, double s, Loc loc) {
  check_defined(a, "mul", "the input");
  Tensor out = scalar_forward("mul", a, false, [s](auto x) { return x * static_cast<decltype(x)>(s); });
  return record("mul", loc, out, {a}, pass_through(a, s));
}
Tensor div(const Tensor& a, double s, Loc loc) {
  check_defined(a, "div", "the input");
  Tensor out = scalar_forward("div", a, true, [s](auto x) { return x / static_cast<decltype(x)>(s); });
  return record("div", loc, out, {a}, pass_through(a, 1.0 / s));
}
Tensor rdiv(double s, const Tensor& a, Loc loc) {
  check_defined(a, "rdiv", "the input");
  Tensor out = scalar_forward("rdiv", a, true, [s](auto x) { return static_cast<decltype(x)>(s) / x; });
  BackwardFn bw;
  if (wants_grad(a)) {
    bw = [xa = SavedTensor(a), s](const Tensor& g) {
      if (grad_enabled()) return std::vector<Tensor>{mul(g, rdiv(-s, square(xa.get())))};
      return std::vector<Tensor>{zip_grad("rdiv", g, xa.data(), [s](auto gv, auto x) {
        return -gv * static_cast<decltype(x)>(s) / (x * x);
      })};
    };
  }
  return record("rdiv", loc, out, {a}, std::move(bw), {a});
}
Tensor pow(const Tensor& a, double p, Loc loc) {
  check_defined(a, "pow", "the input");
  return unary_op("pow", a, loc, Save::Input, [p](auto x) { return std::pow(x, static_cast<decltype(x)>(p)); },
                  [p](auto g, auto x) {
                    using T = decltype(x);
                    if (p == 0) return T(0);
                    return g * T(p) * std::pow(x, T(p - 1));
                  },
                  [p](const Tensor& g, const Tensor& x) {
                    return p == 0 ? mul(g, 0.0) : mul(g, mul(pow(x, p - 1), p));
                  });
}

// ------------------------------------------------------------------ unary
Tensor neg(const Tensor& a, Loc loc) {
  check_defined(a, "neg", "the input");
  Tensor out = scalar_forward("neg", a, false, [](auto x) { return -x; });
  return record("neg", loc, out, {a}, pass_through(a, -1.0));
}
Tensor exp(const Tensor& a, Loc loc) {
  check_defined(a, "exp", "the input");
  return unary_op("exp", a, loc, Save::Output, [](auto x) { return std::exp(x); }, [](auto g, auto y) { return g * y; },
                  [](const Tensor& g, const Tensor& y) { return mul(g, y); });
}
Tensor log(const Tensor& a, Loc loc) {
  check_defined(a, "log", "the input");
  return unary_op("log", a, loc, Save::Input, [](auto x) { return std::log(x); }, [](auto g, auto x) { return g / x; },
                  [](const Tensor& g, const Tensor& x) { return div(g, x); });
}
Tensor sqrt(const Tensor& a, Loc loc) {
  check_defined(a, "sqrt", "the input");
  return unary_op("sqrt", a, loc, Save::Output, [](auto x) { return std::sqrt(x); },
                  [](auto g, auto y) { return g / (decltype(y)(2) * y); },
                  [](const Tensor& g, const Tensor& y) { return div(g, mul(y, 2.0)); });
}
Tensor rsqrt(const Tensor& a, Loc loc) {
  check_defined(a, "rsqrt", "the input");
  return unary_op("rsqrt", a, loc, Save::Output, [](auto x) { return decltype(x)(1) / std::sqrt(x); },
                  [](auto g, auto y) { return decltype(y)(-0.5) * g * y * y * y; },
                  [](const Tensor& g, const Tensor& y) { return mul(g, mul(pow(y, 3.0), -0.5)); });
}
Tensor abs(const Tensor& a, Loc loc) {
  check_defined(a, "abs", "the input");
  return unary_op("abs", a, loc, Save::Input, [](auto x) { return std::abs(x); }, [](auto g, auto x) {
    using T = decltype(x);
    return x > T(0) ? g : (x < T(0) ? -g : T(0));
  }, [](const Tensor& g, const Tensor& x) { return mul(g, sub(gt(x, 0.0).to(x.dtype()), lt(x, 0.0).to(x.dtype()))); });
}
Tensor tanh(const Tensor& a, Loc loc) {
  check_defined(a, "tanh", "the input");
  return unary_op("tanh", a, loc, Save::Output, [](auto x) { return std::tanh(x); },
                  [](auto g, auto y) { return g * (decltype(y)(1) - y * y); },
                  [](const Tensor& g, const Tensor& y) { return mul(g, rsub(1.0, square(y))); });
}
Tensor sigmoid(const Tensor& a, Loc loc) {
  check_defined(a, "sigmoid", "the input");
  return unary_op("sigmoid", a, loc, Save::Output, [](auto x) {
    using T = decltype(x);
    // stable for large |x|
    if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
    T e = std::exp(x);
    return e / (T(1) + e);
  }, [](auto g, auto y) { return g * y * (decltype(y)(1) - y); },
                  [](const Tensor& g, const Tensor& y) { return mul(g, mul(y, rsub(1.0, y))); });
}
Tensor relu(const Tensor& a, Loc loc) {
  check_defined(a, "relu", "the input");
  return unary_op("relu", a, loc, Save::Output, [](auto x) { return x > decltype(x)(0) ? x : decltype(x)(0); },
                  [](auto g, auto y) { return y > decltype(y)(0) ? g : decltype(y)(0); },
                  [](const Tensor& g, const Tensor& y) { return mul(g, gt(y, 0.0).to(y.dtype())); });
}
// The standard normal density and distribution, for gelu's derivative under create_graph.
static Tensor normal_pdf(const Tensor& x) { return mul(exp(mul(square(x), -0.5)), 0.3989422804014327); }
static Tensor normal_cdf(const Tensor& x) {
  return unary_op("normal_cdf", x, Loc::current(), Save::Input, [](auto v) {
    using T = decltype(v);
    return T(0.5) * (T(1) + std::erf(v * T(0.7071067811865476)));
  }, [](auto g, auto v) {
    using T = decltype(v);
    return g * std::exp(T(-0.5) * v * v) * T(0.3989422804014327);
  }, [](const Tensor& g, const Tensor& v) { return mul(g, normal_pdf(v)); });
}

Tensor gelu(const Tensor& a, bool tanh_approx, Loc loc) {
  check_defined(a, "gelu", "the input");
  if (tanh_approx) {
    // 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2/pi)
    return unary_op("gelu", a, loc, Save::Input, [](auto x) {
      using T = decltype(x);
      const T k = T(0.7978845608028654);
      return T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
    }, [](auto g, auto x) {
      using T = decltype(x);
      const T k = T(0.7978845608028654);
      T t = std::tanh(k * (x + T(0.044715) * x * x * x));
      return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3 * 0.044715) * x * x));
    }, [](const Tensor& g, const Tensor& x) {
      const double k = 0.7978845608028654;
      Tensor x2 = square(x);
      Tensor t = tanh(mul(mul(x, add(mul(x2, 0.044715), 1.0)), k));
      // 0.5 (1 + t) + 0.5 k x (1 - t^2) (1 + 3 * 0.044715 x^2)
      Tensor d = add(mul(add(t, 1.0), 0.5),
                     mul(mul(x, rsub(1.0, square(t))), mul(add(mul(x2, 3 * 0.044715), 1.0), 0.5 * k)));
      return mul(g, d);
    });
  }
  // x * Phi(x), Phi the standard normal CDF; derivative Phi(x) + x phi(x)
  return unary_op("gelu", a, loc, Save::Input, [](auto x) {
    using T = decltype(x);
    return T(0.5) * x * (T(1) + std::erf(x * T(0.7071067811865476)));
  }, [](auto g, auto x) {
    using T = decltype(x);
    T cdf = T(0.5) * (T(1) + std::erf(x * T(0.7071067811865476)));
    T pdf = std::exp(T(-0.5) * x * x) * T(0.3989422804014327);
    return g * (cdf + x * pdf);
  }, [](const Tensor& g, const Tensor& x) { return mul(g, add(normal_cdf(x), mul(x, normal_pdf(x)))); });
}
Tensor square(const Tensor& a, Loc loc) {
  check_defined(a, "square", "the input");
  return unary_op("square", a, loc, Save::Input, [](auto x) { return x * x; },
                  [](auto g, auto x) { return decltype(x)(2) * g * x; },
                  [](const Tensor& g, const Tensor& x) { return mul(g, mul(x, 2.0)); });
}

// ------------------------------------------------------------------ comparisons, logic
template <class Cmp>
static Tensor compare(const char* name, const Tensor& a, const Tensor& b, Cmp cmp) {
  same_dtype(name, a, b);
  Shape s = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = empty(s, kBool);
  Tensor ae = a.detach().expand(s), be = b.detach().expand(s);
  dispatch_all(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    map2<uint8_t, T, T>(out, ae, be, [&](T x, T y) { return (uint8_t)cmp(x, y); });
  });
  return out;
}
static Tensor scalar_like(const Tensor& a, double s) { return full({}, s, a.dtype()); }

Tensor eq(const Tensor& a, const Tensor& b) {
  check_defined(a, "eq", "the first operand");
  check_defined(b, "eq", "the second operand");
  return compare("eq", a, b, [](auto x, auto y) { return x == y; });
}
Tensor ne(const Tensor& a, const Tensor& b) {
  check_defined(a, "ne", "the first operand");
  check_defined(b, "ne", "the second operand");
  return compare("ne", a, b, [](auto x, auto y) { return x != y; });
}
Tensor lt(const Tensor& a, const Tensor& b) {
  check_defined(a, "lt", "the first operand");
  check_defined(b, "lt", "the second operand");
  return compare("lt", a, b, [](auto x, auto y) { return x < y; });
}
Tensor le(const Tensor& a, const Tensor& b) {
  check_defined(a, "le", "the first operand");
  check_defined(b, "le", "the second operand");
  return compare("le", a, b, [](auto x, auto y) { return x <= y; });
}
Tensor gt(const Tensor& a, const Tensor& b) {
  check_defined(a, "gt", "the first operand");
  check_defined(b, "gt", "the second operand");
  return compare("gt", a, b, [](auto x, auto y) { return x > y; });
}
Tensor ge(const Tensor& a, const Tensor& b) {
  check_defined(a, "ge", "the first operand");
  check_defined(b, "ge", "the second operand");
  return compare("ge", a, b, [](auto x, auto y) { return x >= y; });
}
Tensor eq(const Tensor& a, double s) {
  check_defined(a, "eq", "the input");
  return eq(a, scalar_like(a, s));
}
Tensor ne(const Tensor& a, double s) {
  check_defined(a, "ne", "the input");
  return ne(a, scalar_like(a, s));
}
Tensor lt(const Tensor& a, double s) {
  check_defined(a, "lt", "the input");
  return lt(a, scalar_like(a, s));
}
Tensor le(const Tensor& a, double s) {
  check_defined(a, "le", "the input");
  return le(a, scalar_like(a, s));
}
Tensor gt(const Tensor& a, double s) {
  check_defined(a, "gt", "the input");
  return gt(a, scalar_like(a, s));
}
Tensor ge(const Tensor& a, double s) {
  check_defined(a, "ge", "the input");
  return ge(a, scalar_like(a, s));
}

static void need_bool(const char* op, const Tensor& t) {
  if (t.dtype() != kBool) fail(op, "expected a bool tensor, got ", dtype_name(t.dtype()), " of shape ", t.shape());
}
Tensor logical_and(const Tensor& a, const Tensor& b) {
  check_defined(a, "logical_and", "the first operand");
  check_defined(b, "logical_and", "the second operand");
  need_bool("logical_and", a);
  need_bool("logical_and", b);
  return compare("logical_and", a, b, [](auto x, auto y) { return x && y; });
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  check_defined(a, "logical_or", "the first operand");
  check_defined(b, "logical_or", "the second operand");
  need_bool("logical_or", a);
  need_bool("logical_or", b);
  return compare("logical_or", a, b, [](auto x, auto y) { return x || y; });
}
Tensor logical_not(const Tensor& a) {
  check_defined(a, "logical_not", "the input");
  need_bool("logical_not", a);
  Tensor out = empty(a.shape(), kBool);
  map1<uint8_t, uint8_t>(out, a.detach(), [](uint8_t x) { return (uint8_t)!x; });
  return out;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  check_defined(a, "allclose", "the first operand");
  check_defined(b, "allclose", "the second operand");
  if (a.shape() != b.shape()) fail("allclose", "shapes ", a.shape(), " and ", b.shape(), " differ");
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); i++) {
    if (std::isnan(x[i]) || std::isnan(y[i])) return false;
    if (std::fabs(x[i] - y[i]) > atol + rtol * std::fabs(y[i])) return false;
  }
  return true;
}

bool equal(const Tensor& a, const Tensor& b) {
  check_defined(a, "equal", "the first operand");
  check_defined(b, "equal", "the second operand");
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), x.numel() * dtype_size(x.dtype())) == 0;
}

// ------------------------------------------------------------------ reductions
Tensor sum(const Tensor& a, Loc loc) {
  check_defined(a, "sum", "the input");
  return sum(a, {}, false, loc);
}

Tensor sum(const Tensor& a, const Dims& dims, bool keepdim, Loc loc) {
  check_defined(a, "sum", "the input");
  if (a.dtype() == kBool) return sum(a.to(kInt64), dims, keepdim, loc);
  auto m = dims_mask(a, dims, "sum");
  Tensor out = kernel::reduce(a.detach(), m, kernel::ReduceKind::Sum);
  Shape ks = keep_shape(a, m);
  if (keepdim) out = out.view(ks);
  BackwardFn bw;
  if (wants_grad(a)) {
    Shape in = a.shape();
    bw = [ks, in](const Tensor& g) { return std::vector<Tensor>{g.reshape(ks).expand(in)}; };
  }
  return record("sum", loc, out, {a}, std::move(bw));
}

Tensor mean(const Tensor& a, Loc loc) {
  check_defined(a, "mean", "the input");
  return mean(a, {}, false, loc);
}

Tensor mean(const Tensor& a, const Dims& dims, bool keepdim, Loc loc) {
  check_defined(a, "mean", "the input");
  need_float("mean", a);
  auto m = dims_mask(a, dims, "mean");
  int64_t n = 1;
  for (int64_t d = 0; d < a.dim(); d++)
    if (m[d]) n *= a.size(d);
  Tensor out = kernel::reduce(a.detach(), m, kernel::ReduceKind::Sum);
  const double inv = 1.0 / (double)n;
  dispatch_float(out.dtype(), "mean", [&](auto tag) {
    using T = decltype(tag);
    T* p = out.data<T>();
    for (int64_t i = 0; i < out.numel(); i++) p[i] = static_cast<T>(p[i] * inv);
  });
  Shape ks = keep_shape(a, m);
  if (keepdim) out = out.view(ks);
  BackwardFn bw;
  if (wants_grad(a)) {
    Shape in = a.shape();
    bw = [ks, in, inv](const Tensor& g) { return std::vector<Tensor>{mul(g, inv).reshape(ks).expand(in)}; };
  }
  return record("mean", loc, out, {a}, std::move(bw));
}

static Tensor extreme(const char* name, const Tensor& a, const Dims& dims, bool keepdim, const Loc& loc, bool is_max) {
  auto m = dims_mask(a, dims, name);
  Tensor out = kernel::reduce(a.detach(), m, is_max ? kernel::ReduceKind::Max : kernel::ReduceKind::Min);
  Shape ks = keep_shape(a, m);
  if (keepdim) out = out.view(ks);
  BackwardFn bw;
  if (wants_grad(a)) {
    Tensor sa = a.detach(), so = out.detach().reshape(ks);
    bw = [sa, so, ks, m](const Tensor& g) {
      // evenly among ties, as torch.amax
      Tensor hit = eq(sa, so).to(sa.dtype());
      std::vector<int64_t> rd;
      for (int64_t d = 0; d < (int64_t)m.size(); d++)
        if (m[d]) rd.push_back(d);
      Tensor count = rd.empty() ? ones_like(so) : sum(hit, rd, true);
      return std::vector<Tensor>{mul(hit, div(g.reshape(ks), count))};
    };
  }
  return record(name, loc, out, {a}, std::move(bw), {a, out});
}
Tensor amax(const Tensor& a, const Dims& dims, bool keepdim, Loc loc) {
  check_defined(a, "amax", "the input");
  return extreme("amax", a, dims, keepdim, loc, true);
}
Tensor amin(const Tensor& a, const Dims& dims, bool keepdim, Loc loc) {
  check_defined(a, "amin", "the input");
  return extreme("amin", a, dims, keepdim, loc, false);
}
Tensor max(const Tensor& a, Loc loc) {
  check_defined(a, "max", "the input");
  return extreme("max", a, {}, false, loc, true);
}

Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
  check_defined(a, "argmax", "the input");
  dim = wrap_dim(dim, a.dim(), "argmax");
  if (a.dim() == 0) return zeros({}, kInt64);
  Tensor idx = kernel::arg_reduce(a.detach().contiguous(), dim, true);
  return keepdim ? idx.unsqueeze(dim) : idx;
}
Tensor argmin(const Tensor& a, int64_t dim, bool keepdim) {
  check_defined(a, "argmin", "the input");
  dim = wrap_dim(dim, a.dim(), "argmin");
  if (a.dim() == 0) return zeros({}, kInt64);
  Tensor idx = kernel::arg_reduce(a.detach().contiguous(), dim, false);
  return keepdim ? idx.unsqueeze(dim) : idx;
}

std::pair<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim, Loc loc) {
  check_defined(a, "max", "the input");
  dim = wrap_dim(dim, a.dim(), "max");
  if (a.dim() == 0) return {a, zeros({}, kInt64)};
  Tensor idx = argmax(a, dim, true);
  Tensor v = gather(a, dim, idx, loc);
  if (!keepdim) {
    v = v.squeeze(dim);
    idx = idx.squeeze(dim);
  }
  return {v, idx};
}

Tensor var(const Tensor& a, const Dims& dims, int64_t correction, bool keepdim, Loc loc) {
  check_defined(a, "var", "the input");
  need_float("var", a);
  auto m = dims_mask(a, dims, "var");
  int64_t n = 1;
  for (int64_t d = 0; d < a.dim(); d++)
    if (m[d]) n *= a.size(d);
  Dims rd;
  for (int64_t d = 0; d < a.dim(); d++)
    if (m[d]) rd.push_back(d);
  Tensor centered = sub(a, mean(a, rd, true, loc), loc);
  Tensor ss = sum(mul(centered, centered, loc), rd, keepdim, loc);
  return div(ss, (double)std::max<int64_t>(n - correction, 0), loc);
}

// ------------------------------------------------------------------ matmul
Tensor matmul(const Tensor& a, const Tensor& b, Loc loc) {
  check_defined(a, "matmul", "the first operand");
  check_defined(b, "matmul", "the second operand");
  if (a.dim() == 0 || b.dim() == 0)
    fail("matmul", "both operands need at least 1 dim, got shapes ", a.shape(), " and ", b.shape());
  int64_t ka = a.size(-1), kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  if (ka != kb)
    fail("matmul", "shapes ", a.shape(), " and ", b.shape(), " cannot be multiplied (", ka, " != ", kb, ")");
  same_dtype("matmul", a, b);
  need_float("matmul", a);
  if (a.dim() == 1 && b.dim() == 1) return matmul(a.unsqueeze(0), b.unsqueeze(1), loc).reshape({});
  if (a.dim() == 1) return matmul(a.unsqueeze(0), b, loc).squeeze(-2);
  if (b.dim() == 1) return matmul(a, b.unsqueeze(1), loc).squeeze(-1);

  const int64_t M = a.size(-2), K = ka, N = b.size(-1);
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch;
  try {
    batch = broadcast_shapes(ba, bb, "matmul");
  } catch (const Error&) {
    fail("matmul", "shapes ", a.shape(), " and ", b.shape(), " cannot be multiplied: batch dims ", ba, " and ", bb,
         " do not broadcast");
  }
  Shape sa = batch, sb = batch, so = batch;
  sa.insert(sa.end(), {M, K});
  sb.insert(sb.end(), {K, N});
  so.insert(so.end(), {M, N});
  Tensor out = empty(so, a.dtype());
  kernel::gemm_batched(out, a.detach().expand(sa), b.detach().expand(sb));
  BackwardFn bw;
  Tensor xa, xb;
  if (wants_grad(a, b)) {
    xa = b.requires_grad() ? a : Tensor();
    xb = a.requires_grad() ? b : Tensor();
    // b given as a transposed view (a Linear layer's x @ W^T): its gradient is made as
    // the transpose of a contiguous [N, K] product, so that it reaches W without a copy.
    const bool b_transposed = b.dim() == 2 && b.stride(0) == 1 && b.stride(1) != 1;
    const int64_t b_dim = b.dim();
    bw = [sa = SavedTensor(xa), sb = SavedTensor(xb), b_transposed, b_dim, K, N](const Tensor& g) {
      Tensor xa = sa.get(), xb = sb.get();
      Tensor ga = xb.defined() ? matmul(g, xb.mT()) : Tensor(), gb;
      if (xa.defined()) {
        if (b_dim == 2 && xa.dim() > 2) {
          // b is shared by every matrix of the batch: one product over all their rows
          // instead of one per matrix summed afterwards
          Tensor a2 = xa.reshape({-1, K}), g2 = g.reshape({-1, N});
          gb = b_transposed ? matmul(g2.mT(), a2).mT() : matmul(a2.mT(), g2);
        } else {
          gb = b_transposed && xa.dim() == 2 ? matmul(g.mT(), xa).mT() : matmul(xa.mT(), g);
        }
      }
      // the engine sums broadcast batch dims back to each operand's shape
      return std::vector<Tensor>{ga, gb};
    };
  }
  return record("matmul", loc, out, {a, b}, std::move(bw), {xa, xb});
}

// ------------------------------------------------------------------ linear
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Loc loc) {
  check_defined(x, "linear", "x");
  check_defined(weight, "linear", "weight");
  const char* op = "linear";
  if (weight.dim() != 2) fail(op, "expected weight [out, in], got shape ", weight.shape());
  const int64_t out_f = weight.size(0), in_f = weight.size(1);
  if (x.dim() == 0 || x.size(-1) != in_f)
    fail(op, "expected input [..., ", in_f, "] for weight ", weight.shape(), ", got shape ", x.shape());
  if (bias.defined() && bias.shape() != Shape{out_f})
    fail(op, "expected bias [", out_f, "] for weight ", weight.shape(), ", got shape ", bias.shape());
  same_dtype(op, x, weight);
  if (bias.defined()) same_dtype(op, x, bias);
  need_float(op, x);
  Shape out_shape = x.shape();
  out_shape.back() = out_f;
  const int64_t rows = numel_of(out_shape) / std::max<int64_t>(out_f, 1);
  Tensor x2 = x.detach().reshape({rows, in_f});
  Tensor w = weight.detach();
  Tensor y = empty({rows, out_f}, x.dtype());
  // every row of y starts as the bias, and the GEMM adds into it
  kernel::gemm_batched(y, x2, w.t(), /*accumulate=*/false, bias.defined() ? bias.detach().contiguous() : Tensor());
  BackwardFn bw;
  Tensor saved_x, saved_w;
  if (wants_grad(x, weight, bias)) {
    const bool gx = x.requires_grad(), gw = weight.requires_grad(), gb = bias.defined() && bias.requires_grad();
    // x as the [rows, in] matrix the GEMMs read, recorded as a reshape of x when x
    // requires grad, so that a recorded backward reaches x through it
    saved_x = gw ? (x.dim() == 2 ? x : x.reshape({rows, in_f})) : Tensor();
    saved_w = gx ? weight : Tensor();
    const Shape x_shape = x.shape();
    bw = [sx = SavedTensor(saved_x), sw = SavedTensor(saved_w), gx, gw, gb, rows, in_f, out_f,
          x_shape](const Tensor& g) {
      Tensor g2 = g.reshape({rows, out_f});
      Tensor dx, dw, db;
      if (grad_enabled()) {  // recorded: the same products as ops
        if (gx) dx = matmul(g2, sw.get()).view(x_shape);
        if (gw) dw = matmul(g2.t(), sx.get());
        if (gb) db = sum(g2, {0});
        return std::vector<Tensor>{dx, dw, db};
      }
      // the two products and the bias's column sums in one parallel region
      std::vector<kernel::Product> products;
      if (gx) {
        dx = empty({rows, in_f}, g.dtype());
        products.push_back({.c = dx, .a = g2, .b = sw.data()});  // [rows, out] @ [out, in]
      }
      if (gw) {
        dw = empty({out_f, in_f}, g.dtype());
        products.push_back({.c = dw, .a = g2.t(), .b = sx.data()});  // [out, rows] @ [rows, in]
      }
      kernel::ExtraTasks column_sums;
      if (gb && g2.is_contiguous()) {
        db = empty({out_f}, g.dtype());
        column_sums = {.tasks = kernel::sum_rows_blocks(out_f),
                       .work = double(rows) * double(out_f),
                       .run = [&](int64_t block) { kernel::sum_rows_block(db, g2, block); }};
      } else if (gb) {
        db = sum(g2, {0});
      }
      kernel::gemm_together(products, column_sums);
      if (gx) dx = dx.view(x_shape);
      return std::vector<Tensor>{dx, dw, db};
    };
  }
  return record(op, loc, y.view(out_shape), {x, weight, bias}, std::move(bw), {saved_x, saved_w});
}

// ------------------------------------------------------------------ softmax
// A contiguous tensor as rows along dim: outer blocks of n elements, inner apart.
struct RowsAlong {
  int64_t outer = 1, n = 1, inner = 1;
};
static RowsAlong rows_along(const Tensor& t, int64_t dim) {
  RowsAlong r;
  r.n = t.size(dim);
  for (int64_t d = 0; d < dim; d++) r.outer *= t.size(d);
  for (int64_t d = dim + 1; d < t.dim(); d++) r.inner *= t.size(d);
  return r;
}

static Tensor softmax_impl(const char* name, const Tensor& a, int64_t dim, const Loc& loc, bool log) {
  need_float(name, a);
  if (a.dim() == 0) return record(name, loc, log ? zeros_like(a) : ones_like(a), {a}, nullptr);
  dim = wrap_dim(dim, a.dim(), name);
  const RowsAlong r = rows_along(a, dim);
  Tensor x = a.detach().contiguous();
  Tensor out = empty(a.shape(), a.dtype());
  kernel::softmax_forward(out, x, r.outer, r.n, r.inner, log);
  BackwardFn bw;
  if (wants_grad(a)) {
    bw = [y = SavedTensor(out, /*is_output=*/true), dim, log](const Tensor& g) {
      return std::vector<Tensor>{softmax_backward(g, y.get(), dim, log)};
    };
  }
  return record(name, loc, out, {a}, std::move(bw), {out});
}

// The gradient through softmax (or log_softmax) as an op of its own, given the output y
// and the gradient g reaching it, with the fused row kernel:
//   softmax:      dx = y * (g - sum(g * y))
//   log_softmax:  dx = g - exp(y) * sum(g)
// and its own backward (what differentiating through softmax twice uses), for an upstream h:
//   softmax:      dg = y * (h - sum(h * y))  (the same map: it is self-adjoint)
//                 dy = h * (g - sum(g * y)) - g * sum(h * y)
//   log_softmax:  dg = h - sum(h * exp(y)),  dy = -h * exp(y) * sum(g)
// with every sum along dim, kept for broadcasting.
Tensor softmax_backward(const Tensor& g, const Tensor& y, int64_t dim, bool log, Loc loc) {
  check_defined(g, "softmax_backward", "g");
  check_defined(y, "softmax_backward", "y");
  const char* name = log ? "log_softmax_backward" : "softmax_backward";
  same_dtype(name, g, y);
  need_float(name, y);
  if (g.shape() != y.shape())
    fail(name, "expected a gradient of the output's shape ", y.shape(), ", got ", g.shape());
  if (y.dim() == 0) return record(name, loc, zeros_like(y), {g, y}, nullptr);
  dim = wrap_dim(dim, y.dim(), name);
  const RowsAlong r = rows_along(y, dim);
  Tensor yc = y.detach().contiguous();
  Tensor dx = empty(y.shape(), y.dtype());
  kernel::softmax_backward(dx, g.detach().contiguous(), yc, r.outer, r.n, r.inner, log);
  BackwardFn bw;
  if (wants_grad(g, y)) {
    const bool gg = g.requires_grad(), gy = y.requires_grad();
    bw = [sg = SavedTensor(gy ? g : Tensor()), sy = SavedTensor(y), dim, log, gg, gy](const Tensor& h) {
      Tensor yv = sy.get(), dg, dy;
      if (log) {
        Tensor ey = exp(yv);
        if (gg) dg = sub(h, sum(mul(h, ey), {dim}, true));
        if (gy) dy = neg(mul(mul(h, ey), sum(sg.get(), {dim}, true)));
      } else {
        if (gg) dg = softmax_backward(h, yv, dim, false);
        if (gy) {
          Tensor gv = sg.get();
          dy = sub(mul(h, sub(gv, sum(mul(gv, yv), {dim}, true))), mul(gv, sum(mul(h, yv), {dim}, true)));
        }
      }
      return std::vector<Tensor>{dg, dy};
    };
  }
  return record(name, loc, dx, {g, y}, std::move(bw), {g, y});
}
Tensor softmax(const Tensor& a, int64_t dim, Loc loc) {
  check_defined(a, "softmax", "the input");
  return softmax_impl("softmax", a, dim, loc, false);
}
Tensor log_softmax(const Tensor& a, int64_t dim, Loc loc) {
  check_defined(a, "log_softmax", "the input");
  return softmax_impl("log_softmax", a, dim, loc, true);
}

// ------------------------------------------------------------------ masking
Tensor masked_fill(const Tensor& a, const Tensor& mask, double value, Loc loc) {
  check_defined(a, "masked_fill", "a");
  check_defined(mask, "masked_fill", "mask");
  if (mask.dtype() != kBool)
    fail("masked_fill", "expected a bool mask, got ", dtype_name(mask.dtype()), " of shape ", mask.shape());
  Shape s = broadcast_shapes(a.shape(), mask.shape(), "masked_fill");
  if (s != a.shape())
    fail("masked_fill", "a mask of shape ", mask.shape(), " cannot be broadcast to the input's shape ", a.shape());
  Tensor me = mask.detach().expand(s);
  Tensor out = empty(s, a.dtype());
  dispatch_numeric(a.dtype(), "masked_fill", [&](auto tag) {
    using T = decltype(tag);
    const T v = static_cast<T>(value);
    map2<T, T, uint8_t>(out, a.detach(), me, [v](T x, uint8_t m) { return m ? v : x; });
  });
  BackwardFn bw;
  if (wants_grad(a)) bw = [me](const Tensor& g) { return std::vector<Tensor>{masked_fill(g, me, 0.0)}; };
  return record("masked_fill", loc, out, {a}, std::move(bw), {me});
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, Loc loc) {
  check_defined(cond, "where", "cond");
  check_defined(a, "where", "a");
  check_defined(b, "where", "b");
  if (cond.dtype() != kBool)
    fail("where", "expected a bool condition, got ", dtype_name(cond.dtype()), " of shape ", cond.shape());
  same_dtype("where", a, b);
  Shape s = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor ce = cond.detach().expand(s);
  Tensor out = empty(s, a.dtype());
  dispatch_all(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    map3<T, uint8_t, T, T>(out, ce, a.detach().expand(s), b.detach().expand(s),
                           [](uint8_t c, T x, T y) { return c ? x : y; });
  });
  BackwardFn bw;
  if (wants_grad(a, b)) {
    bool ga = a.requires_grad(), gb = b.requires_grad();
    bw = [ce, ga, gb](const Tensor& g) {
      Tensor z = zeros({}, g.dtype());
      return std::vector<Tensor>{Tensor(), ga ? where(ce, g, z) : Tensor(), gb ? where(ce, z, g) : Tensor()};
    };
  }
  return record("where", loc, out, {cond, a, b}, std::move(bw), {ce});
}

Tensor where(const Tensor& cond, const Tensor& a, double b, Loc loc) {
  check_defined(cond, "where", "cond");
  check_defined(a, "where", "a");
  return where(cond, a, full({}, b, a.dtype()), loc);
}

// ------------------------------------------------------------------ joining, splitting
static void check_all_defined(const std::vector<Tensor>& ts, const char* op) {
  for (size_t i = 0; i < ts.size(); i++)
    if (!ts[i].defined()) fail_undefined(ts[i], op, cat_str("tensor ", (int64_t)i, " of the list").c_str());
}

Tensor cat(const std::vector<Tensor>& ts, int64_t dim, Loc loc) {
  if (ts.empty()) fail("cat", "expected a non-empty list of tensors");
  check_all_defined(ts, "cat");
  const Tensor& t0 = ts[0];
  dim = wrap_dim(dim, t0.dim(), "cat");
  if (t0.dim() == 0) fail("cat", "zero-dim tensors cannot be concatenated; use stack");
  int64_t total = 0;
  for (size_t i = 0; i < ts.size(); i++) {
    const Tensor& t = ts[i];
    if (t.dtype() != t0.dtype())
      fail("cat", "expected all tensors to have dtype ", dtype_name(t0.dtype()), ", but tensor ", (int64_t)i, " is ",
           dtype_name(t.dtype()));
    bool ok = t.dim() == t0.dim();
    for (int64_t d = 0; ok && d < t.dim(); d++)
      if (d != dim && t.size(d) != t0.size(d)) ok = false;
    if (!ok)
      fail("cat", "sizes must match except in dim ", dim, ": tensor 0 has shape ", t0.shape(), " but tensor ",
           (int64_t)i, " has shape ", t.shape());
    total += t.size(dim);
  }
  Shape s = t0.shape();
  s[dim] = total;
  Tensor out = empty(s, t0.dtype());
  std::vector<int64_t> sizes;
  int64_t off = 0;
  for (const Tensor& t : ts) {
    out.narrow(dim, off, t.size(dim)).copy_(t.detach());
    sizes.push_back(t.size(dim));
    off += t.size(dim);
  }
  BackwardFn bw;
  if (wants_grad_list(ts)) {
    bw = [sizes, dim](const Tensor& g) {
      std::vector<Tensor> r;
      int64_t o = 0;
      for (int64_t n : sizes) {
        r.push_back(g.narrow(dim, o, n));
        o += n;
      }
      return r;
    };
  }
  return record("cat", loc, out, ts, std::move(bw));
}

Tensor stack(const std::vector<Tensor>& ts, int64_t dim, Loc loc) {
  if (ts.empty()) fail("stack", "expected a non-empty list of tensors");
  check_all_defined(ts, "stack");
  for (size_t i = 1; i < ts.size(); i++)
    if (ts[i].shape() != ts[0].shape())
      fail("stack", "expected all tensors to have shape ", ts[0].shape(), ", but tensor ", (int64_t)i, " has shape ",
           ts[i].shape());
  dim = wrap_dim(dim, ts[0].dim() + 1, "stack");
  std::vector<Tensor> u;
  for (const Tensor& t : ts) u.push_back(t.unsqueeze(dim));
  return cat(u, dim, loc);
}

std::vector<Tensor> split(const Tensor& a, const std::vector<int64_t>& sizes, int64_t dim) {
  check_defined(a, "split", "the input");
  dim = wrap_dim(dim, a.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) fail("split", "sizes must be non-negative, got ", (Shape)sizes);
    total += s;
  }
  if (total != a.size(dim))
    fail("split", "sizes ", (Shape)sizes, " add up to ", total, " but dim ", dim, " of shape ", a.shape(), " has size ",
         a.size(dim));
  std::vector<Tensor> out;
  int64_t off = 0;
  for (int64_t s : sizes) {
    out.push_back(a.narrow(dim, off, s));
    off += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim) {
  check_defined(a, "split", "the input");
  dim = wrap_dim(dim, a.dim(), "split");
  if (split_size <= 0) fail("split", "split_size must be positive, got ", split_size);
  std::vector<int64_t> sizes;
  for (int64_t r = a.size(dim); r > 0; r -= split_size) sizes.push_back(std::min(r, split_size));
  if (sizes.empty()) sizes.push_back(0);
  return split(a, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& a, int64_t chunks, int64_t dim) {
  check_defined(a, "chunk", "the input");
  if (chunks <= 0) fail("chunk", "chunks must be positive, got ", chunks);
  dim = wrap_dim(dim, a.dim(), "chunk");
  int64_t n = a.size(dim);
  return split(a, std::max<int64_t>(1, (n + chunks - 1) / chunks), dim);
}

// ------------------------------------------------------------------ indexing
static void check_index(const char* op, const Tensor& index, int64_t n, int64_t dim, const Tensor& a) {
  if (index.dtype() != kInt64)
    fail(op, "expected an int64 index, got ", dtype_name(index.dtype()), " of shape ", index.shape());
  const int64_t* p = index.data<int64_t>();
  for (int64_t i = 0; i < index.numel(); i++)
    if (p[i] < 0 || p[i] >= n)
      fail(op, "index ", p[i], " is out of range for dim ", dim, " of size ", n, " (input shape ", a.shape(), ")");
}

// The backward of index_select (index_add of g into zeros of shape `in` at idx along dim)
// or of gather (scatter_add), as an op whose own backward is the selection again.
static Tensor scatter_rows(const Tensor& g, const Shape& in, int64_t dim, const Tensor& idx, bool elementwise) {
  Tensor gx = zeros(in, g.dtype());
  if (elementwise) kernel::scatter_add(gx, dim, idx, g.detach().contiguous());
  else kernel::index_add(gx, dim, idx, g.detach().contiguous());
  BackwardFn bw;
  if (wants_grad(g))
    bw = [idx, dim, elementwise](const Tensor& h) {
      return std::vector<Tensor>{elementwise ? gather(h, dim, idx) : index_select(h, dim, idx)};
    };
  return record(elementwise ? "gather_backward" : "index_select_backward", Loc::current(), gx, {g}, std::move(bw));
}

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index_in, Loc loc) {
  check_defined(a, "index_select", "a");
  check_defined(index_in, "index_select", "index");
  dim = wrap_dim(dim, a.dim(), "index_select");
  if (index_in.dim() > 1) fail("index_select", "expected a 1-D index, got shape ", index_in.shape());
  Tensor index = index_in.contiguous().reshape({-1});
  check_index("index_select", index, a.size(dim), dim, a);
  Shape s = a.shape();
  s[dim] = index.numel();
  Tensor out = empty(s, a.dtype());
  kernel::index_select(out, a.detach().contiguous(), dim, index);
  BackwardFn bw;
  if (wants_grad(a)) {
    Shape in = a.shape();
    Tensor idx = index.detach();
    bw = [in, idx, dim](const Tensor& g) { return std::vector<Tensor>{scatter_rows(g, in, dim, idx, false)}; };
  }
  return record("index_select", loc, out, {a}, std::move(bw), {index});
}

Tensor gather(const Tensor& a, int64_t dim, const Tensor& index_in, Loc loc) {
  check_defined(a, "gather", "a");
  check_defined(index_in, "gather", "index");
  dim = wrap_dim(dim, a.dim(), "gather");
  bool ok = index_in.dim() == a.dim();
  for (int64_t d = 0; ok && d < a.dim(); d++)
    if (d != dim && index_in.size(d) != a.size(d)) ok = false;
  if (!ok)
    fail("gather", "expected an index with the input's shape ", a.shape(), " except in dim ", dim, ", got shape ",
         index_in.shape());
  Tensor index = index_in.contiguous();
  check_index("gather", index, a.size(dim), dim, a);
  Tensor out = empty(index.shape(), a.dtype());
  kernel::gather(out, a.detach().contiguous(), dim, index);
  BackwardFn bw;
  if (wants_grad(a)) {
    Shape in = a.shape();
    Tensor idx = index.detach();
    bw = [in, idx, dim](const Tensor& g) { return std::vector<Tensor>{scatter_rows(g, in, dim, idx, true)}; };
  }
  return record("gather", loc, out, {a}, std::move(bw), {index});
}

Tensor embedding_lookup(const Tensor& weight, const Tensor& ids, Loc loc) {
  check_defined(weight, "embedding_lookup", "weight");
  check_defined(ids, "embedding_lookup", "ids");
  if (weight.dim() != 2) fail("embedding_lookup", "expected a 2-D weight [V, E], got shape ", weight.shape());
  check_index("embedding_lookup", ids.contiguous(), weight.size(0), 0, weight);  // errors name this op
  Shape s = ids.shape();
  s.push_back(weight.size(1));
  return index_select(weight, 0, ids.reshape({-1}), loc).reshape(s);
}

// ------------------------------------------------------------------ dropout
// One pass each way and no mask in memory: element c of row r (every dim but the last) is
// kept unless draw keys[r] + c of the generator falls below p (DropoutDraws), and the
// backward makes the same decisions again from the same keys.
namespace {
using RowKeys = std::shared_ptr<const std::vector<uint64_t>>;
using KeptMask = std::shared_ptr<const std::vector<uint8_t>>;  // 1 where kept, per element

// With Relu, relu first: out = x * scale where x > 0 and kept, else 0, in the same pass.
// With Keep, each element's decision is written to kept too.
template <class T, bool Relu, bool Keep>
void dropout_apply(T* out, const T* in, int64_t cols, const std::vector<uint64_t>& keys, const DropoutDraws& d,
                   uint8_t* kept) {
  const int64_t rows = (int64_t)keys.size();
  parallel_for(rows, cols * cost::kExp, [&](int64_t b, int64_t e) {
    // what the loop reads, as locals (so that it vectorises: a byte store may alias anything)
    const Generator gen = d.gen;
    const uint64_t threshold = d.threshold;
    const int64_t n = cols;
    const T scale = T(d.scale);
    for (int64_t r = b; r < e; r++) {
      const uint64_t key = keys[(size_t)r];
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

// Dropout with given draws and row keys. Linear in a with the same mask each time, so its
// backward is itself, and so is every derivative after: the forward keeps its decisions
// (a byte an element) for them, rather than drawing them again. With relu, relu first:
// the gradient then passes, times 1/(1-p), where the output is positive, and nowhere
// else - the backward reads the output, not the draws.
Tensor dropout_with(const Tensor& a, const DropoutDraws& draws, const RowKeys& keys, bool relu, const Loc& loc,
                    KeptMask kept = nullptr) {
  Tensor x = a.detach().contiguous();
  Tensor out = empty(a.shape(), a.dtype());
  const int64_t cols = a.dim() == 0 ? 1 : a.size(-1);
  // the decisions, kept for the backward (and every derivative after) when it will run
  std::shared_ptr<std::vector<uint8_t>> mask;
  if (!kept && !relu && wants_grad(a)) mask = std::make_shared<std::vector<uint8_t>>((size_t)a.numel());
  dispatch_float(a.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    if (a.numel() == 0) return;
    T* y = out.data<T>();
    const T* xp = x.data<T>();
    if (kept) kept_apply<T>(y, xp, a.numel(), kept->data(), T(draws.scale));
    else if (relu) dropout_apply<T, true, false>(y, xp, cols, *keys, draws, nullptr);
    else if (mask) dropout_apply<T, false, true>(y, xp, cols, *keys, draws, mask->data());
    else dropout_apply<T, false, false>(y, xp, cols, *keys, draws, nullptr);
  });
  if (mask) kept = std::move(mask);
  BackwardFn bw;
  if (wants_grad(a) && !relu)
    bw = [draws, keys, kept, loc](const Tensor& g) {
      return std::vector<Tensor>{dropout_with(g, draws, keys, false, loc, kept)};
    };
  if (wants_grad(a) && relu)
    bw = [s = SavedTensor(out, /*is_output=*/true), scale = draws.scale](const Tensor& g) {
      const Tensor& y = s.data();  // only where it is positive matters: no gradient flows through it
      if (grad_enabled()) return std::vector<Tensor>{mul(g, mul(gt(y, 0.0).to(y.dtype()), scale))};
      Tensor gc = g.contiguous(), dx = empty(y.shape(), y.dtype());
      dispatch_float(y.dtype(), "relu_dropout backward", [&](auto tag) {
        using T = decltype(tag);
        const T *pg = gc.data<T>(), *py = y.data<T>();
        T* pd = dx.data<T>();
        const T sc = T(scale);
        parallel_for(y.numel(), cost::kCopy, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; i++) {
            const T kept = pg[i] * sc;  // read unconditionally, so that the loop vectorises
            pd[i] = py[i] > T(0) ? kept : T(0);
          }
        });
      });
      return std::vector<Tensor>{dx};
    };
  return record(relu ? "relu_dropout" : "dropout", loc, out, {a}, std::move(bw), {relu ? out : Tensor()});
}

// The draws and every row's key for dropout of a (rows: every dim but the last).
std::pair<DropoutDraws, RowKeys> draws_for(const Tensor& a, double p, Generator* gen) {
  const DropoutDraws draws = DropoutDraws::take(gen ? *gen : default_generator(), p, a.shape());
  const int64_t cols = a.dim() == 0 ? 1 : a.size(-1), rows = cols == 0 ? 0 : a.numel() / cols;
  auto keys = std::make_shared<std::vector<uint64_t>>((size_t)rows);
  draws.row_keys(0, rows, keys->data());
  return {draws, keys};
}

// The same for packed rows [N, C] standing at grid_rows of a [B, S, C] grid.
std::pair<DropoutDraws, RowKeys> packed_draws_for(const char* op, const Tensor& rows, const Tensor& grid_rows,
                                                  int64_t grid_len, double p, Generator* gen) {
  const DropoutDraws draws = DropoutDraws::take(gen ? *gen : default_generator(), p, rows.shape());
  const std::vector<int64_t> at = grid_rows.contiguous().to_vector<int64_t>();
  auto keys = std::make_shared<std::vector<uint64_t>>(at.size());
  for (size_t n = 0; n < at.size(); n++) {
    if (at[n] < 0) fail(op, "grid_rows[", (int64_t)n, "] = ", at[n], " is negative");
    (*keys)[n] = draws.row_key(at[n] / grid_len, at[n] % grid_len);
  }
  return {draws, keys};
}

void check_packed(const char* op, const Tensor& rows, const Tensor& grid_rows, int64_t grid_len, double p) {
  need_float(op, rows);
  if (!(p >= 0.0 && p <= 1.0)) fail(op, "probability must be in [0, 1], got ", p);
  if (rows.dim() != 2) fail(op, "expected packed rows [N, C], got shape ", rows.shape());
  if (grid_rows.dtype() != kInt64 || grid_rows.dim() != 1 || grid_rows.size(0) != rows.size(0))
    fail(op, "expected int64 grid_rows [N] with N = ", rows.size(0), ", got ", dtype_name(grid_rows.dtype()), " ",
         grid_rows.shape());
  if (grid_len <= 0) fail(op, "grid_len must be positive, got ", grid_len);
}
}  // namespace

Tensor dropout(const Tensor& a, double p, bool training, Generator* gen, Loc loc) {
  check_defined(a, "dropout", "the input");
  need_float("dropout", a);
  if (!(p >= 0.0 && p <= 1.0)) fail("dropout", "probability must be in [0, 1], got ", p);
  if (!training || p == 0.0) return a;
  auto [draws, keys] = draws_for(a, p, gen);
  return dropout_with(a, draws, keys, false, loc);
}

Tensor relu_dropout(const Tensor& a, double p, bool training, Generator* gen, Loc loc) {
  check_defined(a, "relu_dropout", "the input");
  need_float("relu_dropout", a);
  if (!(p >= 0.0 && p <= 1.0)) fail("relu_dropout", "probability must be in [0, 1], got ", p);
  if (!training || p == 0.0) return relu(a, loc);
  auto [draws, keys] = draws_for(a, p, gen);
  return dropout_with(a, draws, keys, true, loc);
}

Tensor dropout_packed(const Tensor& rows, const Tensor& grid_rows, int64_t grid_len, double p, bool training,
                      Generator* gen, Loc loc) {
  check_defined(rows, "dropout_packed", "rows");
  check_defined(grid_rows, "dropout_packed", "grid_rows");
  const char* op = "dropout_packed";
  check_packed(op, rows, grid_rows, grid_len, p);
  if (!training || p == 0.0) return rows;
  auto [draws, keys] = packed_draws_for(op, rows, grid_rows, grid_len, p, gen);
  return dropout_with(rows, draws, keys, false, loc);
}

Tensor relu_dropout_packed(const Tensor& rows, const Tensor& grid_rows, int64_t grid_len, double p, bool training,
                           Generator* gen, Loc loc) {
  check_defined(rows, "relu_dropout_packed", "rows");
  check_defined(grid_rows, "relu_dropout_packed", "grid_rows");
  const char* op = "relu_dropout_packed";
  check_packed(op, rows, grid_rows, grid_len, p);
  if (!training || p == 0.0) return relu(rows, loc);
  auto [draws, keys] = packed_draws_for(op, rows, grid_rows, grid_len, p, gen);
  return dropout_with(rows, draws, keys, true, loc);
}

// ------------------------------------------------------------------ operators
Tensor operator+(TensorAt a, const Tensor& b) { return add(a.t, b, a.loc); }
Tensor operator-(TensorAt a, const Tensor& b) { return sub(a.t, b, a.loc); }
Tensor operator*(TensorAt a, const Tensor& b) { return mul(a.t, b, a.loc); }
Tensor operator/(TensorAt a, const Tensor& b) { return div(a.t, b, a.loc); }
Tensor operator+(TensorAt a, double s) { return add(a.t, s, a.loc); }
Tensor operator-(TensorAt a, double s) { return sub(a.t, s, a.loc); }
Tensor operator*(TensorAt a, double s) { return mul(a.t, s, a.loc); }
Tensor operator/(TensorAt a, double s) { return div(a.t, s, a.loc); }
Tensor operator+(double s, TensorAt a) { return add(a.t, s, a.loc); }
Tensor operator-(double s, TensorAt a) { return rsub(s, a.t, a.loc); }
Tensor operator*(double s, TensorAt a) { return mul(a.t, s, a.loc); }
Tensor operator/(double s, TensorAt a) { return rdiv(s, a.t, a.loc); }
Tensor operator-(TensorAt a) { return neg(a.t, a.loc); }

}  // namespace ember
