// The Tensor class: metadata, element access, autograd state and views, named and
// behaving as torch.Tensor's; plus ember.dtype (float32, float64, int64, bool) and
// ember.Generator. Ops and operators are added by ops.cpp, indexing by indexing.cpp.
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "core/autograd.h"
#include "core/random.h"

namespace ember::python {

int64_t int64_of(py::handle v, const char* op) {
  auto index = py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()));
  if (!index) {
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw py::error_already_set();
    PyErr_Clear();
    throw py::type_error(std::string(op) + ": expected an integer, got " + std::string(py::repr(v)) + " of type " +
                         std::string(py::str(py::type::of(v).attr("__name__"))));
  }
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow) {
    const std::string what = std::string(op) + ": the integer " + std::string(py::str(v)) + " does not fit int64";
    PyErr_SetString(PyExc_OverflowError, what.c_str());
    throw py::error_already_set();
  }
  return x;
}

Shape shape_from_args(const py::args& args, const char* op) {
  py::sequence sizes = args;
  if (args.size() == 1 && !py::isinstance<py::int_>(args[0]) && py::isinstance<py::sequence>(args[0]))
    sizes = args[0];
  Shape shape;
  for (py::object s : sizes) {  // an object: it owns the item (a range makes them as it goes)
    if (!py::hasattr(s, "__index__") || py::isinstance<py::bool_>(s))
      throw py::type_error(std::string(op) + ": sizes must be integers, got " +
                           std::string(py::str(py::type::of(s).attr("__name__"))));
    shape.push_back(int64_of(s, op));
  }
  return shape;
}

namespace {

// t as dtype (t's memory when it is already, unless copy), for Tensor.to
Tensor converted(const Tensor& t, DType dtype, bool copy) {
  Tensor out = t.to(dtype);
  if (copy && out.storage() == t.storage()) out = t.clone();
  return out;
}

// A device argument as PyTorch's: None, "cpu" or "cpu:<n>", or a torch.device of either
void check_cpu(const py::object& device) {
  if (device.is_none()) return;
  const std::string kind = py::str(py::type::of(device).attr("__name__"));
  if (!py::isinstance<py::str>(device) && kind != "device")
    throw py::type_error("to: expected a dtype, a device ('cpu') or an ember tensor, got " + kind);
  const std::string name = py::str(device);
  const size_t digits = name.find_first_not_of("0123456789", 4);
  if (name != "cpu" && !(name.rfind("cpu:", 0) == 0 && name.size() > 4 && digits == std::string::npos))
    throw py::value_error("to: ember computes on the CPU; expected device 'cpu' (or 'cpu:<n>'), got '" + name + "'");
}
// A seed as PyTorch takes it: an integer (int, bool, NumPy's) in [-2^63, 2^64), a negative
// one wrapped modulo 2^64.
uint64_t seed_of(const py::object& seed, const char* op) {
  PyObject* index = PyNumber_Index(seed.ptr());
  if (!index) {
    PyErr_Clear();
    throw py::type_error(std::string(op) + ": expected an int seed, got " +
                         std::string(py::str(py::type::of(seed).attr("__name__"))));
  }
  const auto big = py::reinterpret_steal<py::int_>(index);
  if (big >= py::int_(0)) {
    const unsigned long long v = PyLong_AsUnsignedLongLong(big.ptr());
    if (PyErr_Occurred()) {
      PyErr_Clear();
      throw py::value_error(std::string(op) + ": the seed " + std::string(py::str(seed)) + " is not below 2**64");
    }
    return (uint64_t)v;
  }
  const long long v = PyLong_AsLongLong(big.ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    throw py::value_error(std::string(op) + ": the seed " + std::string(py::str(seed)) + " is below -2**63");
  }
  return (uint64_t)v;  // two's complement: -1 is 2**64 - 1, as in PyTorch
}
}  // namespace

