// SIMD arithmetic of the CPU kernels: native vectors of VL elements written
// with GCC/Clang vector extensions, 16 bytes on the wheel's baseline SSE2 or
// on NEON (4 floats, 2 doubles), 32 with AVX2+FMA or AVX-512VL (8 floats, 4
// doubles; 512-bit vectors measured no faster), their exp2 / log2, and the
// run-time choice of instruction set. Wider than native vectors are avoided
// on purpose: compilers lower their comparisons and selects element by
// element. Vec<E, VL> is generic in the element (float, or double for the
// float64 probability-domain forward and backward); V<VL>, Floats<VL> and
// VecMath<VL> are the float ones the float-only passes use.
//
// exp2 / log2 are polynomials. float: relative error ~2e-9 and ~7e-10 before
// float rounding; double: at most ~1.2 and ~2.9 ulp (dev/polynomials.py,
// dev/simd_math_accuracy.cpp). exp2 flushes results below the smallest
// normal (2^-126, 2^-1022) to 0. Packed<E, VL> wraps a vector as an
// arithmetic type and PackedMath<E, VL> is its `Math` (recurrence.h), so the
// SIMD passes run the very cells of recurrence.h and probability.h; hard
// mode (max-plus) computes exactly what the scalar cell computes, so the
// backward's tie detection sees the same bits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../recurrence.h"
#include "element.h"

#if (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 9)) && \
    (defined(__x86_64__) || defined(__aarch64__))
#define SOFTSW_CPU_VECTOR 1
#else
#define SOFTSW_CPU_VECTOR 0
#endif

namespace softsw::cpu::simd {

// 2: AVX-512, 1: AVX2 + FMA, 0: baseline, -1: no vector path. The best the
// CPU has, capped by SOFTSW_CPU_ISA=avx512|avx2|baseline|scalar (tests).
int isa_level();

}  // namespace softsw::cpu::simd

#if SOFTSW_CPU_VECTOR
// Vectors wider than 16 bytes only live inside always-inlined code: no ABI
// is involved. (Not popped: the templates are instantiated after this header.)
#pragma GCC diagnostic ignored "-Wpsabi"

#define SOFTSW_VINLINE inline __attribute__((always_inline))

// The entry points of the wider instruction sets. `flatten` inlines every
// call inside them, transitively: the cells of recurrence.h and
// probability.h are ordinary functions, and one left out of line (as at -O1)
// would be compiled for the baseline target and receive 32-byte vectors by
// another calling convention than its AVX caller passes them.
#define SOFTSW_TARGET_AVX2 __attribute__((target("avx2,fma"), flatten))
#define SOFTSW_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma"), flatten))

namespace softsw::cpu::simd {

constexpr int W = 16;  // lanes (pairs) of a group, for every instruction set

// The integer of a lane's width: exponents and comparison masks of E lanes.
template <typename E>
using IntOf = std::conditional_t<sizeof(E) == 8, int64_t, int32_t>;

// Native vectors of VL elements E (float: 4 or 8, double: 2 or 4), their
// integer twins (masks, exponents) and unsigned twins (logical shifts).
template <typename E, int VL>
struct VecOf {
  static constexpr int kBytes = VL * static_cast<int>(sizeof(E));
  static_assert(kBytes == 16 || kBytes == 32, "a native vector is 16 or 32 bytes");
  typedef E F __attribute__((vector_size(kBytes)));
  typedef IntOf<E> I __attribute__((vector_size(kBytes)));
  typedef std::make_unsigned_t<IntOf<E>> U __attribute__((vector_size(kBytes)));
};

// The bit layout of E (IEEE binary32 / binary64).
template <typename E> struct FloatBits;
template <> struct FloatBits<float> {
  static constexpr int kMantissa = 23, kBias = 127, kMinNormal = -126;
  static constexpr int32_t kMantissaMask = 0x7fffff, kOne = 0x3f800000;
};
template <> struct FloatBits<double> {
  static constexpr int kMantissa = 52, kBias = 1023, kMinNormal = -1022;
  static constexpr int64_t kMantissaMask = 0xfffffffffffffLL, kOne = 0x3ff0000000000000LL;
};

template <typename E, int VL>
struct Vec {
  using F = typename VecOf<E, VL>::F;
  using I = typename VecOf<E, VL>::I;
  using U = typename VecOf<E, VL>::U;
  using Int = IntOf<E>;
  using Bits = FloatBits<E>;

