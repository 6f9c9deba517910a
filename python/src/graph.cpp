// Drawing the backward graph from Python (ember/graph.py gives it PyTorch users' names):
// the graph's DOT text and description, recording gradient norms, and labelling ops with
// the module that ran them - C++ layers through nn::GraphScopes, Python modules through
// nn::label_ops at the end of their forward.
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "core/autograd.h"
#include "core/graph_draw.h"
#include "nn/graph_draw.h"

namespace ember::python {

namespace {

GraphDrawOptions options_of(const std::vector<std::pair<std::string, Tensor>>& params, const std::string& title,
                            double saturation) {
  GraphDrawOptions o;
  o.params = params;
  o.title = title;
  o.saturation = saturation;
  return o;
}

py::dict describe(const Tensor& t, const std::vector<std::pair<std::string, Tensor>>& params, double saturation) {
  const GraphDescription g = describe_graph(t, options_of(params, "", saturation));
  auto norm_or_none = [](double v) { return v < 0 ? py::object(py::none()) : py::object(py::float_(v)); };
  py::list ops, leaves, edges;
  for (const GraphOp& o : g.ops) {
    py::dict d;
    d["name"] = o.name;
    d["shape"] = py::tuple(py::cast(o.shape));
    d["dtype"] = o.dtype;
    d["saved_bytes"] = o.saved_bytes;
    d["released"] = o.released;
    d["grad_norm"] = norm_or_none(o.grad_norm);
    d["module"] = o.scope.empty() ? py::object(py::none()) : py::object(py::str(o.scope));
    d["where"] = o.where;
    d["saturated_share"] = norm_or_none(o.saturated_share);
    ops.append(d);
  }
  for (const GraphLeaf& l : g.leaves) {
    py::dict d;
    d["name"] = l.name.empty() ? py::object(py::none()) : py::object(py::str(l.name));
    d["shape"] = py::tuple(py::cast(l.shape));
    d["dtype"] = l.dtype;
    d["grad_norm"] = norm_or_none(l.grad_norm);
    leaves.append(d);
  }
  for (const GraphEdge& e : g.edges)
    edges.append(py::make_tuple(e.from_leaf ? "leaf" : "op", e.from, e.to, e.input));
  py::dict out;
  out["ops"] = ops;
  out["leaves"] = leaves;
  out["edges"] = edges;
  out["saved_bytes"] = g.saved_bytes;
  return out;
}

// A scope held from __enter__ to __exit__.
template <class Scope>
struct Held {
  std::optional<Scope> scope;
};

}  // namespace

void bind_graph(py::module_& m) {
  m.def("_graph_dot",
        [](const Tensor& t, const std::vector<std::pair<std::string, Tensor>>& params, const std::string& title,
           double saturation) { return graph_dot(t, options_of(params, title, saturation)); },
        py::arg("tensor"), py::arg("params") = std::vector<std::pair<std::string, Tensor>>{}, py::arg("title") = "",
        py::arg("saturation") = 0.99);
  m.def("_draw_graph",
        [](const Tensor& t, const std::string& path, const std::vector<std::pair<std::string, Tensor>>& params,
           const std::string& title, double saturation) {
          return draw_graph(t, path, options_of(params, title, saturation));
        },
        py::arg("tensor"), py::arg("path"), py::arg("params") = std::vector<std::pair<std::string, Tensor>>{},
        py::arg("title") = "", py::arg("saturation") = 0.99);
  m.def("_describe_graph", &describe, py::arg("tensor"),
        py::arg("params") = std::vector<std::pair<std::string, Tensor>>{}, py::arg("saturation") = 0.99);
  m.def("graphviz_available", &graphviz_available);

  using Norms = Held<GradNormRecorder>;
  py::class_<Norms>(m, "_GradNormRecording")
      .def(py::init<>())
      .def("__enter__", [](Norms& h) { h.scope.emplace(); })
      .def("__exit__", [](Norms& h, const py::args&) { h.scope.reset(); });

  py::module_ nn = m.attr("_nn");
  using Scopes = Held<nn::GraphScopes>;
  // the C++ module is kept alive while its scopes are
  py::class_<Scopes>(nn, "_GraphScopes")
      .def(py::init([](const std::shared_ptr<nn::Module>& model, const std::string& name) {
             auto s = std::make_unique<Scopes>();
             s->scope.emplace(*model, name);
             return s;
           }),
           py::arg("model"), py::arg("name") = "", py::keep_alive<1, 2>())
      .def("__enter__", [](Scopes&) {})
      .def("__exit__", [](Scopes& h, const py::args&) { h.scope.reset(); });
  nn.def("label_ops", &nn::label_ops, py::arg("scope"), py::arg("inputs"), py::arg("outputs"));
}

}  // namespace ember::python
