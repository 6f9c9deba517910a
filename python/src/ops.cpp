// core/ops.h as ember.<name> functions, and as Tensor methods where PyTorch has them
// (t.sum(dim=1), t.softmax(-1)), with PyTorch's argument names. The GIL is released while
// an op computes; arguments given as Python objects (dims as an int, a tuple or None) are
// converted before.
#include <pybind11/stl.h>

#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "core/ops.h"

namespace ember::python {

namespace {

// f(), an alias's call of the ops `inner` (ember.std of var, ember.mm of matmul), with the
// alias's name in its errors: a message "<one of inner>: ..." becomes "<name>: ...".
template <class F>
auto as_named(const char* name, std::initializer_list<std::string> inner, F&& f) {
  try {
    return f();
  } catch (const OutOfMemory&) {
    throw;
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const std::string& op : inner)
      if (what.rfind(op + ":", 0) == 0) throw Error(name + what.substr(op.size()));
    throw;
  }
}

// dim as PyTorch takes it: None (every dim), an int, or a tuple or list of ints.
Dims dims_of(const py::object& dim) {
  if (dim.is_none()) return {};
  if (py::isinstance<py::sequence>(dim)) return dim.cast<Dims>();
  return {dim.cast<int64_t>()};
}

// Adds fn as ember.<name>, its first argument named input, and, when cls is given, as
// Tensor.<name> too, with self as the first argument. extra names the others.
template <class F, class... Extra>
void def(py::module_& m, TensorClass* cls, const char* name, F&& fn, const Extra&... extra) {
  m.def(name, fn, py::arg("input"), extra...);
  if (cls) cls->def(name, fn, extra...);
}

// torch.return_types.max and min: (values, indices), also by name.
py::object values_indices(const char* name, std::pair<Tensor, Tensor> r) {
  static auto* types = new py::dict();  // never destroyed: it would outlive the interpreter
  if (!types->contains(name))
    (*types)[name] = py::module_::import("collections").attr("namedtuple")(name, py::make_tuple("values", "indices"));
  return (*types)[name](r.first, r.second);
}

// max(input), max(input, dim, keepdim=False) and max(input, other), as torch.max; min
// (the max of -input) too.
py::object extreme(const Tensor& a, const py::object& dim_or_other, bool keepdim, bool largest) {
  if (py::isinstance<Tensor>(dim_or_other)) {
    const Tensor& b = dim_or_other.cast<const Tensor&>();
    OpCall in_op;
    return py::cast(largest ? maximum(a, b) : minimum(a, b));
  }
  std::optional<int64_t> dim;
  if (!dim_or_other.is_none()) dim = dim_or_other.cast<int64_t>();
  std::pair<Tensor, Tensor> r;
  Tensor all;
  {
    OpCall in_op;
    if (!dim) {
      all = largest ? max(a) : as_named("min", {"amin"}, [&] { return amin(a); });
    } else if (largest) {
      r = max(a, *dim, keepdim);
    } else {  // (the largest of -a, named min in its errors)
      r = as_named("min", {"neg", "max"}, [&] { return max(neg(a), *dim, keepdim); });
      r.first = neg(r.first);
    }
  }
  if (all.defined()) return py::cast(all);
  return values_indices(largest ? "max" : "min", r);
}

void bind_elementwise(py::module_& m, TensorClass* cls) {
  // binary, with a tensor or a Python number (which takes the tensor's dtype)
  using Binary = Tensor (*)(const Tensor&, const Tensor&, Loc);
  using WithScalar = Tensor (*)(const Tensor&, double, Loc);
  auto binary = [&](const char* name, Binary f, WithScalar s) {
    def(m, cls, name, [f](const Tensor& a, const Tensor& b) { return f(a, b, Loc::current()); },
        py::arg("other"), NoGil());
    if (s)
      def(m, cls, name, [s](const Tensor& a, double b) { return s(a, b, Loc::current()); },
          py::arg("other"), NoGil());
  };
  binary("add", add, add);
  binary("sub", sub, sub);
  binary("mul", mul, mul);
  binary("div", div, div);
  binary("pow", pow, pow);
  binary("maximum", maximum, nullptr);
  binary("minimum", minimum, nullptr);

  using Unary = Tensor (*)(const Tensor&, Loc);
  const std::pair<const char*, Unary> unary[] = {
      {"neg", neg},   {"exp", exp},   {"log", log},         {"sqrt", sqrt}, {"rsqrt", rsqrt},
      {"abs", abs},   {"tanh", tanh}, {"sin", sin},         {"cos", cos},   {"sigmoid", sigmoid},
      {"relu", relu}, {"square", square}};
  for (const auto& [name, f] : unary)
    def(m, cls, name, [f = f](const Tensor& a) { return f(a, Loc::current()); }, NoGil());

  // comparisons (bool results)
  using Compare = Tensor (*)(const Tensor&, const Tensor&);
  using CompareScalar = Tensor (*)(const Tensor&, double);
  const std::tuple<const char*, Compare, CompareScalar> compare[] = {
      {"eq", eq, eq}, {"ne", ne, ne}, {"lt", lt, lt}, {"le", le, le}, {"gt", gt, gt}, {"ge", ge, ge}};
  for (const auto& [name, f, s] : compare) {
    def(m, cls, name, f, py::arg("other"), NoGil());
    def(m, cls, name, s, py::arg("other"), NoGil());
  }
  def(m, cls, "logical_and", logical_and, py::arg("other"), NoGil());
  def(m, cls, "logical_or", logical_or, py::arg("other"), NoGil());
  def(m, cls, "logical_not", logical_not, NoGil());
  def(m, cls, "isclose", isclose, py::arg("other"), py::arg("rtol") = 1e-5, py::arg("atol") = 1e-8,
      py::arg("equal_nan") = false, NoGil());
  def(m, cls, "allclose", allclose, py::arg("other"), py::arg("rtol") = 1e-5,
      py::arg("atol") = 1e-8, NoGil());
  def(m, cls, "equal", equal, py::arg("other"), NoGil());
}

void bind_reductions(py::module_& m, TensorClass* cls) {
  using Reduce = Tensor (*)(const Tensor&, const Dims&, bool, Loc);
  const std::pair<const char*, Reduce> reduce[] = {
      {"sum", [](const Tensor& a, const Dims& d, bool k, Loc l) { return sum(a, d, k, l); }},
      {"mean", [](const Tensor& a, const Dims& d, bool k, Loc l) { return mean(a, d, k, l); }},
      {"amax", amax},
      {"amin", amin},
      {"logsumexp", logsumexp}};
  for (const auto& [name, f] : reduce)
    def(m, cls, name, [f = f](const Tensor& a, const py::object& dim, bool keepdim) {
      const Dims dims = dims_of(dim);
      OpCall in_op;
      return f(a, dims, keepdim, Loc::current());
    }, py::arg("dim") = py::none(), py::arg("keepdim") = false);

  def(m, cls, "max",
      [](const Tensor& a, const py::object& dim, bool keepdim) { return extreme(a, dim, keepdim, true); },
      py::arg("dim") = py::none(), py::arg("keepdim") = false);
  def(m, cls, "min",
      [](const Tensor& a, const py::object& dim, bool keepdim) { return extreme(a, dim, keepdim, false); },
      py::arg("dim") = py::none(), py::arg("keepdim") = false);
  // without a dim, the index into the flattened tensor, as PyTorch's
  using Arg = Tensor (*)(const Tensor&, int64_t, bool);
  const std::pair<const char*, Arg> arg[] = {{"argmax", argmax}, {"argmin", argmin}};
  for (const auto& [name, f] : arg)
    def(m, cls, name, [f = f](const Tensor& a, std::optional<int64_t> dim, bool keepdim) {
      OpCall in_op;
      if (a.defined() && a.dtype() == kBFloat16) f(a, 0, false);  // (refused with a's own shape)
      return dim ? f(a, *dim, keepdim) : f(a.reshape({-1}), 0, false);
    }, py::arg("dim") = py::none(), py::arg("keepdim") = false);

  // var and std with Bessel's correction unless unbiased=False (or correction= given)
  auto variance = [](const Tensor& a, const py::object& dim, bool unbiased, bool keepdim,
                     std::optional<int64_t> correction, bool root) {
    const Dims dims = dims_of(dim);
    OpCall in_op;
    Tensor v = var(a, dims, correction.value_or(unbiased ? 1 : 0), keepdim);
    return root ? sqrt(v) : v;
  };
  def(m, cls, "var", [variance](const Tensor& a, const py::object& dim, bool unbiased, bool keepdim,
                                std::optional<int64_t> correction) {
    return variance(a, dim, unbiased, keepdim, correction, false);
  }, py::arg("dim") = py::none(), py::arg("unbiased") = true, py::arg("keepdim") = false,
      py::kw_only(), py::arg("correction") = py::none());
  def(m, cls, "std", [variance](const Tensor& a, const py::object& dim, bool unbiased, bool keepdim,
                                std::optional<int64_t> correction) {
    return as_named("std", {"var"}, [&] { return variance(a, dim, unbiased, keepdim, correction, true); });
  }, py::arg("dim") = py::none(), py::arg("unbiased") = true, py::arg("keepdim") = false,
      py::kw_only(), py::arg("correction") = py::none());
  def(m, cls, "norm", [](const Tensor& a, double p, const py::object& dim, bool keepdim) {
    const Dims dims = dims_of(dim);
    OpCall in_op;
    return norm(a, p, dims, keepdim);
  }, py::arg("p") = 2.0, py::arg("dim") = py::none(), py::arg("keepdim") = false);
  def(m, cls, "cumsum", [](const Tensor& a, int64_t dim) { return cumsum(a, dim); },
      py::arg("dim"), NoGil());
}

void bind_linalg(py::module_& m, TensorClass* cls) {
  auto matmul_ = [](const Tensor& a, const Tensor& b) { return matmul(a, b); };
  def(m, cls, "matmul", matmul_, py::arg("other"), NoGil());
  // mm of two matrices, bmm of two batches of as many matrices, as PyTorch's (no broadcasting)
  def(m, cls, "mm", [](const Tensor& a, const Tensor& b) {
    if (a.defined() && b.defined() && (a.dim() != 2 || b.dim() != 2))
      fail("mm", "expected two 2-D tensors, got shapes ", a.shape(), " and ", b.shape());
    return as_named("mm", {"matmul"}, [&] { return matmul(a, b); });
  }, py::arg("mat2"), NoGil());
  def(m, cls, "bmm", [](const Tensor& a, const Tensor& b) {
    if (a.defined() && b.defined() && (a.dim() != 3 || b.dim() != 3 || a.size(0) != b.size(0)))
      fail("bmm", "expected two 3-D tensors [B, n, m] and [B, m, p] with the same B, got shapes ", a.shape(), " and ",
           b.shape());
    return as_named("bmm", {"matmul"}, [&] { return matmul(a, b); });
  }, py::arg("mat2"), NoGil());
  def(m, cls, "outer", [](const Tensor& a, const Tensor& b) { return outer(a, b); },
      py::arg("vec2"), NoGil());
  def(m, cls, "diag", diag, py::arg("diagonal") = 0, NoGil());
  def(m, cls, "diag_embed", diag_embed, py::arg("offset") = 0, py::arg("dim1") = -2,
      py::arg("dim2") = -1, NoGil());
  def(m, cls, "trace", [](const Tensor& a) { return trace(a); }, NoGil());
  def(m, cls, "tril", tril, py::arg("diagonal") = 0, NoGil());
  def(m, cls, "triu", triu, py::arg("diagonal") = 0, NoGil());
  def(m, cls, "softmax", [](const Tensor& a, int64_t dim) { return softmax(a, dim); },
      py::arg("dim"), NoGil());
  def(m, cls, "log_softmax", [](const Tensor& a, int64_t dim) { return log_softmax(a, dim); },
      py::arg("dim"), NoGil());
}

void bind_selection(py::module_& m, TensorClass* cls) {
  def(m, cls, "masked_fill", [](const Tensor& a, const Tensor& mask, double v) { return masked_fill(a, mask, v); },
      py::arg("mask"), py::arg("value"), NoGil());
  m.def("where", [](const Tensor& c, const Tensor& a, const Tensor& b) { return where(c, a, b); },
        py::arg("condition"), py::arg("input"), py::arg("other"), NoGil());
  m.def("where", [](const Tensor& c, const Tensor& a, double b) { return where(c, a, b); },
        py::arg("condition"), py::arg("input"), py::arg("other"), NoGil());
  m.def("cat", [](const std::vector<Tensor>& ts, int64_t dim) { return cat(ts, dim); }, py::arg("tensors"),
        py::arg("dim") = 0, NoGil());
  m.def("concat", [](const std::vector<Tensor>& ts, int64_t dim) { return cat(ts, dim); }, py::arg("tensors"),
        py::arg("dim") = 0, NoGil());
  m.def("stack", [](const std::vector<Tensor>& ts, int64_t dim) { return stack(ts, dim); }, py::arg("tensors"),
        py::arg("dim") = 0, NoGil());
  // split(t, 2) in parts of 2, split(t, [1, 3]) in parts of those sizes; tuples, as PyTorch's
  def(m, cls, "split", [](const Tensor& a, const py::object& size, int64_t dim) {
    std::vector<Tensor> parts = py::isinstance<py::sequence>(size) ? split(a, size.cast<std::vector<int64_t>>(), dim)
                                                                    : split(a, size.cast<int64_t>(), dim);
    return py::tuple(py::cast(parts));
  }, py::arg("split_size_or_sections"), py::arg("dim") = 0);
  def(m, cls, "chunk", [](const Tensor& a, int64_t chunks, int64_t dim) {
    return py::tuple(py::cast(chunk(a, chunks, dim)));
  }, py::arg("chunks"), py::arg("dim") = 0);
  def(m, cls, "index_select", [](const Tensor& a, int64_t dim, const Tensor& i) { return index_select(a, dim, i); },
      py::arg("dim"), py::arg("index"), NoGil());
  def(m, cls, "gather", [](const Tensor& a, int64_t dim, const Tensor& i) { return gather(a, dim, i); },
      py::arg("dim"), py::arg("index"), NoGil());
}

}  // namespace

void bind_ops(py::module_& m, TensorClass& cls) {
  bind_elementwise(m, &cls);
  bind_reductions(m, &cls);
  bind_linalg(m, &cls);
  bind_selection(m, &cls);
}

}  // namespace ember::python
