// ember.save and ember.load (ember/serialization.py) over io::save and io::load_named:
// one tensor or named tensors, the format chosen by the file's extension (.h5, .npz,
// .npy; see io/tensor_file.h). Files are read and written without the GIL.
#include <pybind11/stl.h>

#include <string>

#include "bindings.h"
#include "io/tensor_file.h"

namespace ember::python {

void bind_io(py::module_& m) {
  m.def("_save_tensor", [](const std::string& path, const Tensor& t) { io::save(path, t); },
        py::arg("path"), py::arg("tensor"), py::call_guard<py::gil_scoped_release>());
  m.def("_save_named", [](const std::string& path, const io::NamedTensors& named) { io::save(path, named); },
        py::arg("path"), py::arg("tensors"), py::call_guard<py::gil_scoped_release>());
  m.def("_load_named", &io::load_named, py::arg("path"), py::call_guard<py::gil_scoped_release>());
}

}  // namespace ember::python
