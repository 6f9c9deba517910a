// The DLPack protocol (DLPack 0.6, Debian's libdlpack-dev), as PyTorch's: t.__dlpack__()
// hands another library a capsule describing the tensor's memory, which keeps ember's
// storage alive until the consumer calls its deleter; ember.from_dlpack(x) takes one
// (from anything with __dlpack__, or a capsule) and gives a tensor over that memory, the
// producer's deleter called when ember's storage goes. No copy either way: a write on one
// side is seen on the other.
#include <dlpack/dlpack.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"

namespace ember::python {

namespace {

constexpr const char* kCapsuleName = "dltensor";  // the protocol's names for a capsule
constexpr const char* kUsedCapsuleName = "used_dltensor";  // ... and for one consumed
constexpr uint8_t kDLBoolCode = 6;  // DLPack 0.8's kDLBool, which 0.6's header lacks

// What an exported capsule owns: the description and ember's storage.
struct Export {
  DLManagedTensor managed{};
  std::vector<int64_t> shape, strides;
  std::shared_ptr<Storage> storage;
};

DLDataType dl_dtype(DType d) {
  switch (d) {
    case DType::Float32: return {kDLFloat, 32, 1};
    case DType::Float64: return {kDLFloat, 64, 1};
    case DType::Int64: return {kDLInt, 64, 1};
    case DType::BFloat16: return {kDLBfloat, 16, 1};
    case DType::Bool: break;
  }
  // as PyTorch 1.13: DLPack 0.6 has no bool
  throw py::type_error("__dlpack__: Bool type is not supported by DLPack; convert with .to(ember.int64)");
}

// A DLPack type as NumPy names it: "int32", "uint8", "float16", "bfloat16", "complex64".
std::string describe(DLDataType t) {
  const char* kinds[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  std::string name = t.code < 7 ? kinds[t.code] : "type code " + std::to_string(t.code) + " of ";
  name += std::to_string(t.bits);
  if (t.lanes != 1) name += " x " + std::to_string(t.lanes) + " lanes";
  return name;
}

DType ember_dtype(DLDataType t) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return kFloat32;
    if (t.code == kDLFloat && t.bits == 64) return kFloat64;
    if (t.code == kDLInt && t.bits == 64) return kInt64;
    if (t.code == kDLBoolCode && t.bits == 8) return kBool;
    if (t.code == kDLBfloat && t.bits == 16) return kBFloat16;
  }
  throw py::type_error("from_dlpack: can't take a DLPack tensor of " + describe(t) +
                       "; the supported types are float32, float64, int64, bool and bfloat16");
}

// A capsule nobody consumed frees its export (a consumed one was renamed, and its consumer
// calls the deleter).
void capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kCapsuleName)) return;
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (managed && managed->deleter) managed->deleter(managed);
}

