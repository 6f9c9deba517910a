// What the checkpoint sources share inside io (not installed).
#pragma once
#include <string>

#include "core/tensor.h"

namespace ember::io::detail {

// Whether every element of a float tensor is finite (true for other dtypes).
bool all_finite(const Tensor& t);
// "<op>: model tensor 'encoder.w' is undefined: <why>".
void check_tensor(const Tensor& t, const std::string& what, const std::string& name,
                  const char* op = "save_checkpoint");

}  // namespace ember::io::detail