void bind_dtypes(py::module_& m) {
  py::class_<DType>(m, "dtype")
      .def("__repr__", [](DType d) { return std::string("ember.") + dtype_name(d); })
      .def("__eq__", [](DType a, const py::object& b) { return py::isinstance<DType>(b) && a == b.cast<DType>(); })
      .def("__hash__", [](DType d) { return (int)d; })
      .def_property_readonly("is_floating_point", [](DType d) { return is_floating(d); })
      .def_property_readonly("itemsize", [](DType d) { return dtype_size(d); });
  for (DType d : {kFloat32, kFloat64, kInt64, kBool, kBFloat16}) m.attr(dtype_name(d)) = d;
  m.attr("float") = kFloat32;  // torch.float and torch.double, torch.long
  m.attr("double") = kFloat64;
  m.attr("long") = kInt64;

  // Generator(seed) or, as torch.Generator(), seeded later with manual_seed(seed)
  py::class_<Generator>(m, "Generator")
      .def(py::init([](const py::object& seed) { return Generator(seed_of(seed, "Generator")); }), py::arg("seed") = 0)
      .def("manual_seed", [](Generator& g, const py::object& seed) -> Generator& {
             g.manual_seed(seed_of(seed, "Generator.manual_seed"));
             return g;
           }, py::arg("seed"), py::return_value_policy::reference_internal)
      .def("initial_seed", &Generator::seed)
      .def("get_state", &Generator::get_state)
      .def("set_state", &Generator::set_state, py::arg("state"));
  m.def("manual_seed", [](const py::object& seed) -> Generator& {
          manual_seed(seed_of(seed, "manual_seed"));
          return default_generator();
        },
        py::arg("seed"), py::return_value_policy::reference);
  m.def("default_generator", &default_generator, py::return_value_policy::reference);
}

namespace {

// The Python value of element `at` of a contiguous tensor: int for int64, bool, float (for
// bfloat16 too, exactly).
py::object element(const Tensor& t, int64_t at) {
  switch (t.dtype()) {
    case DType::Float32: return py::float_(t.data<float>()[at]);
    case DType::Float64: return py::float_(t.data<double>()[at]);
    case DType::Int64: return py::int_(t.data<int64_t>()[at]);
    case DType::Bool: return py::bool_(t.data<uint8_t>()[at] != 0);
    case DType::BFloat16: return py::float_((float)t.data<BFloat16>()[at]);
  }
  return py::none();
}

// Nested lists of a contiguous tensor's elements from `at` on, dims from `d` on.
constexpr int64_t kMaxListDepth = 1000;  // tolist's deepest nesting
py::object nested(const Tensor& t, size_t d, int64_t& at) {
  if (d == t.shape().size()) return element(t, at++);
  py::list out;
  for (int64_t i = 0; i < t.shape()[d]; i++) out.append(nested(t, d + 1, at));
  return out;
}

py::object item(const Tensor& t) {
  if (t.numel() != 1)
    throw py::value_error("item: a Tensor with " + std::to_string(t.numel()) +
                          " elements cannot be converted to a Python number");
  return element(t.contiguous(), 0);
}

}  // namespace

