// bfloat16: the top 16 bits of a float32 (sign, 8 exponent bits, 7 mantissa bits). Every
// bfloat16 is exactly a float32; a float32 becomes a bfloat16 by rounding to nearest, ties
// to even, as PyTorch and AVX512_BF16's vcvtneps2bf16 do. Plain inline functions, for
// kernels as well as tensors.
#pragma once
#include <bit>
#include <cstdint>

namespace ember {

// The bfloat16 nearest to f, ties to even: overflow rounds to +-inf, subnormals are kept
// (not flushed to zero), -0 stays -0, and a NaN stays a quiet NaN of the same sign.
inline uint16_t float_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // NaN: set the quiet bit
  // adding 0x7fff rounds the dropped half up when above half; the kept last bit breaks ties to even
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// The float32 that bfloat16 bit pattern b stands for (exact).
inline float bf16_to_float(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

// One bfloat16 element, as a bfloat16 tensor stores it: its bit pattern. Converts to float
// implicitly (exactly) and from float explicitly (rounding), so that kernels that move or
// convert elements are written once for all dtypes.
struct BFloat16 {
  uint16_t bits = 0;  // the bit pattern: the top half of a float32

  BFloat16() = default;  // +0
  explicit BFloat16(float f) : bits(float_to_bf16(f)) {}  // rounds to nearest even
  operator float() const { return bf16_to_float(bits); }  // exact

  // The bfloat16 with bit pattern b.
  static BFloat16 from_bits(uint16_t b) {
    BFloat16 v;
    v.bits = b;
    return v;
  }
};

}  // namespace ember
