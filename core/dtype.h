// Element types a tensor can hold, and a dispatcher that instantiates a kernel for the
// C++ type behind a runtime dtype. Kernels are templates written once; dispatch picks
// the instantiation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

#include "core/bfloat16.h"

namespace ember {

// The element type of a tensor: float32, float64, int64, bool (one byte a value) or
// bfloat16 (two bytes a value: the top half of a float32, see core/bfloat16.h). A bfloat16
// tensor holds, converts, prints and saves values; arithmetic is float32's or float64's
// (convert with .to(kFloat32)). There are no float16, int32 or complex types, as PyTorch has.
enum class DType : uint8_t { Float32, Float64, Int64, Bool, BFloat16 };

// Short names for the dtypes, as torch.float32 and the like.
///@{
constexpr DType kFloat32 = DType::Float32;
constexpr DType kFloat64 = DType::Float64;
constexpr DType kInt64 = DType::Int64;
constexpr DType kBool = DType::Bool;
constexpr DType kBFloat16 = DType::BFloat16;
///@}

// The bytes one element of this dtype takes: 4, 8, 8, 1 or 2.
inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Int64: return 8;
    case DType::Bool: return 1;
    case DType::BFloat16: return 2;
  }
  return 0;
}

// The dtype's name as PyTorch prints it without the "torch." prefix: "float32", "float64",
// "int64", "bool", "bfloat16".
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int64: return "int64";
    case DType::Bool: return "bool";
    case DType::BFloat16: return "bfloat16";
  }
  return "?";
}

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }  // "float32"

// Whether the dtype is float32, float64 or bfloat16 (torch.is_floating_point). Only float32
// and float64 tensors compute (arithmetic, gradients): see is_computing_float.
inline bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64 || t == DType::BFloat16; }

// Whether the dtype is float32 or float64, the float dtypes that ops compute in and that
// gradients flow through.
inline bool is_computing_float(DType t) { return t == DType::Float32 || t == DType::Float64; }

// dtype_of<T>::value is the dtype that holds C++ type T: float, double, int64_t, bool or
// uint8_t (a bool tensor stores one byte a value), and BFloat16. Other types do not compile.
template <class T> struct dtype_of;
// \cond
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::BFloat16; };
// \endcond

}  // namespace ember
