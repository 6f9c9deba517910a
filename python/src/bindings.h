// What the binding files share: the pieces of the module each one adds (module.cpp calls
// them in order), and the conversions between Python values and ember's (shapes given as
// PyTorch takes them, undefined tensors as None, Python callables kept by C++).
#pragma once
#include <pybind11/pybind11.h>

#include <functional>
#include <memory>
#include <string>
#include <optional>
#include <vector>

#include "core/autograd.h"
#include "core/tensor.h"
#include "nn/attention_mask.h"

namespace ember::python {

namespace py = pybind11;
using TensorClass = py::class_<Tensor>;

void bind_errors(py::module_& m);
void bind_dtypes(py::module_& m);  // ember.dtype, ember.float32 ..., ember.Generator
TensorClass bind_tensor(py::module_& m);  // the class, its metadata and views
void bind_creation(py::module_& m);  // tensor, zeros, ones, ..., randn
void bind_indexing(TensorClass& cls);
void bind_numpy(py::module_& m, TensorClass& cls);
void bind_dlpack(py::module_& m, TensorClass& cls);  // __dlpack__, from_dlpack
void bind_ops(py::module_& m, TensorClass& cls);
void bind_operators(TensorClass& cls);
void bind_autograd(py::module_& m, TensorClass& cls);
void bind_function(py::module_& m);  // custom autograd Functions written in Python
void bind_functional(py::module_& m);  // jacobian, hessian, vjp, jvp, hvp, gradcheck
void bind_nn(py::module_& m);  // nn.functional and the C++ modules, in ember._C.nn
void bind_nn_modules(py::module_& nn);  // Linear ... Transformer, called by bind_nn
void bind_optim(py::module_& m);  // optimizers and schedules, in ember._C.optim
void bind_io(py::module_& m);  // save and load
void bind_runtime(py::module_& m);  // threads, the default generator's state, the allocator's counters
void bind_watch(py::module_& m);  // the attention watch's statistics, ember._C.watch
void bind_graph(py::module_& m);  // draw_graph, grad norm recording, module scopes (after bind_nn)
void bind_curvature(py::module_& m);  // the loss Hessian, Lanczos, Hutchinson, ember._C._curvature (after bind_nn)
void bind_packing(py::module_& m);  // Packing and the layers' packed forwards, in ember._C._nn

// A shape from PyTorch's two spellings: zeros(2, 3) and zeros((2, 3)) or zeros([2, 3]).
Shape shape_from_args(const py::args& args, const char* op);

// An integer (anything with __index__) as int64; an OverflowError past int64's range.
int64_t int64_of(py::handle v, const char* op);

// None for an undefined tensor (a .grad no backward has reached), the tensor otherwise.
py::object tensor_or_none(const Tensor& t);

// A Python object held from C++, released with the GIL held: what C++ keeps (a hook, the
// array a tensor views) may be dropped on any thread, with or without the GIL (a graph
// freed by backward, which runs without it).
std::shared_ptr<py::object> hold(py::object obj);

// A Python function of no arguments as a C++ one returning a Tensor (called with the GIL
// held): anything else it returns is a TypeError "<who> must return a Tensor<what>, got <type>".
std::function<Tensor()> tensor_function(py::function fn, std::string who, std::string what = "");

// The Python line that called into ember: the innermost frame outside ember's own package
// (so that a layer's forward in ember/nn names the user's line that called it), as a Loc
// whose strings live as long as the process; an empty Loc when there is no Python frame
// or this thread does not hold the GIL.
Loc python_caller();

// The GIL let go while ember computes, as pybind11's gil_scoped_release, except that a
// thread taking it back while the interpreter shuts down (a daemon thread at exit) waits
// there for the process to end: CPython would end the thread by unwinding it through C++
// frames that cannot unwind, which aborts the process.
class GilRelease {
 public:
  GilRelease() : state_(PyEval_SaveThread()) {}
  // may end the thread by unwinding (CPython's way for a thread shutdown catches waiting)
  ~GilRelease() noexcept(false);
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  PyThreadState* state_;
};

// A bound op's call, as pybind11's call_guard: the Python caller's line for the nodes it
// records (core/autograd.h's CallerLoc), then the GIL released while it computes.
struct OpCall {
  CallerLoc loc{python_caller()};
  GilRelease nogil;
};
using NoGil = py::call_guard<OpCall>;

// An attention mask from an optional bool tensor, true = blocked (none when absent).
nn::AttentionMask blocked_mask(const std::optional<Tensor>& blocked);

}  // namespace ember::python
