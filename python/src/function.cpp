// Custom autograd Functions written in Python (ember.autograd.Function, in
// ember/autograd/function.py) over ember::Function: the C++ machinery records the node,
// saves the tensors (so that a double backward reaches them, and a tensor modified in place
// before backward is an error) and checks what backward returns; this file only calls the
// Python forward and backward from it.
//
// Each call has two contexts: the C++ FunctionCtx, which holds the saved tensors, and the
// Python ctx object the user sets attributes on. The C++ one keeps the Python one (in
// saved_data) until the node is freed (a jvp rule, in forward mode, gets it too); the Python one reaches the C++ one through `_c`
// only while forward or backward runs, since the C++ object lives exactly as long as the
// node does.
#include <pybind11/stl.h>

#include <any>
#include <string>
#include <vector>

#include "bindings.h"
#include "core/function.h"

namespace ember::python {

namespace {

using PyHeld = std::shared_ptr<py::object>;

// The C++ context as Python reaches it: usable while the forward or backward that made it
// runs, an error after (the FunctionCtx lives as long as the node, which Python does not
// control), so that a reference kept past the call cannot touch freed memory.
struct CtxRef {
  FunctionCtx* ctx;
  std::shared_ptr<bool> live;
  FunctionCtx& get() const {
    if (!*live) throw std::runtime_error("Function ctx: used after the forward or backward it was made for returned");
    return *ctx;
  }
};

// pyctx._c = a CtxRef while a Python forward or backward runs, None after (also on an
// exception), the CtxRef then dead
class CtxBinding {
 public:
  CtxBinding(py::object pyctx, FunctionCtx& ctx) : pyctx_(std::move(pyctx)), live_(std::make_shared<bool>(true)) {
    pyctx_.attr("_c") = CtxRef{&ctx, live_};
  }
  ~CtxBinding() {
    *live_ = false;
    pyctx_.attr("_c") = py::none();
  }
  CtxBinding(const CtxBinding&) = delete;
  CtxBinding& operator=(const CtxBinding&) = delete;

 private:
  py::object pyctx_;
  std::shared_ptr<bool> live_;
};

std::string type_name(py::handle h) { return py::str(py::type::of(h).attr("__name__")); }

}  // namespace

void bind_function(py::module_& m) {
  py::class_<CtxRef>(m, "_FunctionCtx")
      .def("save_for_backward", [](const CtxRef& ref, const py::iterable& tensors) {
        std::vector<Tensor> list;  // None saves an undefined tensor, as PyTorch allows
        for (py::handle t : tensors) list.push_back(t.is_none() ? Tensor() : t.cast<Tensor>());
        ref.get().save_for_backward(std::move(list));
      }, py::arg("tensors"))
      .def("saved_tensors", [](const CtxRef& ref) {
        const std::vector<Tensor> saved = ref.get().saved_tensors();
        py::tuple out(saved.size());
        for (size_t i = 0; i < saved.size(); i++) out[i] = tensor_or_none(saved[i]);
        return out;
      })
      .def("needs_input_grad", [](const CtxRef& ref, size_t i) { return ref.get().needs_input_grad(i); },
           py::arg("i"));

  // forward(pyctx, tensors) -> Tensor and backward(pyctx, grad) -> list of Tensor or None,
  // one per tensor input: the Python side maps them from and to the user's arguments.
  m.def("_function_apply", [](const std::string& name, py::object make_ctx, py::function forward,
                              py::function backward, const std::vector<Tensor>& inputs, py::object jvp) {
    Function fn;
    fn.name = name;
    fn.forward = [make_ctx = hold(make_ctx), forward = hold(forward), name](FunctionCtx& ctx,
                                                                            const std::vector<Tensor>& in) {
      py::gil_scoped_acquire gil;
      py::object pyctx = (*make_ctx)();
      py::object out;
      {
        CtxBinding bound(pyctx, ctx);
        out = (*forward)(pyctx, in);
      }
      if (!py::isinstance<Tensor>(out))
        throw py::type_error(name + ".forward must return a Tensor or a tuple of Tensors, got " + type_name(out));
      ctx.saved_data["python"] = hold(pyctx);
      return out.cast<Tensor>();
    };
    fn.backward = [backward = hold(backward), name](FunctionCtx& ctx, const Tensor& grad) {
      py::gil_scoped_acquire gil;
      py::object pyctx = *std::any_cast<PyHeld>(ctx.saved_data.at("python"));
      py::object r;
      {
        CtxBinding bound(pyctx, ctx);
        r = (*backward)(pyctx, grad);
      }
      std::vector<Tensor> grads;
      for (py::handle g : r) {
        if (g.is_none()) grads.emplace_back();
        else if (py::isinstance<Tensor>(g)) grads.push_back(g.cast<Tensor>());
        else throw py::type_error(name + ".backward must return Tensors or None, got " + type_name(g));
      }
      return grads;
    };
    // jvp(pyctx, tangents) -> Tensor, a tangent None where an input has none
    if (!jvp.is_none())
      fn.jvp = [jvp = hold(jvp), name](FunctionCtx& ctx, const std::vector<Tensor>&,
                                       const std::vector<Tensor>& tangents) {
        py::gil_scoped_acquire gil;
        py::object pyctx = *std::any_cast<PyHeld>(ctx.saved_data.at("python"));
        py::list ts;
        for (const Tensor& t : tangents) ts.append(tensor_or_none(t));
        py::object r;
        {
          CtxBinding bound(pyctx, ctx);
          r = (*jvp)(pyctx, ts);
        }
        if (!py::isinstance<Tensor>(r))
          throw py::type_error(name + ".jvp must return the output's tangent as a Tensor, got " + type_name(r));
        return r.cast<Tensor>();
      };
    return fn.apply(inputs);
  }, py::arg("name"), py::arg("make_ctx"), py::arg("forward"), py::arg("backward"), py::arg("inputs"),
     py::arg("jvp") = py::none());
}

}  // namespace ember::python
