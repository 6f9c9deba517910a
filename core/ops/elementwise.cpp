// Elementwise ops: binary (broadcasting), with a scalar, unary, comparisons and logic, and the
// arithmetic operators. Forward through kernels, backward recorded only when needed;
// backward functions run with grad mode off and may use other ops.
#include "core/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/forward_ad.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/elementwise.h"
#include "core/ops/helpers.h"

namespace ember {

using forward_detail::add_tangents;
using ops_detail::need_computing;
using ops_detail::need_float;
using ops_detail::same_dtype;

namespace {

using kernel::map1;
using kernel::map2;

// Elementwise binary forward over the broadcast shape.
template <class Op>
Tensor binary_forward(const char* name, const Tensor& a, const Tensor& b, bool float_only, Op op) {
  same_dtype(name, a, b);
  if (float_only) need_float(name, a);
  need_computing(name, a);
  Shape s = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = empty(s, a.dtype());
  Tensor ae = a.detach().expand(s), be = b.detach().expand(s);
  dispatch_numeric(a.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    map2<T, T, T>(out, ae, be, [&](T x, T y) { return op(x, y); });
  });
  return out;
}

// out = op(a, s) elementwise, s converted to a's element type (an integer for int64).
template <class Op>
Tensor scalar_forward(const char* name, const Tensor& a, bool float_only, double s, Op op) {
  if (float_only) need_float(name, a);
  need_computing(name, a);
  Tensor out = empty(a.shape(), a.dtype());
  dispatch_numeric(a.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const T v = scalar_as<T>(s, name, /*integral=*/true);
    map1<T, T>(out, a.detach(), [&](T x) { return op(x, v); });
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
  // the Jacobian is diagonal: the tangent goes through the same derivative as the gradient
  auto jvp = [&](const std::vector<Tensor>& t) { return dt(t[0], save == Save::Input ? a : out); };
  return record(name, loc, out, {a}, std::move(bw), {save == Save::Input ? x : out}, jvp);
}

// The forward-mode rule of an op linear in its one input: the tangent times scale.
auto scaled_tangent(double scale) {
  return [scale](const std::vector<Tensor>& t) { return scale == 1.0 ? t[0] : mul(t[0], scale); };
}

}  // namespace

// ------------------------------------------------------------------ binary
Tensor add(const Tensor& a, const Tensor& b, Loc loc) {
  check_defined(a, "add", "the first operand");
  check_defined(b, "add", "the second operand");
  Tensor out = binary_forward("add", a, b, false, [](auto x, auto y) { return wrapping_add(x, y); });
  return record("add", loc, out, {a, b}, wants_grad(a, b) ? BackwardFn([](const Tensor& g) {
    return std::vector<Tensor>{g, g};
  }) : nullptr, {}, [](const std::vector<Tensor>& t) { return add_tangents(t[0], t[1]); });
}

Tensor sub(const Tensor& a, const Tensor& b, Loc loc) {
  check_defined(a, "sub", "the first operand");
  check_defined(b, "sub", "the second operand");
  Tensor out = binary_forward("sub", a, b, false, [](auto x, auto y) { return wrapping_sub(x, y); });
  bool gb = b.requires_grad();
  return record("sub", loc, out, {a, b}, wants_grad(a, b) ? BackwardFn([gb](const Tensor& g) {
    return std::vector<Tensor>{g, gb ? neg(g) : Tensor()};
  }) : nullptr, {}, [](const std::vector<Tensor>& t) { return t[1].defined() ? add_tangents(t[0], neg(t[1])) : t[0]; });
}

Tensor mul(const Tensor& a, const Tensor& b, Loc loc) {
  check_defined(a, "mul", "the first operand");
  check_defined(b, "mul", "the second operand");
  Tensor out = binary_forward("mul", a, b, false, [](auto x, auto y) { return wrapping_mul(x, y); });
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
  auto jvp = [&](const std::vector<Tensor>& t) {  // ta b + a tb
    return add_tangents(t[0].defined() ? mul(t[0], b) : Tensor(), t[1].defined() ? mul(a, t[1]) : Tensor());
  };
  return record("mul", loc, out, {a, b}, std::move(bw), {sa, sb}, jvp);
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
  auto jvp = [&](const std::vector<Tensor>& t) {  // ta / b - tb a / b^2 = (ta - out tb) / b
    return add_tangents(t[0].defined() ? div(t[0], b) : Tensor(),
                        t[1].defined() ? neg(div(mul(out, t[1]), b)) : Tensor());
  };
  return record("div", loc, out, {a, b}, std::move(bw), {a, b}, jvp);
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
  auto jvp = [&](const std::vector<Tensor>& t) {  // ta b a^(b-1) + tb out log a (0 where a == 0)
    Tensor ta, tb;
    if (t[0].defined()) ta = mul(t[0], mul(b, pow(a, sub(b, 1.0))));
    if (t[1].defined()) {
      Tensor zero = eq(a.detach(), 0.0);
      Tensor la = where(zero, zeros_like(a), log(where(zero, ones_like(a), a)));
      tb = mul(t[1], mul(out, la));
    }
    return add_tangents(ta, tb);
  };
  return record("pow", loc, out, {a, b}, std::move(bw), {a, b, out}, jvp);
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
  auto jvp = [&](const std::vector<Tensor>& t) {  // the same weights as the gradient's
    Tensor wa = binary_forward(name, a.detach(), b.detach(), true, [is_max](auto x, auto y) {
      using T = decltype(x);
      return x == y ? T(0.5) : ((is_max ? x > y : x < y) ? T(1) : T(0));
    });
    return add_tangents(t[0].defined() ? mul(t[0], wa) : Tensor(), t[1].defined() ? mul(t[1], rsub(1.0, wa)) : Tensor());
  };
  return record(name, loc, out, {a, b}, std::move(bw), {a, b}, jvp);
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
  Tensor out = scalar_forward("add", a, false, s, [](auto x, auto v) { return wrapping_add(x, v); });
  return record("add", loc, out, {a}, pass_through(a, 1.0), {}, scaled_tangent(1.0));
}
Tensor sub(const Tensor& a, double s, Loc loc) {
  check_defined(a, "sub", "the input");
  Tensor out = scalar_forward("sub", a, false, s, [](auto x, auto v) { return wrapping_sub(x, v); });
  return record("sub", loc, out, {a}, pass_through(a, 1.0), {}, scaled_tangent(1.0));
}
Tensor rsub(double s, const Tensor& a, Loc loc) {
  check_defined(a, "rsub", "the input");
  Tensor out = scalar_forward("rsub", a, false, s, [](auto x, auto v) { return wrapping_sub(v, x); });
  return record("rsub", loc, out, {a}, pass_through(a, -1.0), {}, scaled_tangent(-1.0));
}
Tensor mul(const Tensor& a, double s, Loc loc) {
  check_defined(a, "mul", "the input");
  Tensor out = scalar_forward("mul", a, false, s, [](auto x, auto v) { return wrapping_mul(x, v); });
  return record("mul", loc, out, {a}, pass_through(a, s), {}, scaled_tangent(s));
}
Tensor div(const Tensor& a, double s, Loc loc) {
  check_defined(a, "div", "the input");
  Tensor out = scalar_forward("div", a, true, s, [](auto x, auto v) { return x / v; });
  return record("div", loc, out, {a}, pass_through(a, 1.0 / s), {}, scaled_tangent(1.0 / s));
}
Tensor rdiv(double s, const Tensor& a, Loc loc) {
  check_defined(a, "rdiv", "the input");
  Tensor out = scalar_forward("rdiv", a, true, s, [](auto x, auto v) { return v / x; });
  BackwardFn bw;
  if (wants_grad(a)) {
    bw = [xa = SavedTensor(a), s](const Tensor& g) {
      if (grad_enabled()) return std::vector<Tensor>{mul(g, rdiv(-s, square(xa.get())))};
      return std::vector<Tensor>{zip_grad("rdiv", g, xa.data(), [s](auto gv, auto x) {
        return -gv * static_cast<decltype(x)>(s) / (x * x);
      })};
    };
  }
  auto jvp = [&](const std::vector<Tensor>& t) { return mul(t[0], rdiv(-s, square(a))); };
  return record("rdiv", loc, out, {a}, std::move(bw), {a}, jvp);
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
  Tensor out = scalar_forward("neg", a, false, 0.0, [](auto x, auto zero) { return wrapping_sub(zero, x); });
  return record("neg", loc, out, {a}, pass_through(a, -1.0), {}, scaled_tangent(-1.0));
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
Tensor sin(const Tensor& a, Loc loc) {
  check_defined(a, "sin", "the input");
  return unary_op("sin", a, loc, Save::Input, [](auto x) { return std::sin(x); },
                  [](auto g, auto x) { return g * std::cos(x); },
                  [](const Tensor& g, const Tensor& x) { return mul(g, cos(x)); });
}
Tensor cos(const Tensor& a, Loc loc) {
  check_defined(a, "cos", "the input");
  return unary_op("cos", a, loc, Save::Input, [](auto x) { return std::cos(x); },
                  [](auto g, auto x) { return -g * std::sin(x); },
                  [](const Tensor& g, const Tensor& x) { return mul(g, neg(sin(x))); });
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
// A tensor compared with a number. A float tensor compares with the number in its own
// dtype, as PyTorch does (eq(float32 0.1, 0.1) holds); an int64 or bool tensor compares
// exactly with the number itself (eq(int64 0, 0.5) does not hold, nor eq(INT64_MAX, 2^63)).
enum class Order { Less, Equal, Greater, Unordered };
static Order order_of(int64_t x, double s) {
  if (std::isnan(s)) return Order::Unordered;
  if (s >= 0x1p63) return Order::Less;
  if (s < -0x1p63) return Order::Greater;
  const double fl = std::floor(s);
  const int64_t i = (int64_t)fl;
  if (x < i) return Order::Less;
  if (x > i) return Order::Greater;
  return fl == s ? Order::Equal : Order::Less;
}
template <class T>
static Order order_of(T x, T v) {
  return x < v ? Order::Less : x > v ? Order::Greater : x == v ? Order::Equal : Order::Unordered;
}
template <class Pred>
static Tensor compare_scalar(const char* name, const Tensor& a, double s, Pred pred) {
  check_defined(a, name, "the input");
  Tensor out = empty(a.shape(), kBool);
  if (a.dtype() == kBFloat16) {  // the number as a bfloat16, each element compared in float32 (both exact)
    const float v = bf16_to_float(float_to_bf16((float)s));
    map1<uint8_t, BFloat16>(out, a.detach(), [&](BFloat16 x) { return (uint8_t)pred(order_of(float(x), v)); });
    return out;
  }
  if (is_floating(a.dtype())) {
    dispatch_float(a.dtype(), name, [&](auto tag) {
      using T = decltype(tag);
      const T v = static_cast<T>(s);
      map1<uint8_t, T>(out, a.detach(), [&](T x) { return (uint8_t)pred(order_of(x, v)); });
    });
    return out;
  }
  if (a.dtype() == kInt64)
    map1<uint8_t, int64_t>(out, a.detach(), [&](int64_t x) { return (uint8_t)pred(order_of(x, s)); });
  else
    map1<uint8_t, uint8_t>(out, a.detach(), [&](uint8_t x) { return (uint8_t)pred(order_of(x != 0, s)); });
  return out;
}
Tensor eq(const Tensor& a, double s) {
  return compare_scalar("eq", a, s, [](Order o) { return o == Order::Equal; });
}
Tensor ne(const Tensor& a, double s) {
  return compare_scalar("ne", a, s, [](Order o) { return o != Order::Equal; });
}
Tensor lt(const Tensor& a, double s) {
  return compare_scalar("lt", a, s, [](Order o) { return o == Order::Less; });
}
Tensor le(const Tensor& a, double s) {
  return compare_scalar("le", a, s, [](Order o) { return o == Order::Less || o == Order::Equal; });
}
Tensor gt(const Tensor& a, double s) {
  return compare_scalar("gt", a, s, [](Order o) { return o == Order::Greater; });
}
Tensor ge(const Tensor& a, double s) {
  return compare_scalar("ge", a, s, [](Order o) { return o == Order::Greater || o == Order::Equal; });
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

namespace {
// Whether x is close to y: equal (infinities of one sign included), NaN and NaN with
// equal_nan, or finite and within atol + rtol |y|.
bool close(double x, double y, double rtol, double atol, bool equal_nan) {
  if (x == y) return true;
  if (std::isnan(x) || std::isnan(y)) return equal_nan && std::isnan(x) && std::isnan(y);
  if (std::isinf(x) || std::isinf(y)) return false;
  return std::fabs(x - y) <= atol + rtol * std::fabs(y);
}

Tensor closeness(const char* op, const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  check_defined(a, op, "the first operand");
  check_defined(b, op, "the second operand");
  same_dtype(op, a, b);
  if (!(rtol >= 0) || !(atol >= 0)) fail(op, "rtol and atol must be non-negative, got ", rtol, " and ", atol);
  const Shape s = broadcast_shapes(a.shape(), b.shape(), op);
  std::vector<bool> r((size_t)numel_of(s));
  if (a.dtype() == kInt64) {  // exactly: a double cannot tell 2^53 from 2^53 + 1
    const auto x = a.expand(s).to_vector<int64_t>(), y = b.expand(s).to_vector<int64_t>();
    for (size_t i = 0; i < x.size(); i++) {
      const long double diff = (long double)x[i] - (long double)y[i];  // exact: 64-bit mantissa
      r[i] = std::fabs(diff) <= (long double)atol + (long double)rtol * std::fabs((long double)y[i]);
    }
  } else {
    const auto x = a.expand(s).to_vector<double>(), y = b.expand(s).to_vector<double>();
    for (size_t i = 0; i < x.size(); i++) r[i] = close(x[i], y[i], rtol, atol, equal_nan);
  }
  return from_bools(r, s);
}
}  // namespace

Tensor isclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  return closeness("isclose", a, b, rtol, atol, equal_nan);
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  const Tensor c = closeness("allclose", a, b, rtol, atol, false);
  return c.numel() == 0 || sum(c).integer_item<int64_t>() == c.numel();
}

bool equal(const Tensor& a, const Tensor& b) {
  check_defined(a, "equal", "the first operand");
  check_defined(b, "equal", "the second operand");
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), x.numel() * dtype_size(x.dtype())) == 0;
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
