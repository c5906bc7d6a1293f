#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace deltatune {

enum class DType : uint8_t { F32, BF16, F16, I32, I64, U8 };

size_t dtype_size(DType dt);
const char* dtype_name(DType dt);          // safetensors spelling: "F32", "BF16", ...
bool dtype_from_name(const std::string& name, DType* out);

// bf16 <-> f32, round-to-nearest-even (as torch does).
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace deltatune
