// ember._C: the C++ library as a Python extension. The pure-Python package around it
// (python/ember/) gives it PyTorch's layout (ember.autograd, ember.no_grad); each binding
// file here adds one subject, in the order below (the Tensor class comes before what
// returns tensors, so that signatures name it).
#include "bindings.h"

#include <unistd.h>

#include <string>
#include <string_view>
#include <unordered_map>

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

std::function<Tensor()> tensor_function(py::function fn, std::string who, std::string what) {
  return [f = hold(std::move(fn)), who = std::move(who), what = std::move(what)]() {
    py::object r = (*f)();
    if (!py::isinstance<Tensor>(r))
      throw py::type_error(who + " must return a Tensor" + what + ", got " +
                           std::string(py::str(py::type::of(r).attr("__name__"))));
    return r.cast<Tensor>();
  };
}

namespace {

// A Python str kept for good, as UTF-8 text whose pointer stays valid (the str is never
// released), and whether it names a file of ember's package. Read with the GIL held.
struct Interned {
  const char* text;
  bool ours;
};

const Interned& intern(PyObject* str) {
  static auto* table = new std::unordered_map<PyObject*, Interned>();
  static std::string package_dir;  // ember's package directory, with a trailing '/'
  auto it = table->find(str);
  if (it != table->end()) return it->second;
  if (package_dir.empty()) {
    PyObject* ember = PyImport_GetModule(py::str("ember").ptr());  // new reference, or null
    if (ember) {
      py::object pkg = py::reinterpret_steal<py::object>(ember);
      if (py::hasattr(pkg, "__path__")) package_dir = py::str(pkg.attr("__path__")[py::int_(0)]).cast<std::string>() + "/";
    }
    PyErr_Clear();
  }
  Py_INCREF(str);
  const char* text = PyUnicode_AsUTF8(str);
  if (!text) {
    PyErr_Clear();
    text = "";
  }
  const bool ours = !package_dir.empty() && std::string_view(text).starts_with(package_dir);
  return table->emplace(str, Interned{text, ours}).first->second;
}

}  // namespace

GilRelease::~GilRelease() noexcept(false) {
#if PY_VERSION_HEX >= 0x030D0000
  const bool finalizing = Py_IsFinalizing();
#else
  const bool finalizing = _Py_IsFinalizing();
#endif
  if (finalizing)
    for (;;) pause();  // the process is ending; this thread must not run Python again
  PyEval_RestoreThread(state_);
}

Loc python_caller() {
  if (!Py_IsInitialized() || !PyGILState_Check()) return Loc();
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  while (frame) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
    const Interned& file = intern(code->co_filename);
    if (!file.ours) {
      const Loc loc = Loc::current(file.text, (unsigned)PyFrame_GetLineNumber(frame), intern(code->co_name).text);
      Py_DECREF(code);
      Py_DECREF(frame);
      return loc;
    }
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference, or null
    Py_DECREF(code);
    Py_DECREF(frame);
    frame = back;
  }
  return Loc();
}

namespace {

// Python's __new__ alone (T.__new__(T), or copy.copy, with no __init__ after) would make a
// pybind11 instance with no C++ object in it, which crashes the first method that reads
// it. A class with a __new__ of its own - pybind11's, called through it - makes CPython
// refuse that call with a TypeError ("not safe"), while T(...) constructs as before. Every
// class of the module and its submodules gets one.
PyObject* pybind11_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  return py::detail::pybind11_object_new(type, args, kwargs);
}

void guard_new(const py::module_& m) {
  for (auto item : m.attr("__dict__").cast<py::dict>()) {
    py::handle value = item.second;
    if (py::isinstance<py::module_>(value)) {
      guard_new(value.cast<py::module_>());
    } else if (PyType_Check(value.ptr())) {
      auto* type = reinterpret_cast<PyTypeObject*>(value.ptr());
      if (type->tp_new == &py::detail::pybind11_object_new) {
        type->tp_new = &pybind11_new;
        PyType_Modified(type);
      }
    }
  }
}

}  // namespace

py::object tensor_or_none(const Tensor& t) {
  if (!t.defined()) return py::none();
  return py::cast(t);
}

}  // namespace ember::python

PYBIND11_MODULE(_C, m) {
  using namespace ember::python;
  m.doc() = "ember's C++ library; import ember rather than this module";
  m.attr("__version__") = ember::version();
  // nodes recorded while the GIL is held name the Python line too (OpCall covers the rest)
  ember::CallerLoc::set_fallback(&python_caller);
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
  bind_packing(m);
  bind_graph(m);
  bind_curvature(m);
  bind_optim(m);
  bind_io(m);
  bind_watch(m);
  guard_new(m);
  bind_runtime(m);
  // the classes print as ember.Tensor, the name users import them by
  for (const char* name : {"Tensor", "dtype", "Generator", "Node", "RemovableHandle", "GradcheckReport"})
    m.attr(name).attr("__module__") = "ember";
}