TensorClass bind_tensor(py::module_& m) {
  // torch.set_printoptions: the options given change, the others stay
  m.def("set_printoptions", [](std::optional<int> precision, std::optional<int64_t> threshold,
                               std::optional<int64_t> edgeitems, std::optional<bool> sci_mode) {
    PrintOptions o = get_printoptions();
    if (precision) o.precision = *precision;
    if (threshold) o.threshold = *threshold;
    if (edgeitems) o.edgeitems = *edgeitems;
    if (sci_mode) o.sci_mode = sci_mode;
    set_printoptions(o);
  }, py::arg("precision") = py::none(), py::arg("threshold") = py::none(), py::arg("edgeitems") = py::none(),
     py::arg("sci_mode") = py::none());

  // the node that produced a tensor (its grad_fn), named by its op
  py::class_<Node, std::shared_ptr<Node>>(m, "Node")
      .def("name", [](const Node& n) { return std::string(n.name); })
      .def("__repr__", [](const Node& n) { return "<grad_fn " + std::string(n.name) + ">"; });

  TensorClass cls(m, "Tensor");
  // Tensor(t): another handle to t's tensor, so that a Python subclass (nn.Parameter) can
  // be built around one
  cls.def(py::init([](const Tensor& t) { return t; }), py::arg("data"));
  // metadata
  cls.def_property_readonly("shape", [](const Tensor& t) { return py::tuple(py::cast(t.shape())); })
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("ndim", &Tensor::dim)
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("size", [](const Tensor& t, std::optional<int64_t> d) -> py::object {
        if (d) return py::int_(t.size(*d));
        return py::tuple(py::cast(t.shape()));
      }, py::arg("dim") = py::none())
      .def("stride", [](const Tensor& t, std::optional<int64_t> d) -> py::object {
        if (d) return py::int_(t.stride(*d));
        return py::tuple(py::cast(t.strides()));
      }, py::arg("dim") = py::none())
      .def("storage_offset", &Tensor::offset)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("is_floating_point", [](const Tensor& t) { return is_floating(t.dtype()); })
      .def("element_size", [](const Tensor& t) { return dtype_size(t.dtype()); })
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()); })
      .def("__len__", [](const Tensor& t) {
        if (t.dim() == 0) throw py::type_error("len() of a 0-d tensor");
        return t.size(0);
      })
      .def("__hash__", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.impl()); })
      .def("__repr__", &Tensor::to_string)
      .def("__str__", &Tensor::to_string);

  // values
  cls.def("item", &item)
      .def("tolist", [](const Tensor& t) {
        int64_t at = 0;
        // (lists nested as deep as Python's own recursion limit allows, and the C++ stack)
        if (t.dim() > kMaxListDepth)
          throw py::value_error("tolist: a tensor of " + std::to_string(t.dim()) + " dims would nest lists " +
                                std::to_string(t.dim()) + " deep; expected at most " + std::to_string(kMaxListDepth));
        return nested(t.contiguous(), 0, at);
      })
      // f"{t:.3f}": a 0-d tensor formats as its value, as PyTorch's does; others as str(t)
      // with no format spec, else refused as object.__format__ refuses
      .def("__format__", [](const py::object& self, const py::str& spec) -> py::object {
        const Tensor& t = self.cast<const Tensor&>();
        if (t.dim() == 0) return py::module_::import("builtins").attr("format")(item(t), spec);
        return py::module_::import("builtins").attr("object").attr("__format__")(self, spec);
      })
      .def("__float__", [](const Tensor& t) { return item(t).cast<double>(); })
      .def("__int__", [](const Tensor& t) { return py::int_(item(t)); })
      .def("__index__", [](const Tensor& t) {
        if (t.dtype() != kInt64 && t.dtype() != kBool)
          throw py::type_error("only integer tensors of a single element can be converted to an index");
        return py::int_(item(t));
      })
      .def("__bool__", [](const Tensor& t) {
        if (t.numel() != 1)
          throw py::value_error("Boolean value of Tensor with more than one value is ambiguous");
        return item(t).cast<bool>();
      });

  // autograd state (backward, hooks and retain_grad are in autograd.cpp)
  cls.def_property("requires_grad", &Tensor::requires_grad, [](Tensor& t, bool on) { t.requires_grad_(on); })
      .def("requires_grad_", [](py::object self, bool on) {
        self.cast<Tensor&>().requires_grad_(on);
        return self;
      }, py::arg("requires_grad") = true)
      .def_property("grad", [](const Tensor& t) { return tensor_or_none(t.grad()); },
                    [](Tensor& t, std::optional<Tensor> g) { t.set_grad(g ? *g : Tensor()); })
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      .def_property_readonly("grad_fn", [](const Tensor& t) -> py::object {
        if (!t.grad_fn()) return py::none();
        return py::cast(t.grad_fn());
      })
      .def("detach", &Tensor::detach);

  // copies and conversions
  cls.def("clone", &Tensor::clone)
      .def("contiguous", &Tensor::contiguous)
      // as PyTorch's: to(dtype), to(other) (other's dtype), to(device), to(device, dtype); the
      // one device is "cpu"; with copy, never the same memory; non_blocking has no effect
      .def("to", [](const Tensor& t, DType dtype, bool, bool copy) { return converted(t, dtype, copy); },
           py::arg("dtype"), py::arg("non_blocking") = false, py::arg("copy") = false)
      .def("to", [](const Tensor& t, const Tensor& other, bool, bool copy) {
        return converted(t, other.dtype(), copy);
      }, py::arg("other"), py::arg("non_blocking") = false, py::arg("copy") = false)
      .def("to", [](const Tensor& t, const py::object& device, std::optional<DType> dtype, bool, bool copy) {
        check_cpu(device);
        return converted(t, dtype.value_or(t.dtype()), copy);
      }, py::arg("device") = py::none(), py::arg("dtype") = py::none(), py::arg("non_blocking") = false,
         py::arg("copy") = false)
      .def("float", [](const Tensor& t) { return t.to(kFloat32); })
      .def("double", [](const Tensor& t) { return t.to(kFloat64); })
      .def("long", [](const Tensor& t) { return t.to(kInt64); })
      .def("bool", [](const Tensor& t) { return t.to(kBool); })
      .def("bfloat16", [](const Tensor& t) { return t.to(kBFloat16); })
      .def("fill_", [](py::object self, double v) { self.cast<Tensor&>().fill_(v); return self; }, py::arg("value"))
      .def("zero_", [](py::object self) { self.cast<Tensor&>().zero_(); return self; })
      .def("copy_", [](py::object self, const Tensor& src) { self.cast<Tensor&>().copy_(src); return self; },
           py::arg("src"));

  // views
  cls.def("view", [](const Tensor& t, py::args shape) { return t.view(shape_from_args(shape, "view")); })
      .def("reshape", [](const Tensor& t, py::args shape) { return t.reshape(shape_from_args(shape, "reshape")); })
      .def("expand", [](const Tensor& t, py::args shape) { return t.expand(shape_from_args(shape, "expand")); })
      .def("permute", [](const Tensor& t, py::args dims) { return t.permute(shape_from_args(dims, "permute")); })
      .def("view_as", [](const Tensor& t, const Tensor& o) { return t.view(o.shape()); }, py::arg("other"))
      .def("reshape_as", [](const Tensor& t, const Tensor& o) { return t.reshape(o.shape()); }, py::arg("other"))
      .def("expand_as", &Tensor::expand_as, py::arg("other"))
      .def("flatten", &Tensor::flatten, py::arg("start_dim") = 0, py::arg("end_dim") = -1)
      .def("transpose", &Tensor::transpose, py::arg("dim0"), py::arg("dim1"))
      .def("t", &Tensor::t)
      .def_property_readonly("T", [](const Tensor& t) {  // all dims reversed, as torch's
        std::vector<int64_t> dims;
        for (int64_t d = t.dim() - 1; d >= 0; d--) dims.push_back(d);
        return t.permute(dims);
      })
      .def_property_readonly("mT", &Tensor::mT)
      .def("narrow", &Tensor::narrow, py::arg("dim"), py::arg("start"), py::arg("length"))
      .def("select", &Tensor::select, py::arg("dim"), py::arg("index"))
      .def("diagonal", &Tensor::diagonal, py::arg("offset") = 0, py::arg("dim1") = 0, py::arg("dim2") = 1)
      .def("unsqueeze", &Tensor::unsqueeze, py::arg("dim"))
      .def("squeeze", [](const Tensor& t, std::optional<int64_t> d) { return d ? t.squeeze(*d) : t.squeeze(); },
           py::arg("dim") = py::none());
  return cls;
}

}  // namespace ember::python