  static SOFTSW_VINLINE F splat(E x) { return F{} + x; }
  static SOFTSW_VINLINE I splati(Int x) { return I{} + x; }
  static SOFTSW_VINLINE F load(const E* p) {
    F v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static SOFTSW_VINLINE I loadi(const Int* p) {
    I v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static SOFTSW_VINLINE void store(E* p, F v) { std::memcpy(p, &v, sizeof v); }
  static SOFTSW_VINLINE void storei(Int* p, I v) { std::memcpy(p, &v, sizeof v); }
  // Lane select by a comparison mask (-1 / 0).
  static SOFTSW_VINLINE F sel(I mask, F a, F b) { return (F)((mask & (I)a) | (~mask & (I)b)); }
  static SOFTSW_VINLINE I seli(I mask, I a, I b) { return (mask & a) | (~mask & b); }
  // max_of / min_of of recurrence.h, lane by lane (same NaN behaviour).
  static SOFTSW_VINLINE F vmax(F a, F b) { return sel(a > b, a, b); }
  static SOFTSW_VINLINE F vmin(F a, F b) { return sel(a < b, a, b); }
  // Integer lanes as E (|e| < 2^22 for float, 2^51 for double); double by
  // the bits of 1.5 * 2^52 + e (x86 before AVX-512 has no int64 -> double).
  static SOFTSW_VINLINE F to_float(I e) {
    if constexpr (sizeof(E) == 4) {
      return __builtin_convertvector(e, F);
    } else {
      const F magic = splat(6755399441055744.0);  // 1.5 * 2^52
      return (F)((I)magic + e) - magic;
    }
  }

  // 2^x: polynomials on x - round(x) in [-1/2, 1/2]; results below the
  // smallest normal flushed to 0 (as the soft passes' flushed mode would).
  // float: relative error ~2e-9 (before rounding); double: degree 11,
  // interpolated at Chebyshev nodes (dev/polynomials.py), 2e-17 before
  // rounding, a few ulp after.
  static SOFTSW_VINLINE F exp2(F x) {
    if constexpr (sizeof(E) == 4) {
      x = sel(x < splat(-126.0f), splat(-127.0f), x);  // -> exactly 0 below
      const F r = (x + 12582912.0f) - 12582912.0f;     // nearest integer (1.5 * 2^23)
      const F f = x - r;                                // [-0.5, 0.5]
      F p = splat(1.5345807505118443e-4f);
      p = p * f + 1.3399931183056234e-3f;
      p = p * f + 9.618488973835451e-3f;
      p = p * f + 5.5503287770777475e-2f;
      p = p * f + 0.24022646890479515f;
      p = p * f + 0.6931472057371986f;
      p = p * f + 1.0000000005541863f;
      const I e = __builtin_convertvector(r, I);
      return p * (F)((e + 127) << 23);
    } else {
      x = sel(x < splat(-1022.0), splat(-1023.0), x);  // -> exactly 0 below
      const F magic = splat(6755399441055744.0);       // 1.5 * 2^52
      const F t = x + magic;                            // round(x) in the low bits
      const F r = t - magic;
      const F f = x - r;  // [-0.5, 0.5]
      F p = splat(4.4558179083360645e-10);
      p = p * f + 7.074194297288521e-09;
      p = p * f + 1.0178057087733941e-07;
      p = p * f + 1.3215432535912375e-06;
      p = p * f + 1.5252733841556773e-05;
      p = p * f + 0.00015403530463724353;
      p = p * f + 0.001333355814640647;
      p = p * f + 0.009618129107587256;
      p = p * f + 0.055504108664821625;
      p = p * f + 0.24022650695910158;
      p = p * f + 0.6931471805599453;
      p = p * f + 1.0;
      const I e = (I)t - (I)magic;
      return p * (F)((e + 1023) << 52);
    }
  }

  // exponent_of / pow2 of probability.h, lane by lane: the exponent e of a
  // positive normal x (x in [2^e, 2^(e+1))), -bias for zero; 2^e exactly for
  // e <= bias, 0 below the normal range.
  static SOFTSW_VINLINE I exponent(F x) {
    return (I)(((U)x >> Bits::kMantissa) & (U{} + (2 * Bits::kBias + 1))) - Bits::kBias;
  }
  static SOFTSW_VINLINE F pow2(I e) {
    return (F)(((e + Bits::kBias) << Bits::kMantissa) & (e >= splati(Bits::kMinNormal)));
  }
  // x / 2^exponent(x), in [1, 2) for positive normal x.
  static SOFTSW_VINLINE F mantissa(F x) {
    return (F)(((I)x & Bits::kMantissaMask) | Bits::kOne);
  }
  static SOFTSW_VINLINE I imax(I a, I b) { return seli(a > b, a, b); }

  // log2 of a positive normal y: y = 2^e m, m in [sqrt(1/2), sqrt(2)),
  // log2 m = u P(u^2) with u = (m - 1) / (m + 1) (double: P of degree 7,
  // dev/polynomials.py). NaN stays NaN (as libm's: the scalar and SIMD
  // passes must agree on which scores give NaN).
  static SOFTSW_VINLINE F log2(F y) {
    if constexpr (sizeof(E) == 4) {
      const I bits = (I)y;
      I e = (bits >> 23) - 127;
      F m = (F)((bits & 0x7fffff) | 0x3f800000);
      const I big = m > splat(1.41421356f);
      m = sel(big, m * 0.5f, m);
      e = e - big;  // big is -1 where true
      const F u = (m - 1.0f) / (m + 1.0f);
      const F z = u * u;
      F p = splat(0.4317358635086163f);
      p = p * z + 0.5767143847072285f;
      p = p * z + 0.9617988476322529f;
      p = p * z + 2.8853900797889525f;
      return sel(y != y, y, u * p + __builtin_convertvector(e, F));
    } else {
      I e = exponent(y);
      F m = mantissa(y);
      const I big = m > splat(1.4142135623730951);
      m = sel(big, m * 0.5, m);
      e = e - big;  // big is -1 where true
      const F u = (m - 1.0) / (m + 1.0);
      const F z = u * u;
      F p = splat(0.21366122502798326);
      p = p * z + 0.22091286734180157;
      p = p * z + 0.26233436060329546;
      p = p * z + 0.3205985347650481;
      p = p * z + 0.4121985858422942;
      p = p * z + 0.577078016345514;
      p = p * z + 0.9617966939259898;
      p = p * z + 2.8853900817779268;
      return sel(y != y, y, u * p + to_float(e));
    }
  }
};

// The float vectors of the float-only passes.
template <int VL>
using V = Vec<float, VL>;

// VL values E as an arithmetic type: what the templates of recurrence.h and
// probability.h need (construction from a scalar, + - * /) and nothing more.
template <typename E, int VL>
struct Packed {
  using F = typename VecOf<E, VL>::F;
  F v;
  Packed() = default;
  SOFTSW_VINLINE Packed(E x) : v(F{} + x) {}
  SOFTSW_VINLINE Packed(F x) : v(x) {}
  friend SOFTSW_VINLINE Packed operator+(Packed a, Packed b) { return a.v + b.v; }
  friend SOFTSW_VINLINE Packed operator-(Packed a, Packed b) { return a.v - b.v; }
  friend SOFTSW_VINLINE Packed operator*(Packed a, Packed b) { return a.v * b.v; }
  friend SOFTSW_VINLINE Packed operator/(Packed a, Packed b) { return a.v / b.v; }
  SOFTSW_VINLINE Packed operator-() const { return -v; }
  SOFTSW_VINLINE Packed& operator+=(Packed b) { v += b.v; return *this; }
  SOFTSW_VINLINE Packed& operator*=(Packed b) { v *= b.v; return *this; }
};
template <int VL>
using Floats = Packed<float, VL>;

// The `Math` of recurrence.h's cells on Packed<E, VL>.
template <typename E, int VL>
struct PackedMath {
  using X = Vec<E, VL>;
  using P = Packed<E, VL>;
  static SOFTSW_VINLINE P exp2(P x) { return X::exp2(x.v); }
  static SOFTSW_VINLINE P log2(P x) { return X::log2(x.v); }
  static SOFTSW_VINLINE P larger(P a, P b) { return X::vmax(a.v, b.v); }
  static SOFTSW_VINLINE P smaller(P a, P b) { return X::vmin(a.v, b.v); }
  static SOFTSW_VINLINE P nan_or(P probe, P h) { return X::sel(probe.v != probe.v, probe.v, h.v); }
};
template <int VL>
using VecMath = PackedMath<float, VL>;

// Rows of up to W pairs to and from the lane-interleaved layout of a group
// (col j of lane l at j * W + l; at j * `stride` + l for rows of another lane
// stride, the narrow rows' W / 2), four lanes by four columns at a time with
// a 4 x 4 transpose in registers (every instruction set has 4-float vectors):
//   interleave_rows:   dst[j * W + l] = src[l][j] * scale, j < n[l]
//   deinterleave_rows: dst[l][j] = src[j * W + l],         j < n[l]
// Lanes whose src (dst) is nullptr are skipped. Bit for bit what the scalar
// loops give.
namespace detail {
using F4 = VecOf<float, 4>::F;
SOFTSW_VINLINE void transpose4(F4& a, F4& b, F4& c, F4& d) {
  const F4 t0 = __builtin_shufflevector(a, b, 0, 4, 1, 5), t1 = __builtin_shufflevector(a, b, 2, 6, 3, 7);
  const F4 t2 = __builtin_shufflevector(c, d, 0, 4, 1, 5), t3 = __builtin_shufflevector(c, d, 2, 6, 3, 7);
  a = __builtin_shufflevector(t0, t2, 0, 1, 4, 5);
  b = __builtin_shufflevector(t0, t2, 2, 3, 6, 7);
  c = __builtin_shufflevector(t1, t3, 0, 1, 4, 5);
  d = __builtin_shufflevector(t1, t3, 2, 3, 6, 7);
}
}  // namespace detail

// Asks for the rows the next interleave_rows will read (one line in 64
// bytes): the passes read each row once, from memory, with W rows in flight.
template <typename T>
inline void prefetch_rows(const T* const* src, int count, int64_t n) {
  for (int l = 0; l < count; ++l)
    if (src[l])
      for (int64_t j = 0; j < n; j += 64 / sizeof(T)) __builtin_prefetch(src[l] + j);
}

// The same requests spread over a pass instead of issued in one burst: a
// burst of W rows' lines fills the core's miss buffers and stalls it, while
// the row kernel, issuing a few lines per column, keeps the memory busy under
// its arithmetic. add() rows (n elements of `bytes` each, at most kRows),
// then pace(n, cols, bytes) before a pass of `cols` columns that calls step()
// once per column.
class RowPrefetcher {
 public:
  static constexpr int kRows = 8 * W;
  void add(const void* row) {
    if (row && rows_ < kRows) row_[rows_++] = static_cast<const char*>(row);
  }
  void pace(int64_t n, int64_t cols, int64_t bytes = sizeof(float)) {
    lines_ = (n * bytes + 63) / 64;
    const int64_t total = lines_ * rows_;
    per_step_ = cols > 0 ? static_cast<int>((total + cols - 1) / cols) : 0;
  }
  SOFTSW_VINLINE void steps(int32_t cols) {
    for (int32_t t = 0; t < cols; ++t) step();
  }
  SOFTSW_VINLINE void step() {
    for (int q = 0; q < per_step_ && r_ < rows_; ++q) {
      __builtin_prefetch(row_[r_] + c_ * 64);
      if (++c_ == lines_) {
        c_ = 0;
        ++r_;
      }
    }
  }

 private:
  const char* row_[kRows];
  int rows_ = 0, r_ = 0, per_step_ = 0;
  int64_t lines_ = 0, c_ = 0;
};

inline void interleave_rows(float* dst, const float* const* src, const int64_t* n, int count,
                            float scale, int64_t stride = W) {
  using X = V<4>;
  int l0 = 0;
  for (; l0 + 4 <= count; l0 += 4) {
    const float* const* s = src + l0;
    int64_t j = 0;
    if (s[0] && s[1] && s[2] && s[3]) {
      const int64_t common = std::min(std::min(n[l0], n[l0 + 1]), std::min(n[l0 + 2], n[l0 + 3]));
      for (; j + 4 <= common; j += 4) {
        detail::F4 a = X::load(s[0] + j) * scale, b = X::load(s[1] + j) * scale;
        detail::F4 c = X::load(s[2] + j) * scale, d = X::load(s[3] + j) * scale;
        detail::transpose4(a, b, c, d);
        X::store(dst + j * stride + l0, a);
        X::store(dst + (j + 1) * stride + l0, b);
        X::store(dst + (j + 2) * stride + l0, c);
        X::store(dst + (j + 3) * stride + l0, d);
      }
    }
    for (int l = l0; l < l0 + 4; ++l)
      if (src[l])
        for (int64_t k = j; k < n[l]; ++k) dst[k * stride + l] = src[l][k] * scale;
  }
  for (int l = l0; l < count; ++l)
    if (src[l])
      for (int64_t k = 0; k < n[l]; ++k) dst[k * stride + l] = src[l][k] * scale;
}

inline void deinterleave_rows(float* const* dst, const float* src, const int64_t* n, int count,
                              int64_t stride = W) {
  using X = V<4>;
  int l0 = 0;
  for (; l0 + 4 <= count; l0 += 4) {
    float* const* d = dst + l0;
    int64_t j = 0;
    if (d[0] && d[1] && d[2] && d[3]) {
      const int64_t common = std::min(std::min(n[l0], n[l0 + 1]), std::min(n[l0 + 2], n[l0 + 3]));
      for (; j + 4 <= common; j += 4) {
        detail::F4 a = X::load(src + j * stride + l0), b = X::load(src + (j + 1) * stride + l0);
        detail::F4 c = X::load(src + (j + 2) * stride + l0), e = X::load(src + (j + 3) * stride + l0);
        detail::transpose4(a, b, c, e);
        X::store(d[0] + j, a);
        X::store(d[1] + j, b);
        X::store(d[2] + j, c);
        X::store(d[3] + j, e);
      }
    }
    for (int l = l0; l < l0 + 4; ++l)
      if (dst[l])
        for (int64_t k = j; k < n[l]; ++k) dst[l][k] = src[k * stride + l];
  }
  for (int l = l0; l < count; ++l)
    if (dst[l])
      for (int64_t k = 0; k < n[l]; ++k) dst[l][k] = src[k * stride + l];
}

// The same for double rows (the float64 passes' rows and state): two lanes
// by two columns at a time.
inline void interleave_rows(double* dst, const double* const* src, const int64_t* n, int count,
                            double scale, int64_t stride = W) {
  using D2 = VecOf<double, 2>::F;
  int l0 = 0;
  for (; l0 + 2 <= count; l0 += 2) {
    const double* const* s = src + l0;
    int64_t j = 0;
    if (s[0] && s[1]) {
      const int64_t common = std::min(n[l0], n[l0 + 1]);
      for (; j + 2 <= common; j += 2) {
        D2 a, b;
        std::memcpy(&a, s[0] + j, sizeof a);
        std::memcpy(&b, s[1] + j, sizeof b);
        a *= scale;
        b *= scale;
        const D2 c0 = __builtin_shufflevector(a, b, 0, 2), c1 = __builtin_shufflevector(a, b, 1, 3);
        std::memcpy(dst + j * stride + l0, &c0, sizeof c0);
        std::memcpy(dst + (j + 1) * stride + l0, &c1, sizeof c1);
      }
    }
    for (int l = l0; l < l0 + 2; ++l)
      if (src[l])
        for (int64_t k = j; k < n[l]; ++k) dst[k * stride + l] = src[l][k] * scale;
  }
  for (int l = l0; l < count; ++l)
    if (src[l])
      for (int64_t k = 0; k < n[l]; ++k) dst[k * stride + l] = src[l][k] * scale;
}

inline void deinterleave_rows(double* const* dst, const double* src, const int64_t* n, int count,
                              int64_t stride = W) {
  using D2 = VecOf<double, 2>::F;
  int l0 = 0;
  for (; l0 + 2 <= count; l0 += 2) {
    double* const* d = dst + l0;
    int64_t j = 0;
    if (d[0] && d[1]) {
      const int64_t common = std::min(n[l0], n[l0 + 1]);
      for (; j + 2 <= common; j += 2) {
        D2 a, b;
        std::memcpy(&a, src + j * stride + l0, sizeof a);
        std::memcpy(&b, src + (j + 1) * stride + l0, sizeof b);
        const D2 c0 = __builtin_shufflevector(a, b, 0, 2), c1 = __builtin_shufflevector(a, b, 1, 3);
        std::memcpy(d[0] + j, &c0, sizeof c0);
        std::memcpy(d[1] + j, &c1, sizeof c1);
      }
    }
    for (int l = l0; l < l0 + 2; ++l)
      if (dst[l])
        for (int64_t k = j; k < n[l]; ++k) dst[l][k] = src[k * stride + l];
  }
  for (int l = l0; l < count; ++l)
    if (dst[l])
      for (int64_t k = 0; k < n[l]; ++k) dst[l][k] = src[k * stride + l];
}

// The same for rows of any element type T (element.h) and lanes of its
// accumulate type A: rows of A itself through the transposes above, the
// others converted element by element.
template <typename T, typename A>
inline void interleave_rows_of(A* dst, const T* const* src, const int64_t* n, int count,
                               std::type_identity_t<A> scale) {
  if constexpr (std::is_same_v<T, A>) {
    interleave_rows(dst, src, n, count, scale);
  } else {
    for (int l = 0; l < count; ++l)
      if (src[l])
        for (int64_t k = 0; k < n[l]; ++k) dst[k * W + l] = ld(src[l], k) * scale;
  }
}
template <typename T, typename A>
inline void deinterleave_rows_of(T* const* dst, const A* src, const int64_t* n, int count) {
  if constexpr (std::is_same_v<T, A>) {
    deinterleave_rows(dst, src, n, count);
  } else {
    for (int l = 0; l < count; ++l)
      if (dst[l])
        for (int64_t k = 0; k < n[l]; ++k) st(dst[l], k, src[k * W + l]);
  }
}

}  // namespace softsw::cpu::simd

#endif  // SOFTSW_CPU_VECTOR
