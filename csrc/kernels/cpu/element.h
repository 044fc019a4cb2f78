// Element types of the CPU kernels: the dtypes of problem.h as C++ types,
// their accumulate type, and loads / stores that convert. Half types are
// converted by hand (no torch headers here), round-to-nearest-even, NaN kept
// quiet.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

namespace softsw::cpu {

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    const float f = static_cast<float>(mant) * 0x1p-24f;  // zero or subnormal
    return sign ? -f : f;
  }
  const uint32_t bits = exp == 31 ? sign | 0x7f800000u | (mant << 13)
                                  : sign | ((exp + 112u) << 23) | (mant << 13);
  return std::bit_cast<float>(bits);
}

inline uint16_t float_to_half(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u)  // inf or NaN (quiet)
    return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | (ax >> 13) : 0u));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (ax < 0x38800000u) {
    // Below the smallest normal half: adding 0.5 rounds to a multiple of
    // 2^-24 (the subnormal step) in the float unit, round-to-nearest-even.
    const float t = std::bit_cast<float>(ax) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(t) - 0x3f000000u));
  }
  const uint32_t odd = (ax >> 13) & 1u;
  ax += 0xc8000fffu + odd;  // rebias the exponent by (15 - 127) << 23, round
  return static_cast<uint16_t>(sign | (ax >> 13));
}

inline float bf16_to_float(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

inline uint16_t float_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

template <typename T> struct Io;
template <> struct Io<float> {
  using Acc = float;
  static float load(float x) { return x; }
  static float store(float v) { return v; }
};
template <> struct Io<double> {
  using Acc = double;
  static double load(double x) { return x; }
  static double store(double v) { return v; }
};
template <> struct Io<Half> {
  using Acc = float;
  static float load(Half x) { return half_to_float(x.bits); }
  static Half store(float v) { return Half{float_to_half(v)}; }
};
template <> struct Io<BFloat16> {
  using Acc = float;
  static float load(BFloat16 x) { return bf16_to_float(x.bits); }
  static BFloat16 store(float v) { return BFloat16{float_to_bf16(v)}; }
};

template <typename T> using Acc = typename Io<T>::Acc;
template <typename T> inline Acc<T> ld(const T* p, int64_t k) { return Io<T>::load(p[k]); }
template <typename T> inline void st(T* p, int64_t k, Acc<T> v) { p[k] = Io<T>::store(v); }
template <typename A> constexpr A kInf = std::numeric_limits<A>::infinity();

// Every entry of an (M, N) output outside the top-left (mr, nr) block.
template <typename T>
void fill_outside(T* out, int64_t M, int64_t N, int64_t mr, int64_t nr, Acc<T> value) {
  if (out == nullptr) return;
  const T v = Io<T>::store(value);
  for (int64_t r = 0; r < M; ++r) std::fill(out + r * N + (r < mr ? nr : 0), out + (r + 1) * N, v);
}

}  // namespace softsw::cpu
