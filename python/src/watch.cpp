// ember.watch: the attention watch's per-head statistics (lib/watch/watch.h) on tensors a
// Python program has - the scores and weights an attention hook hands over, and the
// gradients reaching them - and the meaning of each quantity.
#include <pybind11/stl.h>

#include <optional>

#include "bindings.h"
#include "lib/watch/watch.h"

namespace ember::python {

void bind_watch(py::module_& m) {
  py::module_ w = m.def_submodule("_watch", "the attention watch's statistics");
  w.attr("quantities") = ember::watch::kQuantities;
  w.def("meaning", &ember::watch::meaning, py::arg("quantity"));
  // quantity -> one value per head; None for a gradient or scores not at hand
  w.def("head_statistics", [](const std::optional<Tensor>& scores, const Tensor& weights, const std::optional<Tensor>& dscores,
                              const std::optional<Tensor>& dweights, const std::optional<Tensor>& blocked,
                              const std::optional<Tensor>& query_padding) {
    OpCall in_op;
    return ember::watch::head_statistics(scores.value_or(Tensor()), weights, dscores.value_or(Tensor()), dweights.value_or(Tensor()),
                                         blocked.value_or(Tensor()), query_padding.value_or(Tensor()));
  }, py::arg("scores"), py::arg("weights"), py::arg("dscores") = py::none(), py::arg("dweights") = py::none(),
     py::arg("blocked") = py::none(), py::arg("query_padding") = py::none());
}

}  // namespace ember::python
