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

// The backward passes use the normalised soft weights of recurrence.h
// (LinearCell::normalized_weights, AffineCell::normalized_gap_weights and
// normalized_prime_weights).
template <typename A, bool HARD>
using CpuLinearCell = LinearCell<A, HARD, CpuMath>;

template <typename A>
using CpuSoftTotal = SoftTotal<A, CpuMath>;

template <typename A, bool HARD>
using CpuAffineCell = AffineCell<A, HARD, CpuMath>;

}  // namespace softsw::cpu
