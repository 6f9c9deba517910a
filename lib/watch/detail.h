// What the watch's files share inside lib/watch (not installed): limits of the file
// format, and the checks and labels of module names.
#pragma once
#include <cstdint>
#include <limits>
#include <string>

namespace ember::watch::detail {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// far past any model a CPU trains (a translator has at most 1024 layers, d_model 2^16)
constexpr int64_t kMaxLayers = 1024, kMaxHeads = 4096;

// A module's name is part of its figure's file name (prefix_<name>.png): a plain name
// keeps every figure inside the directory chosen for it. Throws op's Error otherwise;
// where says whose name it is ("the probe ", "'watch.h5': attribute 'modules' ").
void check_module_name(const std::string& name, const char* op, const std::string& where);

// "encoder self-attention" for encoder_self, and so on; other names as they are.
std::string label(const std::string& module);

}  // namespace ember::watch::detail

namespace ember::watch {
using namespace detail;  // the watch's own files use these helpers unqualified
}  // namespace ember::watch
