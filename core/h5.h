// Reading HDF5 datasets and attributes into tensors (the C API, behind a small surface).
// Used for reference cases and, later, checkpoints. Errors name the file and the key.
#pragma once
#include <string>

#include "core/tensor.h"

namespace ember::h5 {

bool exists(const std::string& file, const std::string& path);  // dataset or group
// A dataset as a tensor: float64 and float32 keep their type, integers become int64,
// and 8-bit unsigned data becomes bool.
Tensor read(const std::string& file, const std::string& dataset);
double attr_double(const std::string& file, const std::string& object, const std::string& name);
std::string attr_string(const std::string& file, const std::string& object, const std::string& name);

}  // namespace ember::h5
