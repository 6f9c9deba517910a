// NumPy arrays and tensors sharing memory, both ways, as torch's numpy() and from_numpy:
// t.numpy() is an array over the tensor's storage, which the array keeps alive; and
// from_numpy(a) a tensor over the array's memory, which the tensor's storage keeps
// alive (core/storage.h: a Storage over memory ember did not allocate). A write through
// either is seen by the other.
#include <pybind11/numpy.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"

namespace ember::python {

namespace {

py::dtype numpy_dtype(DType d) {
  switch (d) {
    case DType::Float32: return py::dtype::of<float>();
    case DType::Float64: return py::dtype::of<double>();
    case DType::Int64: return py::dtype::of<int64_t>();
    case DType::Bool: return py::dtype("bool");
    case DType::BFloat16: break;  // refused by to_numpy
  }
  return py::dtype::of<float>();
}

// The ember dtype of a native-byte-order array of float32, float64, int64 or bool.
DType ember_dtype(const py::array& a) {
  const py::dtype d = a.dtype();
  if (d.byteorder() == '>')
    throw py::type_error("from_numpy: the array's bytes are big-endian (non-native byte order); "
                         "convert it with a.astype(a.dtype.newbyteorder('='))");
  const char kind = d.kind();
  const auto size = d.itemsize();
  if (kind == 'f' && size == 4) return kFloat32;
  if (kind == 'f' && size == 8) return kFloat64;
  if (kind == 'i' && size == 8) return kInt64;
  if (kind == 'b' && size == 1) return kBool;
  const std::string name = py::str(d.attr("name"));
  throw py::type_error("from_numpy: can't convert a numpy array of dtype " + name +
                       "; the supported types are float32, float64, int64 and bool");
}

}  // namespace

Tensor tensor_from_numpy(const py::array& a, bool for_copy) {
  const DType dtype = ember_dtype(a);
  const auto itemsize = (int64_t)dtype_size(dtype);
  Shape shape, strides;
  int64_t extent = itemsize;  // bytes from the first element to past the last
  bool empty = false;
  for (py::ssize_t d = 0; d < a.ndim(); d++) {
    const int64_t size = a.shape(d), stride = a.strides(d);
    if (stride < 0)
      throw py::value_error("from_numpy: at least one stride in the given numpy array is negative, and tensors "
                            "with negative strides are not currently supported. (You can probably work around "
                            "this by making a copy of your array with array.copy().)");
    if (stride % itemsize)
      throw py::value_error("from_numpy: the array's strides are not multiples of its element size");
    shape.push_back(size);
    strides.push_back(stride / itemsize);
    if (size == 0) empty = true;
    else extent += (size - 1) * stride;
  }
  if (!a.writeable() && !for_copy) {
    // PyTorch shares it and calls writing undefined; memory mapped read-only would then
    // crash the process at the first write, so ember copies it
    if (PyErr_WarnEx(PyExc_UserWarning,
                     "from_numpy: the given NumPy array is not writable; the tensor is a copy of it", 1) < 0)
      throw py::error_already_set();
    return tensor_from_numpy(a.attr("copy")().cast<py::array>(), false);
  }
  if (reinterpret_cast<uintptr_t>(a.data()) % itemsize)
    throw py::value_error("from_numpy: the array's data is not aligned to its element size");
  auto impl = std::make_shared<TensorImpl>();
  // the storage holds a reference to the array, whatever thread drops it
  impl->storage = std::make_shared<Storage>(const_cast<void*>(a.data()), empty ? 0 : (size_t)extent,
                                            hold(py::reinterpret_borrow<py::object>(a)));
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = dtype;
  return Tensor(impl);
}

// t.numpy(): an array over the tensor's memory, its base a capsule holding the storage.
py::array to_numpy(const Tensor& t) {
  if (t.requires_grad())
    throw std::runtime_error("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.");
  if (t.dtype() == kBFloat16)
    throw py::type_error("numpy: NumPy has no bfloat16; convert the tensor with .float() (or .to(ember.float32)) "
                         "first, which is exact");
  const auto itemsize = (py::ssize_t)dtype_size(t.dtype());
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
  for (int64_t s : t.strides()) strides.push_back(s * itemsize);
  // the array's base: a capsule holding the storage, released when the array goes
  auto* keep = new std::shared_ptr<Storage>(t.storage());
  py::capsule base(keep, [](void* p) { delete static_cast<std::shared_ptr<Storage>*>(p); });
  return py::array(numpy_dtype(t.dtype()), shape, strides, t.raw_data(), base);
}

void bind_numpy(py::module_& m, TensorClass& cls) {
  m.def("from_numpy", [](const py::array& a) { return tensor_from_numpy(a, false); }, py::arg("ndarray"));
  cls.def("numpy", &to_numpy);
  // np.asarray(t) and NumPy ufuncs on tensors: the same array as numpy(), converted
  // (a copy) only when another dtype is asked for
  cls.def("__array__", [](const Tensor& t, const py::object& dtype) {
    py::array a = to_numpy(t);
    return dtype.is_none() ? py::object(a) : a.attr("astype")(dtype);
  }, py::arg("dtype") = py::none());
}

}  // namespace ember::python
