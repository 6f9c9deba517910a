// ember's errors as the exceptions PyTorch raises for the same mistakes, the message kept
// as ember wrote it but for its advice to convert, spelled as in Python (".float()" for
// ".to(kFloat32)"): an index or dim out of range is an IndexError, memory the system
// refused a MemoryError, and every other Error (shapes, dtypes, values an op refuses) a
// RuntimeError, as PyTorch's op errors are. Wrong argument types are TypeErrors already,
// raised by pybind11 before any C++ runs. Each message ends with the Python line that
// made the call.
#include <new>
#include <string>
#include <utility>

#include "bindings.h"

namespace ember::python {

void bind_errors(py::module_&) {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const OutOfMemory& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    } catch (const Error& e) {
      std::string what = e.what();
      // advice written for C++ (".to(kFloat32)") in Python's spelling
      for (const auto& [cpp, py] : {std::pair<std::string, std::string>{".to(kFloat32)", ".float()"},
                                    {".to(kFloat64)", ".double()"}, {".to(kBFloat16)", ".bfloat16()"},
                                    {".to(kInt64)", ".long()"}})
        for (size_t at = what.find(cpp); at != std::string::npos; at = what.find(cpp, at + py.size()))
          what.replace(at, cpp.size(), py);
      PyObject* type = what.find(" is out of range") != std::string::npos ? PyExc_IndexError : PyExc_RuntimeError;
      // the Python line that made the call, as ember's own messages name a C++ caller's
      // (a message that names one already - anomaly mode's, a backward's - keeps its own)
      const Loc caller = python_caller();
      if (what.find("called at ") == std::string::npos && *caller.file_name())
        what += "; called at " + format_loc(caller);
      PyErr_SetString(type, what.c_str());
    } catch (const std::bad_alloc&) {
      PyErr_SetString(PyExc_MemoryError, "out of memory");
    }
  });
}

}  // namespace ember::python