py::capsule to_dlpack(const Tensor& t, const py::object& stream) {
  if (t.requires_grad())
    throw std::runtime_error("__dlpack__: can't export a tensor that requires grad; use tensor.detach()");
  if (!stream.is_none() && !(py::isinstance<py::int_>(stream) && stream.cast<int64_t>() == -1))
    throw py::value_error("__dlpack__: ember's tensors are on the CPU, which has no stream; stream must be None");
  auto* e = new Export;
  e->managed.dl_tensor.dtype = dl_dtype(t.dtype());  // before anything else can throw
  e->shape.assign(t.shape().begin(), t.shape().end());
  e->strides.assign(t.strides().begin(), t.strides().end());
  e->storage = t.storage();
  DLTensor& d = e->managed.dl_tensor;
  d.data = t.numel() ? const_cast<void*>(t.raw_data()) : nullptr;
  d.device = {kDLCPU, 0};
  d.ndim = (int32_t)t.dim();
  d.shape = e->shape.data();
  d.strides = e->strides.data();
  d.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = [](DLManagedTensor* m) { delete static_cast<Export*>(m->manager_ctx); };
  PyObject* capsule = PyCapsule_New(&e->managed, kCapsuleName, capsule_destructor);
  if (!capsule) {
    delete e;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(capsule);
}

Tensor from_dlpack(const py::object& obj) {
  py::object capsule = obj;
  if (py::hasattr(obj, "__dlpack__")) {
    if (py::hasattr(obj, "__dlpack_device__")) {
      auto device = obj.attr("__dlpack_device__")().cast<std::pair<int, int>>();
      if (device.first != kDLCPU)
        throw py::value_error("from_dlpack: the tensor is on DLPack device type " + std::to_string(device.first) +
                              "; ember takes CPU memory only (device type 1)");
    }
    capsule = obj.attr("__dlpack__")();
  }
  if (!PyCapsule_CheckExact(capsule.ptr()))
    throw py::type_error("from_dlpack: expected an object with __dlpack__ or a DLPack capsule, got " +
                         std::string(py::str(py::type::of(obj).attr("__name__"))));
  if (!PyCapsule_IsValid(capsule.ptr(), kCapsuleName))
    throw py::value_error("from_dlpack: the DLPack capsule was already consumed (each capsule can be taken once)");
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsuleName));
  // From here the tensor is ember's to free: the producer's deleter runs, with the GIL
  // (it may release a Python object), when the storage goes - or now, if this fails.
  PyCapsule_SetName(capsule.ptr(), kUsedCapsuleName);
  PyCapsule_SetDestructor(capsule.ptr(), nullptr);
  std::shared_ptr<void> owner(managed, [](void* p) {
    auto* m = static_cast<DLManagedTensor*>(p);
    if (!m->deleter) return;
    if (!Py_IsInitialized()) return;  // at exit the producer is gone with the interpreter
    py::gil_scoped_acquire gil;
    m->deleter(m);
  });
  const DLTensor& d = managed->dl_tensor;
  if (d.device.device_type != kDLCPU && d.device.device_type != kDLCUDAHost)
    throw py::value_error("from_dlpack: the tensor is on DLPack device type " +
                          std::to_string(d.device.device_type) + "; ember takes CPU memory only (device type 1)");
  const DType dtype = ember_dtype(d.dtype);
  const auto itemsize = (int64_t)dtype_size(dtype);
  if (d.ndim < 0 || (d.ndim > 0 && !d.shape))
    throw py::value_error("from_dlpack: the DLPack tensor's ndim is " + std::to_string(d.ndim) +
                          " and its shape is missing");
  Shape shape(d.shape, d.shape + d.ndim), strides(d.ndim);
  int64_t extent = itemsize;  // bytes from the first element to past the last
  bool empty = false;
  bool overflow = false;  // (sizes and strides are the producer's: their products are checked)
  int64_t contiguous = 1;
  for (int i = d.ndim - 1; i >= 0; i--) {
    if (shape[i] < 0) throw py::value_error("from_dlpack: the DLPack tensor has a negative size");
    strides[i] = d.strides ? d.strides[i] : contiguous;
    if (strides[i] < 0)
      throw py::value_error("from_dlpack: the DLPack tensor has a negative stride, which ember's tensors cannot "
                            "have; make a copy on the other side first");
    overflow |= __builtin_mul_overflow(contiguous, shape[i], &contiguous);
    if (shape[i] == 0) {
      empty = true;
    } else {
      int64_t span = 0;
      overflow |= __builtin_mul_overflow(shape[i] - 1, strides[i], &span) ||
                   __builtin_mul_overflow(span, itemsize, &span) || __builtin_add_overflow(extent, span, &extent);
    }
  }
  if (overflow && !empty)
    throw py::value_error("from_dlpack: the DLPack tensor's sizes and strides span more than 2^63 bytes");
  checked_numel(shape, "from_dlpack");  // (as any new tensor: its sizes' product, zeros aside, at most 2^56)
  char* data = static_cast<char*>(d.data) + d.byte_offset;
  if (!empty && !data) throw py::value_error("from_dlpack: the DLPack tensor's data pointer is null");
  if (reinterpret_cast<uintptr_t>(data) % itemsize)
    throw py::value_error("from_dlpack: the DLPack tensor's data is not aligned to its element size");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(empty ? nullptr : data, empty ? 0 : (size_t)extent, std::move(owner));
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = dtype;
  return Tensor(impl);
}

}  // namespace

void bind_dlpack(py::module_& m, TensorClass& cls) {
  cls.def("__dlpack__", &to_dlpack, py::arg("stream") = py::none());
  cls.def("__dlpack_device__", [](const Tensor&) { return py::make_tuple((int)kDLCPU, 0); });
  m.def("from_dlpack", &from_dlpack, py::arg("ext_tensor"));
  m.def("to_dlpack", [](const Tensor& t) { return to_dlpack(t, py::none()); }, py::arg("tensor"));
}

}  // namespace ember::python
