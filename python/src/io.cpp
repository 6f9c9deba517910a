// ember.save and ember.load (ember/serialization.py) over io::save and io::load_named:
// one tensor or named tensors, the format chosen by the file's extension (.h5, .npz,
// .npy; see io/tensor_file.h). Files are read and written without the GIL.
//
// And checkpoints (io/checkpoint.h, docs/checkpoint-format.md), the file a training
// program resumes from: ember.serialization.save_checkpoint and read_checkpoint write
// and read the very files the C++ programs do (the date translator's among them).
#include <pybind11/stl.h>

#include <map>
#include <string>
#include <vector>

#include "bindings.h"
#include "io/checkpoint.h"
#include "io/tensor_file.h"

namespace ember::python {

namespace {

// A checkpoint as a dict of plain values: model, optimizer (an OptimizerState or None),
// schedule (a dict or None), progress, generators, config, vocab, extra.
py::dict checkpoint_dict(const io::Checkpoint& c) {
  py::dict d;
  d["model"] = c.model;
  d["optimizer"] = c.optimizer ? py::cast(*c.optimizer) : py::none();
  if (c.schedule) {
    py::dict s;
    s["kind"] = c.schedule->kind;
    s["settings"] = c.schedule->settings;
    s["last_step"] = c.schedule->last_step;
    d["schedule"] = s;
  } else {
    d["schedule"] = py::none();
  }
  py::dict progress;
  progress["step"] = c.progress.step;
  progress["epoch"] = c.progress.epoch;
  progress["position"] = c.progress.position;
  d["progress"] = progress;
  d["generators"] = c.generators;
  d["config"] = c.config;
  d["vocab"] = c.vocab;
  d["extra"] = c.extra;
  return d;
}

}  // namespace

void bind_io(py::module_& m) {
  m.def("_save_tensor", [](const std::string& path, const Tensor& t) { io::save(path, t); },
        py::arg("path"), py::arg("tensor"), py::call_guard<GilRelease>());
  m.def("_save_named", [](const std::string& path, const io::NamedTensors& named) { io::save(path, named); },
        py::arg("path"), py::arg("tensors"), py::call_guard<GilRelease>());
  m.def("_load_named", &io::load_named, py::arg("path"), py::call_guard<GilRelease>());

  // The optimizer and schedule are the C++ objects of ember.optim's (their _impl); the
  // generators are ember.Generator objects, saved as their {seed, counter}.
  m.def("_save_checkpoint",
        [](const std::string& path, const std::map<std::string, Tensor>& model, const optim::Optimizer* optimizer,
           const optim::Schedule* schedule, const std::map<std::string, Generator*>& generators,
           const std::map<std::string, int64_t>& progress, const io::Config& config,
           const std::map<std::string, std::vector<std::string>>& vocab, const std::map<std::string, Tensor>& extra) {
          io::Progress p;
          for (const auto& [key, value] : progress) {
            if (key == "step") p.step = value;
            else if (key == "epoch") p.epoch = value;
            else if (key == "position") p.position = value;
            else throw py::value_error("save_checkpoint: progress has step, epoch and position, got '" + key + "'");
          }
          GilRelease nogil;
          io::Checkpoint c = io::make_checkpoint(model, optimizer, schedule, generators, p, config);
          c.vocab = vocab;
          c.extra = extra;
          io::save_checkpoint(path, c);
        },
        py::arg("path"), py::arg("model"), py::arg("optimizer") = py::none(), py::arg("schedule") = py::none(),
        py::arg("generators") = std::map<std::string, Generator*>{},
        py::arg("progress") = std::map<std::string, int64_t>{},
        py::arg("config") = io::Config{}, py::arg("vocab") = std::map<std::string, std::vector<std::string>>{},
        py::arg("extra") = std::map<std::string, Tensor>{});
  m.def("_read_checkpoint", [](const std::string& path) {
    io::Checkpoint c;
    {
      GilRelease nogil;
      c = io::read_checkpoint(path);
    }
    return checkpoint_dict(c);
  }, py::arg("path"));
}

}  // namespace ember::python
