// The optimizers and learning-rate schedules in ember._C._optim; ember/optim.py gives them
// torch.optim's signatures (betas=(b1, b2), param_groups) and state_dict. Parameters are
// tensor handles, so an optimizer updates the very tensors the model holds, Python's and
// C++'s alike. step() runs without the GIL.
#include <pybind11/stl.h>

#include <map>
#include <string>

#include "bindings.h"
#include "optim/schedule.h"

namespace ember::python {

void bind_optim(py::module_& m) {
  py::module_ o = m.def_submodule("_optim", "ember's optimizers: import ember.optim rather than this module");
  using optim::NamedParams;
  using optim::Optimizer;

  py::class_<optim::ParamState>(o, "ParamState")
      .def(py::init<>())
      .def_readwrite("step", &optim::ParamState::step)
      .def_readwrite("slots", &optim::ParamState::slots);
  py::class_<optim::OptimizerState>(o, "OptimizerState")
      .def(py::init<>())
      .def_readwrite("kind", &optim::OptimizerState::kind)
      .def_readwrite("hyper", &optim::OptimizerState::hyper)
      .def_readwrite("params", &optim::OptimizerState::params);

  py::class_<Optimizer, std::shared_ptr<Optimizer>>(o, "Optimizer")
      // with the GIL held: another Python thread may not clear a .grad or read the state
      // in the middle of an update
      .def("step", &Optimizer::step)
      .def("zero_grad", &Optimizer::zero_grad)
      .def("kind", &Optimizer::kind)
      .def("hyper", &Optimizer::hyper)
      .def("set_hyper", &Optimizer::set_hyper, py::arg("name"), py::arg("value"))
      .def("state", &Optimizer::state)
      .def("load_state", &Optimizer::load_state, py::arg("state"));

  py::class_<optim::SGD, Optimizer, std::shared_ptr<optim::SGD>>(o, "SGD")
      .def(py::init([](NamedParams params, double lr, double momentum, double dampening, double weight_decay,
                       bool nesterov) {
        return std::make_shared<optim::SGD>(std::move(params),
                                            optim::SGDOptions{.lr = lr, .momentum = momentum, .dampening = dampening,
                                                              .weight_decay = weight_decay, .nesterov = nesterov});
      }), py::arg("params"), py::arg("lr"), py::arg("momentum"), py::arg("dampening"), py::arg("weight_decay"),
           py::arg("nesterov"));
  auto adam_options = [](double lr, double beta1, double beta2, double eps, double weight_decay, bool amsgrad) {
    return optim::AdamOptions{.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay,
                              .amsgrad = amsgrad};
  };
  py::class_<optim::Adam, Optimizer, std::shared_ptr<optim::Adam>>(o, "Adam")
      .def(py::init([adam_options](NamedParams params, double lr, double beta1, double beta2, double eps,
                                   double weight_decay, bool amsgrad) {
        return std::make_shared<optim::Adam>(std::move(params),
                                             adam_options(lr, beta1, beta2, eps, weight_decay, amsgrad));
      }), py::arg("params"), py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"),
           py::arg("weight_decay"), py::arg("amsgrad"));
  py::class_<optim::AdamW, optim::Adam, std::shared_ptr<optim::AdamW>>(o, "AdamW")
      .def(py::init([adam_options](NamedParams params, double lr, double beta1, double beta2, double eps,
                                   double weight_decay, bool amsgrad) {
        return std::make_shared<optim::AdamW>(std::move(params),
                                              adam_options(lr, beta1, beta2, eps, weight_decay, amsgrad));
      }), py::arg("params"), py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"),
           py::arg("weight_decay"), py::arg("amsgrad"));

  // schedules: step(optimizer) sets and returns the rate of the step about to be taken
  py::class_<optim::Schedule, std::shared_ptr<optim::Schedule>>(o, "Schedule")
      .def("step", &optim::Schedule::step, py::arg("optimizer"))
      .def("lr_at", &optim::Schedule::lr_at, py::arg("step"))
      .def_property("last_step", &optim::Schedule::last_step, &optim::Schedule::set_last_step)
      .def("settings", &optim::Schedule::settings);
  py::class_<optim::InverseSqrtSchedule, optim::Schedule, std::shared_ptr<optim::InverseSqrtSchedule>>(
      o, "InverseSqrtSchedule")
      .def(py::init<int64_t, int64_t, double>(), py::arg("d_model"), py::arg("warmup"), py::arg("factor") = 1.0);
  py::class_<optim::WarmupCosineSchedule, optim::Schedule, std::shared_ptr<optim::WarmupCosineSchedule>>(
      o, "WarmupCosineSchedule")
      .def(py::init<double, int64_t, int64_t, double>(), py::arg("peak_lr"), py::arg("warmup"), py::arg("total"),
           py::arg("min_lr") = 0.0);
  py::class_<optim::ConstantSchedule, optim::Schedule, std::shared_ptr<optim::ConstantSchedule>>(
      o, "ConstantSchedule")
      .def(py::init<double>(), py::arg("lr"));
}

}  // namespace ember::python
