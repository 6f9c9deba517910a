// Derivatives of whole functions (core/autograd_functional.h, core/func.h), forward mode's
// dual level and dual tensors (core/forward_ad.h) and gradient checks (core/gradcheck.h) for
// Python callables; ember/autograd/ and ember/func.py give them PyTorch's signatures. The callables take the list of inputs; they run on this thread with the
// GIL held, since these functions are called with it and keep it.
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "core/autograd_functional.h"
#include "core/forward_ad.h"
#include "core/func.h"
#include "core/gradcheck.h"

namespace ember::python {

namespace {

// f(xs) -> Tensor, refusing another return type with the function's name
TensorsFn tensors_fn(py::function f, const char* op) {
  return [f = hold(std::move(f)), op](const std::vector<Tensor>& xs) {
    py::gil_scoped_acquire gil;
    py::object r = (*f)(xs);
    if (!py::isinstance<Tensor>(r))
      throw py::type_error(std::string(op) + ": the function must return one Tensor, got " +
                           std::string(py::str(py::type::of(r).attr("__name__"))));
    return r.cast<Tensor>();
  };
}

// The dual level Python opens (fwAD.enter_dual_level): one at a time, as in C++.
std::optional<DualLevel> g_level;

}  // namespace

void bind_functional(py::module_& m) {
  m.def("_enter_dual_level", [] {
    if (g_level) fail("enter_dual_level", "dual level ", g_level->level(),
                      " is open already; nested dual levels are not supported yet");
    g_level.emplace();
    return g_level->level();
  });
  m.def("_exit_dual_level", [](std::optional<uint64_t> level) {
    if (!g_level) fail("exit_dual_level", "no dual level is open");
    if (level && *level != g_level->level())
      fail("exit_dual_level", "expected the open level ", g_level->level(), ", got level ", *level);
    g_level.reset();
  });
  m.def("_dual_level", [] { return forward_detail::g_level.load(); });
  m.def("_make_dual", [](const Tensor& primal, const Tensor& tangent) { return make_dual(primal, tangent); });
  m.def("_unpack_dual", [](const Tensor& t) {
    UnpackedDual u = unpack_dual(t);
    return std::pair<Tensor, std::optional<Tensor>>(
        u.primal, u.tangent.defined() ? std::optional<Tensor>(u.tangent) : std::nullopt);
  });
  m.def("_func_jvp", [](py::function f, const std::vector<Tensor>& xs, const std::vector<Tensor>& ts) {
    return func::jvp(tensors_fn(std::move(f), "jvp"), xs, ts);
  });
  m.def("_linearize", [](py::function f, const std::vector<Tensor>& xs) {
    auto [y, jv] = func::linearize(tensors_fn(std::move(f), "linearize"), xs);
    // the tangents' function, called from Python: the GIL is held, as f needs it
    py::cpp_function call([jv = std::move(jv)](const std::vector<Tensor>& ts) { return jv(ts); });
    return py::make_tuple(y, call);
  });
  m.def("_jacfwd", [](py::function f, const std::vector<Tensor>& xs) {
    return func::jacfwd(tensors_fn(std::move(f), "jacfwd"), xs);
  });
  m.def("_func_hvp", [](py::function f, const std::vector<Tensor>& xs, const std::vector<Tensor>& vs) {
    return func::hvp(tensors_fn(std::move(f), "hvp"), xs, vs);
  });
  m.def("_func_hessian", [](py::function f, const std::vector<Tensor>& xs) {
    return func::hessian(tensors_fn(std::move(f), "hessian"), xs);
  });
  m.def("_jacobian", [](py::function f, const std::vector<Tensor>& xs) {
    return jacobian(tensors_fn(std::move(f), "jacobian"), xs);
  });
  m.def("_hessian", [](py::function f, const std::vector<Tensor>& xs) {
    return hessian(tensors_fn(std::move(f), "hessian"), xs);
  });
  m.def("_vjp", [](py::function f, const std::vector<Tensor>& xs, const Tensor& v) {
    return vjp(tensors_fn(std::move(f), "vjp"), xs, v);
  });
  m.def("_jvp", [](py::function f, const std::vector<Tensor>& xs, const std::vector<Tensor>& ts) {
    return jvp(tensors_fn(std::move(f), "jvp"), xs, ts);
  });
  m.def("_hvp", [](py::function f, const std::vector<Tensor>& xs, const std::vector<Tensor>& vs) {
    return hvp(tensors_fn(std::move(f), "hvp"), xs, vs);
  });

  py::class_<ForwardGradCheck>(m, "ForwardGradCheck")
      .def_readonly("passed", &ForwardGradCheck::passed)
      .def_readonly("max_abs_err", &ForwardGradCheck::max_abs_err)
      .def_readonly("max_rel_err", &ForwardGradCheck::max_rel_err)
      .def_property_readonly("worst_index",
                             [](const ForwardGradCheck& r) { return py::tuple(py::cast(r.worst_index)); })
      .def_readonly("forward", &ForwardGradCheck::forward)
      .def_readonly("numeric", &ForwardGradCheck::numeric);
  py::class_<InputGradCheck>(m, "InputGradCheck")
      .def_readonly("name", &InputGradCheck::name)
      .def_property_readonly("shape", [](const InputGradCheck& r) { return py::tuple(py::cast(r.shape)); })
      .def_readonly("passed", &InputGradCheck::passed)
      .def_readonly("max_abs_err", &InputGradCheck::max_abs_err)
      .def_readonly("max_rel_err", &InputGradCheck::max_rel_err)
      .def_property_readonly("worst_index", [](const InputGradCheck& r) { return py::tuple(py::cast(r.worst_index)); })
      .def_readonly("analytic", &InputGradCheck::analytic)
      .def_readonly("numeric", &InputGradCheck::numeric)
      .def_readonly("forward", &InputGradCheck::forward);
  py::class_<GradcheckReport>(m, "GradcheckReport")
      .def_readonly("passed", &GradcheckReport::passed)
      .def_readonly("order", &GradcheckReport::order)
      .def_readonly("inputs", &GradcheckReport::inputs)
      .def("__bool__", [](const GradcheckReport& r) { return r.passed; })
      .def("__str__", &GradcheckReport::to_string)
      .def("__repr__", &GradcheckReport::to_string);

  m.def("_gradcheck", [](py::function f, const std::vector<Tensor>& inputs, double eps, double atol, double rtol,
                         uint64_t seed, const std::vector<std::string>& names, int order, bool check_forward_ad) {
    const GradcheckOptions options{
        .eps = eps, .atol = atol, .rtol = rtol, .seed = seed, .check_forward_ad = check_forward_ad};
    const TensorsFn fn = tensors_fn(std::move(f), order == 1 ? "gradcheck" : "gradgradcheck");
    return order == 1 ? gradcheck(fn, inputs, options, names) : gradgradcheck(fn, inputs, options, names);
  });
}

}  // namespace ember::python
