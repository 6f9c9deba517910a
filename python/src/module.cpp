// ember._C: the C++ library as a Python extension. The pure-Python package around it
// (python/ember/) gives it PyTorch's layout (ember.autograd, ember.no_grad); each binding
// file here adds one subject, in the order below (the Tensor class comes before what
// returns tensors, so that signatures name it).
#include "bindings.h"

#include "core/version.h"

namespace ember::python {

std::shared_ptr<py::object> hold(py::object obj) {
  return std::shared_ptr<py::object>(new py::object(std::move(obj)), [](py::object* o) {
    // at interpreter exit the object is gone with the interpreter: leak the reference
    if (!Py_IsInitialized()) {
      o->release();
      delete o;
      return;
    }
    py::gil_scoped_acquire gil;
    delete o;
  });
}

py::object tensor_or_none(const Tensor& t) {
  if (!t.defined()) return py::none();
  return py::cast(t);
}

}  // namespace ember::python

PYBIND11_MODULE(_C, m) {
  using namespace ember::python;
  m.doc() = "ember's C++ library; import ember rather than this module";
  m.attr("__version__") = ember::version();
  bind_errors(m);
  bind_dtypes(m);
  TensorClass cls = bind_tensor(m);
  bind_creation(m);
  bind_indexing(cls);
  bind_numpy(m, cls);
  bind_dlpack(m, cls);
  bind_ops(m, cls);
  bind_operators(cls);
  bind_autograd(m, cls);
  bind_function(m);
  bind_functional(m);
  bind_nn(m);
  bind_optim(m);
  bind_io(m);
  bind_watch(m);
  bind_runtime(m);
  // the classes print as ember.Tensor, the name users import them by
  for (const char* name : {"Tensor", "dtype", "Generator", "Node", "RemovableHandle", "GradcheckReport"})
    m.attr(name).attr("__module__") = "ember";
}
