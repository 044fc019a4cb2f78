// The cells of recurrence.h on the CPU's scalar arithmetic. glibc's exp2
// takes a slow errno path whenever its result underflows, which soft
// Smith-Waterman hits at most cells (a candidate far below the max), so
// arguments below the smallest normal are flushed to 0 first. (Inline
// polynomials, as in the SIMD passes, measured no faster than libm in scalar
// code on the baseline ISA.)
#pragma once

#include <cmath>

#include "../recurrence.h"

namespace softsw::cpu {

struct CpuMath : AccMath {
  static float exp2(float x) { return x < -126.0f ? 0.0f : std::exp2(x); }
  static double exp2(double x) { return x < -1022.0 ? 0.0 : std::exp2(x); }
  static float log2(float x) { return std::log2(x); }
  static double log2(double x) { return std::log2(x); }
};

// The backward passes use normalised soft weights (see "Weights" in
// drivers.cpp): LinearCell::normalized_weights, and for the affine nodes the
// same normalisation below.
template <typename A, bool HARD>
using CpuLinearCell = LinearCell<A, HARD, CpuMath>;

template <typename A>
using CpuSoftTotal = SoftTotal<A, CpuMath>;

// AffineCell of recurrence.h on CpuMath, its soft weights normalised.
template <typename A, bool HARD>
struct CpuAffineCell : AffineCell<A, HARD, CpuMath> {
  using Base = AffineCell<A, HARD, CpuMath>;
  static GapWeights<A> gap_weights(A h, A vo, A ve) {
    GapWeights<A> w = Base::gap_weights(h, vo, ve);
    if constexpr (!HARD) {
      const A z = w.open + w.extend;
      if (z > A(0)) {
        const A r = A(1) / z;
        w.open *= r;
        w.extend *= r;
      }
    }
    return w;
  }
  static PrimeWeights<A> prime_weights(A h, A x, A y) {
    PrimeWeights<A> w = Base::prime_weights(h, x, y);
    if constexpr (!HARD) {
      const A r = A(1) / (CpuMath::exp2(-h) + w.p1 + w.p2);
      w.p1 *= r;
      w.p2 *= r;
    }
    return w;
  }
};

}  // namespace softsw::cpu
