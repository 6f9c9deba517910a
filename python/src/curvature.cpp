// Curvature from Python (ember/curvature.py gives it its names): the loss Hessian over
// parameter parts as nn::LossHessian records it, and the methods of core/curvature.h on it
// or on an operator written in Python (a function of a float64 NumPy vector).
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "core/curvature.h"
#include "nn/curvature.h"

namespace ember::python {

namespace {

// A part as Python passes it: (name, tensor, dim, start, length); dim -1: the whole tensor.
using PartTuple = std::tuple<std::string, Tensor, int64_t, int64_t, int64_t>;

nn::ParameterSet parts_of(const std::vector<PartTuple>& parts) {
  nn::ParameterSet set;
  for (const auto& p : parts) {
    nn::ParameterPart part;
    std::tie(part.name, part.param, part.dim, part.start, part.length) = p;
    set.push_back(part);
  }
  return set;
}

std::vector<PartTuple> tuples_of(const nn::ParameterSet& set) {
  std::vector<PartTuple> out;
  for (const auto& p : set) out.emplace_back(p.name, p.param, p.dim, p.start, p.length);
  return out;
}

py::array_t<double> array_of(const std::vector<double>& v) { return py::array_t<double>(py::ssize_t(v.size()), v.data()); }

// An operator written in Python: called with the GIL, a float64 array in, one out.
curvature::Operator python_operator(py::function fn, const char* who) {
  return [f = hold(std::move(fn)), who](const std::vector<double>& v) {
    py::gil_scoped_acquire gil;
    py::object r = (*f)(array_of(v));
    py::array_t<double, py::array::c_style | py::array::forcecast> a;
    bool ok = !py::isinstance<py::str>(r) && !py::isinstance<py::bytes>(r);
    if (ok) try {
        a = r.cast<py::array_t<double, py::array::c_style | py::array::forcecast>>();
      } catch (const py::cast_error&) {
        ok = false;
      } catch (py::error_already_set& e) {
        e.restore();
        PyErr_Clear();
        ok = false;
      }
    if (!ok) {
      throw Error(std::string(who) + ": the operator must return a vector of numbers, got " +
                  std::string(py::str(py::type::of(r).attr("__name__"))));
    }
    if (a.ndim() != 1)
      throw Error(std::string(who) + ": the operator must return a vector (one dimension), got " +
                  std::to_string(a.ndim()) + " dimensions");
    return std::vector<double>(a.data(), a.data() + a.size());
  };
}

curvature::LanczosOptions lanczos_options(int64_t max_steps, double tol, uint64_t seed, const std::string& order,
                                          const std::vector<double>& start) {
  curvature::LanczosOptions o;
  o.max_steps = max_steps, o.tol = tol, o.seed = seed, o.start = start;
  if (order == "largest") o.order = curvature::Order::Largest;
  else if (order == "magnitude") o.order = curvature::Order::Magnitude;
  else throw Error("top_eigen: expected order \"largest\" or \"magnitude\", got \"" + order + "\"");
  return o;
}

py::dict eigen_dict(const curvature::Eigen& e) {
  py::dict d;
  d["values"] = e.values;
  py::list vectors;
  for (const auto& v : e.vectors) vectors.append(array_of(v));
  d["vectors"] = vectors;
  d["residuals"] = e.residuals;
  d["steps"] = e.steps;
  d["converged"] = e.converged;
  return d;
}

py::tuple trace_tuple(const curvature::Trace& t) { return py::make_tuple(t.value, t.std_error, t.probes); }

py::tuple density_tuple(const curvature::SpectralDensity& d) { return py::make_tuple(d.n, d.nodes, d.weights); }

}  // namespace

void bind_curvature(py::module_& m) {
  py::module_ c = m.def_submodule("_curvature", "the loss Hessian and the methods of core/curvature.h");
  // head's block of the MultiHeadAttention at the dotted path below module ("": module itself)
  c.def("_head_parameters", [](const std::shared_ptr<nn::Module>& module, const std::string& path, int64_t head) {
    return tuples_of(nn::head_parameters(*module, path, head));
  }, py::arg("module"), py::arg("path"), py::arg("head"));

  py::class_<nn::LossHessian, std::shared_ptr<nn::LossHessian>>(c, "LossHessian")
      .def(py::init([](py::function loss, const std::vector<PartTuple>& parts) {
             return std::make_shared<nn::LossHessian>(
                 tensor_function(std::move(loss), "LossHessian: the loss function"), parts_of(parts));
           }),
           py::arg("loss"), py::arg("parts"))
      .def_property_readonly("loss", &nn::LossHessian::loss)
      .def_property_readonly("products", &nn::LossHessian::products)
      .def("_apply", [](const nn::LossHessian& h, const std::vector<PartTuple>& parts, const std::vector<double>& v) {
        return array_of(h.on(parts_of(parts))(v));
      }, py::arg("parts"), py::arg("v"))
      .def("_dense", [](const nn::LossHessian& h, const std::vector<PartTuple>& parts) {
        const nn::ParameterSet set = parts_of(parts);
        const int64_t n = nn::numel(set);
        const std::vector<double> d = h.dense(set);
        return py::array_t<double>({py::ssize_t(n), py::ssize_t(n)}, d.data());
      }, py::arg("parts"))
      .def("_gradient", [](const nn::LossHessian& h, const std::vector<PartTuple>& parts) {
        return array_of(h.gradient(parts_of(parts)));
      }, py::arg("parts"))
      .def("_top_eigen", [](const nn::LossHessian& h, const std::vector<PartTuple>& parts, int64_t k, int64_t max_steps,
                            double tol, uint64_t seed, const std::string& order, const std::vector<double>& start) {
        const nn::ParameterSet set = parts_of(parts);
        return eigen_dict(curvature::top_eigen(h.on(set), nn::numel(set), k,
                                               lanczos_options(max_steps, tol, seed, order, start)));
      })
      .def("_trace_blocks", [](const nn::LossHessian& h, const std::vector<std::vector<PartTuple>>& blocks,
                               int64_t probes, uint64_t seed) {
        nn::ParameterSet all;
        std::vector<std::pair<int64_t, int64_t>> ranges;
        for (const auto& b : blocks) {
          const nn::ParameterSet set = parts_of(b);
          ranges.emplace_back(nn::numel(all), nn::numel(set));
          all.insert(all.end(), set.begin(), set.end());
        }
        std::vector<py::tuple> out;
        for (const auto& t : curvature::hutchinson_blocks(h.on(all), nn::numel(all), ranges, probes, seed))
          out.push_back(trace_tuple(t));
        return out;
      })
      .def("_density", [](const nn::LossHessian& h, const std::vector<PartTuple>& parts, int64_t steps, int64_t probes,
                          uint64_t seed) {
        const nn::ParameterSet set = parts_of(parts);
        return density_tuple(curvature::spectral_density(h.on(set), nn::numel(set), steps, probes, seed));
      });

  c.def("_top_eigen_of", [](py::function op, int64_t n, int64_t k, int64_t max_steps, double tol, uint64_t seed,
                            const std::string& order, const std::vector<double>& start) {
    return eigen_dict(
        curvature::top_eigen(python_operator(std::move(op), "top_eigen"), n, k, lanczos_options(max_steps, tol, seed, order, start)));
  });
  c.def("_hutchinson_of", [](py::function op, int64_t n, int64_t probes, uint64_t seed) {
    return trace_tuple(curvature::hutchinson(python_operator(std::move(op), "hutchinson"), n, probes, seed));
  });
  c.def("_density_of", [](py::function op, int64_t n, int64_t steps, int64_t probes, uint64_t seed) {
    return density_tuple(curvature::spectral_density(python_operator(std::move(op), "spectral_density"), n, steps,
                                                     probes, seed));
  });
}

}  // namespace ember::python
