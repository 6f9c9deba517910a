// New tensors, as torch's factories: tensor() from nested lists with PyTorch's dtype
// inference, and zeros, ones, empty, full, arange, eye, rand, randn, randint. Sizes are
// given as PyTorch takes them (zeros(2, 3) or zeros((2, 3))); requires_grad= is set on
// the result.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cmath>
#include <string>
#include <vector>

#include "bindings.h"
#include "core/ops.h"
#include "core/random.h"

namespace ember::python {

// A tensor over the array's memory (numpy.cpp); for_copy: the caller copies it at once (no
// copy of a read-only array first)
Tensor tensor_from_numpy(const py::array& a, bool for_copy);

namespace {

// The numbers of nested sequences, row-major, and the sizes of their levels.
struct Literal {
  std::vector<py::object> values;  // owned: a sequence's items may be made as it is read
  Shape shape;
  bool any_float = false, any_int = false;

  void add(const py::object& v, size_t level) {
    if (level > 64) throw py::value_error("tensor: the data is nested more than 64 deep");
    if (py::isinstance<Tensor>(v)) {  // a tensor among the data: its values (a 0-dim one is a number)
      const Tensor& t = v.cast<const Tensor&>();
      if (t.dim() > 0) return add(v.attr("tolist")(), level);
      return add(v.attr("item")(), level);
    }
    const bool is_sequence = py::isinstance<py::sequence>(v) && !py::isinstance<py::str>(v) &&
                             !py::isinstance<py::bytes>(v);
    if (is_sequence) {
      py::sequence s = py::reinterpret_borrow<py::sequence>(v);
      const auto n = (int64_t)s.size();
      if (level == shape.size()) {
        if (!values.empty())
          throw py::value_error("tensor: expected a number at dim " + std::to_string(level) + ", got a sequence");
        shape.push_back(n);
      } else if (level > shape.size() || shape[level] != n) {
        throw py::value_error("tensor: expected sequence of length " +
                              std::to_string(level < shape.size() ? shape[level] : 0) + " at dim " +
                              std::to_string(level) + " (got " + std::to_string(n) + ")");
      }
      for (py::object e : s) add(e, level + 1);  // an object: it owns the item while add reads it
      return;
    }
    // another library's array or number (a PyTorch tensor, NumPy's bool_ or int64): its
    // values as Python's own, nested as its shape - a bool stays a bool, a float a float
    if (!py::isinstance<py::bool_>(v) && !py::isinstance<py::int_>(v) && !py::isinstance<py::float_>(v) &&
        py::hasattr(v, "tolist") && py::hasattr(v, "dtype")) {
      py::object values = v.attr("tolist")();
      if (py::hasattr(values, "tolist") && py::hasattr(values, "dtype"))  // (it would never end)
        throw py::type_error("tensor: tolist() of an object of type " + type_name(v) + " returned another " +
                             type_name(values));
      return add(values, level);
    }
    if (level != shape.size())
      throw py::value_error("tensor: expected a sequence at dim " + std::to_string(level) + ", got a number");
    if (PyComplex_Check(v.ptr()))
      throw py::type_error("tensor: expected real numbers, got the complex " + std::string(py::repr(v)));
    if (py::isinstance<py::bool_>(v)) {
    } else if (py::isinstance<py::float_>(v)) {
      any_float = true;
    } else if (PyObject* index = PyNumber_Index(v.ptr())) {  // an integer, as operator.index takes it
      any_int = true;
      values.push_back(py::reinterpret_steal<py::object>(index));
      return;
    } else if (!PyErr_ExceptionMatches(PyExc_TypeError)) {  // (not "no integer": an error of its own)
      throw py::error_already_set();
    } else if (PyErr_Clear(), py::hasattr(v, "__float__")) {
      any_float = true;
    } else {
      throw py::type_error("tensor: could not convert an object of type " + type_name(v) + " to a number");
    }
    values.push_back(v);  // a new reference
  }

  static std::string type_name(const py::handle& v) { return py::str(py::type::of(v).attr("__name__")); }

  // PyTorch's default for these literals: float32 for reals, int64 for integers, bool.
  DType inferred() const {
    if (any_float || values.empty()) return kFloat32;
    return any_int ? kInt64 : kBool;
  }

