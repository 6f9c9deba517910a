// nn.functional (ember/nn/functional.py gives it PyTorch's signatures) in ember._C._nn,
// beside the C++ modules (nn_modules.cpp). The GIL is released while an op computes.
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "bindings.h"
#include "nn/attention.h"
#include "nn/functional.h"
#include "nn/module.h"

namespace ember::python {


nn::AttentionMask blocked_mask(const std::optional<Tensor>& blocked) {
  return blocked ? nn::AttentionMask::blocked(*blocked) : nn::AttentionMask();
}


void bind_nn(py::module_& m) {
  py::module_ f = m.def_submodule("_nn", "ember's nn library: import ember.nn rather than this module");
  auto or_undefined = [](const std::optional<Tensor>& t) { return t.value_or(Tensor()); };

  f.def("layer_norm", [or_undefined](const Tensor& x, const std::optional<Tensor>& weight,
                                     const std::optional<Tensor>& bias, double eps) {
    return nn::layer_norm(x, or_undefined(weight), or_undefined(bias), eps);
  }, py::arg("input"), py::arg("weight"), py::arg("bias"), py::arg("eps"), NoGil());
  f.def("cross_entropy", [](const Tensor& logits, const Tensor& target, int64_t ignore_index, double smoothing) {
    return nn::cross_entropy(logits, target, ignore_index, smoothing);
  }, py::arg("input"), py::arg("target"), py::arg("ignore_index"), py::arg("label_smoothing"), NoGil());
  f.def("dropout", [](const Tensor& x, double p, bool training, Generator* gen) {
    return dropout(x, p, training, gen);
  }, py::arg("input"), py::arg("p"), py::arg("training"), py::arg("generator"), NoGil());
  f.def("linear", [or_undefined](const Tensor& x, const Tensor& w, const std::optional<Tensor>& b) {
    return linear(x, w, or_undefined(b));
  }, py::arg("input"), py::arg("weight"), py::arg("bias"), NoGil());
  f.def("gelu", [](const Tensor& x, bool tanh_approx) { return gelu(x, tanh_approx); },
        py::arg("input"), py::arg("tanh_approx"), NoGil());
  // (output, weights): the mask is ember's (true = blocked), scale 0 stands for 1/sqrt(D)
  f.def("scaled_dot_product_attention", [](const Tensor& q, const Tensor& k, const Tensor& v,
                                           const std::optional<Tensor>& blocked, double dropout_p, double scale,
                                           Generator* gen) {
    nn::AttentionResult r = nn::scaled_dot_product_attention(q, k, v, blocked_mask(blocked), dropout_p,
                                                             dropout_p > 0, gen, scale);
    return std::make_pair(r.output, r.weights);
  }, py::arg("query"), py::arg("key"), py::arg("value"), py::arg("blocked"), py::arg("dropout_p"), py::arg("scale"),
     py::arg("generator"), NoGil());
  f.def("causal_mask", [](int64_t L, int64_t S) { return nn::causal_mask(L, S).blocked(); },
        py::arg("L"), py::arg("S"));

  f.def("convert_in_place", [](const Tensor& t, DType dtype) {
    if (!is_computing_float(dtype)) throw py::type_error("Module.to: parameters must be float32 or float64");
    nn::convert_in_place(t, dtype);
  }, py::arg("tensor"), py::arg("dtype"));

  bind_nn_modules(f);
}

}  // namespace ember::python
