// The process-wide settings and counters, as PyTorch's module-level functions: the thread
// count (torch.set_num_threads), the default generator's state (torch.get_rng_state), and
// the allocator's statistics (ember's own; PyTorch has them for CUDA only).
#include <pybind11/stl.h>

#include <map>
#include <string>

#include "bindings.h"
#include "core/parallel.h"
#include "core/random.h"
#include "core/storage.h"

namespace ember::python {

void bind_runtime(py::module_& m) {
  m.def("set_num_threads", [](int64_t n) {
    if (n < 1 || n > kMaxThreads)
      throw py::value_error("set_num_threads: expected a thread count in [1, " + std::to_string(kMaxThreads) +
                            "], got " + std::to_string(n));
    set_num_threads((int)n);
  }, py::arg("n"));
  m.def("get_num_threads", &num_threads);

  m.def("get_rng_state", [] { return default_generator().get_state(); });
  m.def("set_rng_state", [](const std::vector<uint64_t>& state) { default_generator().set_state(state); },
        py::arg("new_state"));
  m.def("initial_seed", [] { return default_generator().seed(); });

  // {name: value} of the allocator's counters (core/storage.h)
  m.def("memory_stats", [] {
    return std::map<std::string, int64_t>{
        {"live_storages", Storage::live_count()},      {"live_bytes", Storage::live_bytes()},
        {"peak_bytes", Storage::peak_bytes()},
        {"total_allocations", Storage::total_allocations()}, {"system_allocations", Storage::system_allocations()},
        {"system_bytes", Storage::system_bytes()},     {"cached_bytes", Storage::cached_bytes()}};
  });
  m.def("empty_cache", &Storage::empty_cache, py::call_guard<GilRelease>());
  m.def("reset_peak_memory_stats", &Storage::reset_peak_bytes);
}

}  // namespace ember::python