  Tensor make(DType dtype) const {
    if (dtype == kBool) {
      std::vector<bool> bits;
      for (const py::object& v : values) bits.push_back(py::cast<bool>(py::bool_(v)));
      return from_bools(bits, shape);
    }
    if (dtype == kInt64 && !any_float) {
      std::vector<int64_t> ints;
      for (const py::object& v : values) {
        int overflow = 0;
        const py::int_ i(v);
        const long long x = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
        if (overflow) throw py::value_error("tensor: an integer does not fit int64");
        ints.push_back(x);
      }
      return from_vector(ints, shape);
    }
    std::vector<double> reals;
    for (const py::object& v : values) {
      try {
        reals.push_back(py::cast<double>(py::float_(v)));
      } catch (py::error_already_set& e) {  // (a tensor of several elements, say)
        throw py::type_error("tensor: could not convert an object of type " + type_name(v) +
                             " to a number: " + e.what());
      }
    }
    return from_vector(reals, shape, dtype);
  }
};

Tensor with_grad(Tensor t, bool requires_grad) {
  if (requires_grad) t.requires_grad_();
  return t;
}

// torch.tensor(data): a copy of nested sequences of numbers, of an array, or of a tensor.
Tensor tensor(const py::object& data, std::optional<DType> dtype, bool requires_grad) {
  Tensor t;
  if (py::isinstance<Tensor>(data)) {
    t = data.cast<const Tensor&>().detach().clone();
  } else if (py::isinstance<py::array>(data)) {
    t = tensor_from_numpy(data.cast<py::array>(), true).clone();
  } else if (py::hasattr(data, "__dlpack__") && py::hasattr(data, "dtype")) {
    // another library's tensor (PyTorch's): its shape and dtype through DLPack, copied; one
    // DLPack cannot carry (bool, int32, one that requires grad) by its values, below
    try {
      t = py::module_::import("ember._C").attr("from_dlpack")(data).cast<const Tensor&>().clone();
    } catch (py::error_already_set&) {
    }
  }
  if (!t.defined()) {
    Literal lit;
    lit.add(data, 0);
    t = lit.make(dtype.value_or(lit.inferred()));
  }
  if (dtype) t = t.to(*dtype);
  return with_grad(t, requires_grad);
}

// full's dtype from its value when none is given, as PyTorch: bool, int64, or float32.
DType dtype_of_value(const py::object& v) {
  if (py::isinstance<py::bool_>(v)) return kBool;
  if (py::isinstance<py::int_>(v)) return kInt64;
  return kFloat32;
}

}  // namespace

void bind_creation(py::module_& m) {
  m.def("tensor", &tensor, py::arg("data"), py::kw_only(), py::arg("dtype") = py::none(),
        py::arg("requires_grad") = false);
  auto sized = [&m](const char* name, Tensor (*make)(const Shape&, DType)) {
    m.def(name, [make, name](py::args size, std::optional<DType> dtype, bool requires_grad) {
      return with_grad(make(shape_from_args(size, name), dtype.value_or(kFloat32)), requires_grad);
    }, py::kw_only(), py::arg("dtype") = py::none(), py::arg("requires_grad") = false);
  };
  sized("zeros", &zeros);
  sized("ones", &ones);
  sized("empty", &empty);
  m.def("full", [](const py::object& size, const py::object& value, std::optional<DType> dtype, bool requires_grad) {
    py::args args = py::make_tuple(size);
    if (!py::isinstance<py::int_>(value) && !py::isinstance<py::float_>(value))  // bool is an int
      throw py::type_error("full: fill_value must be a number (bool, int or float), got " +
                           std::string(py::str(py::type::of(value).attr("__name__"))));
    const DType d = dtype.value_or(dtype_of_value(value));
    return with_grad(full(shape_from_args(args, "full"), value.cast<double>(), d), requires_grad);
  }, py::arg("size"), py::arg("fill_value"), py::kw_only(), py::arg("dtype") = py::none(),
     py::arg("requires_grad") = false);
  m.def("zeros_like", [](const Tensor& t, std::optional<DType> dtype, bool requires_grad) {
    return with_grad(zeros(t.shape(), dtype.value_or(t.dtype())), requires_grad);
  }, py::arg("input"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("requires_grad") = false);
  m.def("ones_like", [](const Tensor& t, std::optional<DType> dtype, bool requires_grad) {
    return with_grad(ones(t.shape(), dtype.value_or(t.dtype())), requires_grad);
  }, py::arg("input"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("requires_grad") = false);
  m.def("full_like", [](const Tensor& t, double value, std::optional<DType> dtype, bool requires_grad) {
    return with_grad(full(t.shape(), value, dtype.value_or(t.dtype())), requires_grad);
  }, py::arg("input"), py::arg("fill_value"), py::kw_only(), py::arg("dtype") = py::none(),
     py::arg("requires_grad") = false);

  // arange(end), arange(start, end, step=1): int64 when every bound is a Python int, as
  // PyTorch decides from the arguments' types
  m.def("arange", [](const py::object& start, const py::object& end, const py::object& step,
                     std::optional<DType> dtype, bool requires_grad) {
    py::object lo = start, hi = end;
    if (hi.is_none()) hi = lo, lo = py::int_(0);
    auto whole = [](const py::object& v) { return py::isinstance<py::int_>(v); };
    const DType d = dtype.value_or(whole(lo) && whole(hi) && whole(step) ? kInt64 : kFloat32);
    return with_grad(arange(lo.cast<double>(), hi.cast<double>(), step.cast<double>(), d), requires_grad);
  }, py::arg("start"), py::arg("end") = py::none(), py::arg("step") = 1, py::kw_only(),
     py::arg("dtype") = py::none(), py::arg("requires_grad") = false);
  m.def("eye", [](int64_t n, std::optional<int64_t> cols, std::optional<DType> dtype, bool requires_grad) {
    return with_grad(eye(n, cols.value_or(-1), dtype.value_or(kFloat32)), requires_grad);
  }, py::arg("n"), py::arg("m") = py::none(), py::kw_only(), py::arg("dtype") = py::none(),
     py::arg("requires_grad") = false);

  auto random = [&m](const char* name, Tensor (*make)(const Shape&, DType, Generator*)) {
    m.def(name, [make, name](py::args size, Generator* gen, std::optional<DType> dtype, bool requires_grad) {
      return with_grad(make(shape_from_args(size, name), dtype.value_or(kFloat32), gen), requires_grad);
    }, py::kw_only(), py::arg("generator") = py::none(), py::arg("dtype") = py::none(),
       py::arg("requires_grad") = false);
  };
  random("randn", &randn);
  random("rand", &rand);
  // rand_like, randn_like, empty_like: input's shape and (unless given) dtype
  auto random_like = [&m](const char* name, Tensor (*make)(const Shape&, DType, Generator*)) {
    m.def(name, [make](const Tensor& t, Generator* gen, std::optional<DType> dtype, bool requires_grad) {
      return with_grad(make(t.shape(), dtype.value_or(t.dtype()), gen), requires_grad);
    }, py::arg("input"), py::kw_only(), py::arg("generator") = py::none(), py::arg("dtype") = py::none(),
       py::arg("requires_grad") = false);
  };
  random_like("randn_like", &randn);
  random_like("rand_like", &rand);
  m.def("empty_like", [](const Tensor& t, std::optional<DType> dtype, bool requires_grad) {
    return with_grad(empty(t.shape(), dtype.value_or(t.dtype())), requires_grad);
  }, py::arg("input"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("requires_grad") = false);
  // randint(high, size) or randint(low, high, size), as torch.randint
  m.def("randint", [](py::args args, const py::object& generator, std::optional<DType> dtype, bool requires_grad) {
    // (a Generator* argument after *args refuses an omitted generator in pybind11 2.10)
    if (!generator.is_none() && !py::isinstance<Generator>(generator))
      throw py::type_error("randint: generator must be an ember.Generator or None, got " +
                           std::string(py::str(py::type::of(generator).attr("__name__"))));
    Generator* gen = generator.is_none() ? nullptr : generator.cast<Generator*>();
    if (args.size() != 2 && args.size() != 3)
      throw py::type_error("randint: expected (high, size) or (low, high, size)");
    const int64_t low = args.size() == 3 ? int64_of(args[0], "randint") : 0;
    const int64_t high = int64_of(args[args.size() - 2], "randint");
    py::args size = py::make_tuple(args[args.size() - 1]);
    // int64 draws, converted when dtype says otherwise (as torch.randint's dtype=): to a float
    // dtype that holds every whole number of [low, high) exactly, so none rounds to high
    const Tensor t = randint(low, high, shape_from_args(size, "randint"), gen);
    if (!dtype || *dtype == kInt64) return with_grad(t, requires_grad);
    if (!is_floating(*dtype))
      throw py::type_error(std::string("randint: expected dtype int64 or a float dtype, got ") + dtype_name(*dtype));
    const int digits = *dtype == kFloat64 ? 53 : *dtype == kFloat32 ? 24 : 8;  // bits of precision
    const double exact = std::ldexp(1.0, digits);
    if (double(low) < -exact || double(high) > exact)
      throw py::value_error("randint: " + std::string(dtype_name(*dtype)) + " holds the whole numbers exactly only in [-2^" +
                            std::to_string(digits) + ", 2^" + std::to_string(digits) + "]; got [" + std::to_string(low) +
                            ", " + std::to_string(high) + ")");
    return with_grad(t.to(*dtype), requires_grad);
  }, py::kw_only(), py::arg("generator") = py::none(), py::arg("dtype") = py::none(),
     py::arg("requires_grad") = false);
}

}  // namespace ember::python
