// dtype.h - element types a tensor or a communication buffer can hold, their sizes and names.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace ddp {

enum class DType : uint8_t { F32, F64, BF16, I32, I64, U8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::F64:
      return 8;
    case DType::BF16:
      return 2;
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
    case DType::U8:
      return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "float32";
    case DType::F64:
      return "float64";
    case DType::BF16:
      return "bfloat16";
    case DType::I32:
      return "int32";
    case DType::I64:
      return "int64";
    case DType::U8:
      return "uint8";
  }
  return "?";
}

constexpr bool dtype_is_floating(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::BF16; }

// bfloat16 storage type (upper 16 bits of an IEEE float32), round-to-nearest-even on conversion.
struct BFloat16 {
  uint16_t bits = 0;
  static BFloat16 from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    BFloat16 b;
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN stays a quiet NaN
      b.bits = static_cast<uint16_t>((u >> 16) | 0x40);
      return b;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    b.bits = static_cast<uint16_t>(u >> 16);
    return b;
  }
  float to_float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::F64;
};
template <>
struct dtype_of<BFloat16> {
  static constexpr DType value = DType::BF16;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::I32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::I64;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::U8;
};

}  // namespace ddp
