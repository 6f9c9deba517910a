// Autograd from Python: backward, ember.autograd.grad (its Python wrapper is in
// ember/autograd.py), retain_grad, hooks written in Python, and grad mode (ember.no_grad
// and enable_grad are Python context managers over set_grad_enabled).
//
// Backward runs without the GIL, so other Python threads run meanwhile; a hook takes the
// GIL back to call its Python function. An exception raised by that function leaves the
// engine through C++ (which unwinds its state) and reaches the caller of backward() as
// the same Python exception.
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "core/autocast.h"
#include "core/autograd.h"

namespace ember::python {

namespace {

// A tensor, or a list or tuple of them, as a list.
std::vector<Tensor> tensors_of(const py::object& obj, const char* what) {
  if (py::isinstance<Tensor>(obj)) return {obj.cast<Tensor>()};
  if (!py::isinstance<py::sequence>(obj))
    throw py::type_error(std::string("grad: ") + what + " must be a Tensor or a sequence of Tensors");
  std::vector<Tensor> out;
  for (py::handle h : obj) {
    if (h.is_none()) out.push_back(Tensor());
    else if (py::isinstance<Tensor>(h)) out.push_back(h.cast<Tensor>());
    else throw py::type_error(std::string("grad: ") + what + " must be Tensors");
  }
  return out;
}

// fn(grad) -> None or a replacement, run with the GIL held
GradHook python_hook(py::function fn) {
  return [fn = hold(std::move(fn))](const Tensor& g) -> Tensor {
    py::gil_scoped_acquire gil;
    py::object r = (*fn)(g);
    if (r.is_none()) return Tensor();
    if (!py::isinstance<Tensor>(r))
      throw py::type_error("register_hook: the hook must return None or a Tensor, got " +
                           std::string(py::str(py::type::of(r).attr("__name__"))));
    return r.cast<Tensor>();
  };
}

}  // namespace

void bind_autograd(py::module_& m, TensorClass& cls) {
  py::class_<HookHandle>(m, "RemovableHandle").def("remove", &HookHandle::remove);

  cls.def("backward", [](const Tensor& t, std::optional<Tensor> gradient, std::optional<bool> retain_graph,
                         bool create_graph) {
    GilRelease nogil;
    t.backward(gradient.value_or(Tensor()), retain_graph, create_graph);
  }, py::arg("gradient") = py::none(), py::arg("retain_graph") = py::none(), py::arg("create_graph") = false);
  cls.def("retain_grad", &Tensor::retain_grad)
      .def_property_readonly("retains_grad", &Tensor::retains_grad)
      .def("register_hook",
           [](const Tensor& t, py::function fn) { return t.register_hook(python_hook(std::move(fn))); },
           py::arg("hook"))
      .def("register_post_accumulate_grad_hook", [](const Tensor& t, py::function fn) {
        return t.register_post_accumulate_grad_hook([fn = hold(std::move(fn))](const Tensor& leaf) {
          py::gil_scoped_acquire gil;
          (*fn)(leaf);
        });
      }, py::arg("hook"));

  // the engine under ember.autograd.grad: a tuple of gradients, None for an unused input
  m.def("_grad", [](const py::object& outputs, const py::object& inputs, const py::object& grad_outputs,
                    std::optional<bool> retain_graph, bool create_graph, bool allow_unused) {
    const std::vector<Tensor> outs = tensors_of(outputs, "outputs"), ins = tensors_of(inputs, "inputs");
    std::vector<Tensor> gouts;
    if (!grad_outputs.is_none()) gouts = tensors_of(grad_outputs, "grad_outputs");
    std::vector<Tensor> grads;
    {
      GilRelease nogil;
      grads = grad(outs, ins, gouts, {.retain_graph = retain_graph, .create_graph = create_graph,
                                      .allow_unused = allow_unused});
    }
    py::tuple result(grads.size());
    for (size_t i = 0; i < grads.size(); i++) result[i] = tensor_or_none(grads[i]);
    return result;
  }, py::arg("outputs"), py::arg("inputs"), py::arg("grad_outputs") = py::none(), py::arg("retain_graph") = py::none(),
     py::arg("create_graph") = false, py::arg("allow_unused") = false);

  m.def("is_grad_enabled", &grad_enabled);
  m.def("_set_grad_enabled", &set_grad_enabled, py::arg("mode"));
  m.def("is_autocast_enabled", &autocast_enabled);
  m.def("_set_autocast_enabled", &set_autocast_enabled, py::arg("mode"));
  m.def("bf16_products_available", &bf16_products_available);
  m.def("is_anomaly_enabled", &anomaly_enabled);
  m.def("_set_anomaly_enabled", &set_anomaly_enabled, py::arg("mode"));
}

}  // namespace ember::python
