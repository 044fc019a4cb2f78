// The cell update of the linear-gap recurrence (docs/semantics.md,
// docs/math.md), shared by the CPU and CUDA kernels so that they cannot drift
// apart.
//
// Soft mode works in base-2 units: every score is pre-multiplied by
// 1 / (T ln 2), so that softmax_T becomes log2-sum-exp2 and the inner loop has
// no division and no natural exp/log. Hard mode (T = 0) is plain max-plus in
// the caller's units. A cell sees its three candidates
//   v1 = H[i-1,j-1] + S_ij,  v2 = H[i-1,j] + g_ij,  v3 = H[i,j-1] + g_ij
// and the constant v0 = 0 (a path may start anywhere).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#if defined(__CUDACC__)
#define SOFTSW_HD __host__ __device__ __forceinline__
#else
#define SOFTSW_HD inline
#endif

namespace softsw {

constexpr double kLn2 = 0.69314718055994530942;

// On the GPU one FMNMX instead of a compare and a select. The two differ only
// for NaN operands, and every caller makes a NaN input give NaN by itself.
template <typename A> SOFTSW_HD A max_of(A a, A b) {
#if defined(__CUDA_ARCH__)
  return ::fmax(a, b);
#else
  return a > b ? a : b;
#endif
}
template <typename A> SOFTSW_HD A min_of(A a, A b) {
#if defined(__CUDA_ARCH__)
  return ::fmin(a, b);
#else
  return a < b ? a : b;
#endif
}

// exp2 / log2 on the accumulate type. On the GPU, float uses the special
// function unit directly (ex2.approx / lg2.approx, ~2 ulp): this is the cost
// that bounds the whole kernel, so no library wrapper around it.
SOFTSW_HD float exp2_acc(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return std::exp2(x);
#endif
}
SOFTSW_HD double exp2_acc(double x) {
#if defined(__CUDA_ARCH__)
  return ::exp2(x);
#else
  return std::exp2(x);
#endif
}
SOFTSW_HD float log2_acc(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return std::log2(x);
#endif
}
SOFTSW_HD double log2_acc(double x) {
#if defined(__CUDA_ARCH__)
  return ::log2(x);
#else
  return std::log2(x);
#endif
}

// 1 / x on the accumulate type; on the GPU, float uses the special function
// unit alone (rcp.approx, ~1 ulp), not the IEEE division's refinement.
SOFTSW_HD float reciprocal_acc(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return 1.0f / x;
#endif
}
SOFTSW_HD double reciprocal_acc(double x) { return 1.0 / x; }

template <typename A> SOFTSW_HD bool is_nan(A x) { return x != x; }
template <typename A> SOFTSW_HD A quiet_nan() { return std::numeric_limits<A>::quiet_NaN(); }

// The arithmetic a cell uses (the `Math` parameter of LinearCell, SoftTotal
// and AffineCell): exp2 / log2, and for LinearCell also larger / smaller
// (max, min) and the NaN rule, so that a backend can pass its own exp2, or a
// vector type (the CPU's SIMD lanes, whose comparisons give masks, not bools).
struct AccMath {
  template <typename A> SOFTSW_HD static A exp2(A x) { return exp2_acc(x); }
  template <typename A> SOFTSW_HD static A log2(A x) { return log2_acc(x); }
  template <typename A> SOFTSW_HD static A larger(A a, A b) { return max_of(a, b); }
  template <typename A> SOFTSW_HD static A smaller(A a, A b) { return min_of(a, b); }
  // NaN where `probe` is NaN, `h` elsewhere.
  template <typename A> SOFTSW_HD static A nan_or(A probe, A h) {
    return is_nan(probe) ? quiet_nan<A>() : h;
  }
};

// Transition weights p1, p2, p3 of a cell (p0 = 1 - p1 - p2 - p3 is the
// "path starts here" weight and is never needed).
template <typename A>
struct Weights {
  A p1, p2, p3;
};

// Linear-gap cell. HARD selects max-plus (T = 0) over log2-sum-exp2. value()
// and the soft weights are written on Math alone (they also run on vectors);
// the hard weights are scalar.
template <typename A, bool HARD, typename Math = AccMath>
struct LinearCell {
  // H at the cell. A NaN candidate makes H NaN (max alone would drop it);
  // -inf candidates (forbidden moves) simply contribute nothing.
  SOFTSW_HD static A value(A v1, A v2, A v3) {
    A h;
    if constexpr (HARD) {
      h = Math::larger(Math::larger(A(0), v1), Math::larger(v2, v3));
    } else {
      // Order the four candidates just enough to know the largest, m: its
      // term is 2^0 = 1, so 3 exp2 + 1 log2 per cell instead of 4 + 1.
      const A a = Math::larger(A(0), v1), b = Math::smaller(A(0), v1);
      const A c = Math::larger(v2, v3), d = Math::smaller(v2, v3);
      const A m = Math::larger(a, c), e = Math::smaller(a, c);
      h = m + Math::log2(A(1) + Math::exp2(b - m) + Math::exp2(d - m) + Math::exp2(e - m));
    }
    return Math::nan_or(v1 + v2 + v3, h);
  }

  // p_k = d H / d v_k. Soft: 2^(v_k - h). Hard: one-hot on the first maximal
  // candidate in the order start (v0), match (v1), gap down (v2), gap right
  // (v3) -- the documented tie order of the traceback.
  SOFTSW_HD static Weights<A> weights(A h, A v1, A v2, A v3) {
    Weights<A> w;
    if constexpr (HARD) {
      const bool start = !(h > A(0));
      const bool t1 = !start && v1 == h;
      const bool t2 = !start && !t1 && v2 == h;
      const bool t3 = !start && !t1 && !t2 && v3 == h;
      w.p1 = t1 ? A(1) : A(0);
      w.p2 = t2 ? A(1) : A(0);
      w.p3 = t3 ? A(1) : A(0);
    } else {
      w.p1 = Math::exp2(v1 - h);
      w.p2 = Math::exp2(v2 - h);
      w.p3 = Math::exp2(v3 - h);
    }
    return w;
  }

  // The same, divided by their sum with the start weight p0 = 2^-h (soft), so
  // that they sum to 1 even when h lost the log2(1 + ...) term to rounding
  // (T -> 0, where tied paths would otherwise be counted twice).
  SOFTSW_HD static Weights<A> normalized_weights(A h, A v1, A v2, A v3) {
    Weights<A> w = weights(h, v1, v2, v3);
    if constexpr (!HARD) {
      const A sum = Math::exp2(-h) + w.p1 + w.p2 + w.p3;
      A inv;
      if constexpr (std::is_floating_point_v<A>) inv = reciprocal_acc(sum);
      else inv = A(1) / sum;  // a backend's vector type
      w.p1 *= inv;
      w.p2 *= inv;
      w.p3 *= inv;
    }
    return w;
  }
};

// Online log2-sum-exp2 accumulator for reduction="soft" (kernel units), and
// the running max with its first (row-major) argmax for reduction="max".
template <typename A, typename Math = AccMath>
struct SoftTotal {
  A max = -std::numeric_limits<A>::infinity();
  A sum = A(0);  // sum of 2^(x - max)
  SOFTSW_HD void add(A x) {
    if (x > max) {
      sum = sum * Math::exp2(max - x) + A(1);
      max = x;
    } else {
      sum += Math::exp2(x - max);
    }
    if (is_nan(x)) max = x;
  }
  SOFTSW_HD void merge(const SoftTotal& o) {
    if (is_nan(o.max) || is_nan(max)) { max = is_nan(max) ? max : o.max; return; }
    if (o.max == -std::numeric_limits<A>::infinity()) return;
    if (o.max > max) {
      sum = sum * Math::exp2(max - o.max) + o.sum;
      max = o.max;
    } else {
      sum += o.sum * Math::exp2(o.max - max);
    }
  }
  SOFTSW_HD A value() const { return is_nan(max) ? max : max + Math::log2(sum); }
};

// A pair's `total` as the forward saves it for the backward passes: two
// accumulate-type numbers at [2b] and [2b + 1]. The soft reduction keeps its
// max and log2(sum) apart so that the seeds 2^(H - total) stay exact relative
// to one another: max + log2(sum) rounded to one number is off by up to
// ulp(max) / 2, which at small T (H large in kernel units) is whole powers of
// two, and tied cells would each get a seed near 1.
template <typename A>
struct PairTotal {
  A base = A(0);     // soft: the largest H; otherwise the score (kernel units)
  A log2sum = A(0);  // soft: log2 of sum 2^(H - base); otherwise 0
  template <typename Math>
  SOFTSW_HD static PairTotal of(const SoftTotal<A, Math>& s) {
    PairTotal t;
    t.base = s.max;
    t.log2sum = is_nan(s.max) ? A(0) : Math::log2(s.sum);
    return t;
  }
  SOFTSW_HD static PairTotal of(A score) {
    PairTotal t;
    t.base = score;
    return t;
  }
  SOFTSW_HD static PairTotal load(const A* total, int64_t b) {
    PairTotal t;
    t.base = total[2 * b];
    t.log2sum = total[2 * b + 1];
    return t;
  }
  SOFTSW_HD void store(A* total, int64_t b) const {
    total[2 * b] = base;
    total[2 * b + 1] = log2sum;
  }
  SOFTSW_HD A value() const { return base + log2sum; }
  // The soft reduction's weight of a cell: d total / d H.
  SOFTSW_HD A seed(A h) const { return exp2_acc((h - base) - log2sum); }
};

// Running max and its first argmax. Cells must be offered with increasing
// row-major index within one accumulator; merge() breaks ties on the index.
// NaN counts as larger than everything (as torch.max), so it propagates.
template <typename A>
struct MaxArg {
  A best = A(0);          // the boundary zeros are part of the max
  int64_t index = -1;     // -1: a boundary cell
  SOFTSW_HD static bool beats(A x, int64_t xi, A y, int64_t yi) {
    if (is_nan(x)) return !is_nan(y) || xi < yi;
    if (is_nan(y)) return false;
    return x > y || (x == y && xi < yi);  // -1 (boundary) ranks first
  }
  SOFTSW_HD void add(A x, int64_t i) {
    if (beats(x, i, best, index)) { best = x; index = i; }
  }
  SOFTSW_HD void merge(const MaxArg& o) {
    if (beats(o.best, o.index, best, index)) { best = o.best; index = o.index; }
  }
};

// Affine-gap nodes (docs/semantics.md), added for the affine kernels. Per cell:
//   D  = C[i-1,j-1] + S_ij                       (no softmax: weight 1)
//   U  = gap(A[i-1,j] + open_ij, U[i-1,j] + extend_ij)
//   L  = gap(B[i,j-1] + open_ij, L[i,j-1] + extend_ij)
//   A  = prime(D, L)   the C' read by U[i+1,j]  (softmax_T(0, D, L))
//   B  = prime(D, U)   the C' read by L[i,j+1]  (softmax_T(0, D, U))
//   C  = LinearCell<A,HARD>::value(D, U, L)      (softmax_T(0, D, U, L))
// with A = B = C = 0 and U = L = D = -inf on the boundary. Same units as
// LinearCell (soft: base-2, pre-scaled by 1 / (T ln 2); hard: max-plus).
// Hard-mode ties: C: start, D, U, L (LinearCell::weights); A: start, D, L;
// B: start, D, U; U and L: open before extend.
template <typename A>
struct GapWeights {
  A open, extend;
};
template <typename A>
struct PrimeWeights {
  A p1, p2;  // weights of x and y in softmax_T(0, x, y)
};

template <typename A, bool HARD, typename Math = AccMath>
struct AffineCell {
  // softmax_T(vo, ve): -inf when both are -inf (no path), NaN if either is.
  // The hard value is written on Math alone (it also runs on the CPU's
  // vector lanes); the soft one is scalar.
  SOFTSW_HD static A gap(A vo, A ve) {
    if constexpr (HARD) {
      return Math::nan_or(vo, Math::nan_or(ve, Math::larger(vo, ve)));
    } else {
      const A m = max_of(vo, ve), d = min_of(vo, ve);
      const A h =
          m == -std::numeric_limits<A>::infinity() ? m : m + Math::log2(A(1) + Math::exp2(d - m));
      return is_nan(vo) || is_nan(ve) ? quiet_nan<A>() : h;
    }
  }
  SOFTSW_HD static GapWeights<A> gap_weights(A h, A vo, A ve) {
    GapWeights<A> w;
    const bool none = h == -std::numeric_limits<A>::infinity();
    if (HARD) {
      const bool to = !none && vo == h;
      const bool te = !none && !to && ve == h;
      w.open = to ? A(1) : A(0);
      w.extend = te ? A(1) : A(0);
    } else {
      w.open = none ? A(0) : Math::exp2(vo - h);
      w.extend = none ? A(0) : Math::exp2(ve - h);
    }
    return w;
  }
  // softmax_T(0, x, y); hard: on Math alone, as gap().
  SOFTSW_HD static A prime(A x, A y) {
    if constexpr (HARD) {
      return Math::nan_or(x, Math::nan_or(y, Math::larger(Math::larger(A(0), x), y)));
    } else {
      const A a = max_of(A(0), x), b = min_of(A(0), x);
      const A m = max_of(a, y), e = min_of(a, y);
      const A h = m + Math::log2(A(1) + Math::exp2(b - m) + Math::exp2(e - m));
      return is_nan(x) || is_nan(y) ? quiet_nan<A>() : h;
    }
  }
  SOFTSW_HD static PrimeWeights<A> prime_weights(A h, A x, A y) {
    PrimeWeights<A> w;
    if (HARD) {
      const bool start = !(h > A(0));
      const bool t1 = !start && x == h;
      const bool t2 = !start && !t1 && y == h;
      w.p1 = t1 ? A(1) : A(0);
      w.p2 = t2 ? A(1) : A(0);
    } else {
      w.p1 = Math::exp2(x - h);
      w.p2 = Math::exp2(y - h);
    }
    return w;
  }

  // The weights divided by their sum (soft), as LinearCell::normalized_weights
  // and for the same reason: they sum to 1 even where h lost the
  // log2(1 + ...) term to rounding. A gap node's sum has no start weight; with
  // no path (both weights 0) it stays 0. Scalar (reciprocal_acc). Every pass
  // that reads weights from the log-domain state (the backward, tangent and
  // reverse-tangent passes, CPU and CUDA) takes them from these and
  // LinearCell::normalized_weights.
  SOFTSW_HD static GapWeights<A> normalized_gap_weights(A h, A vo, A ve) {
    GapWeights<A> w = gap_weights(h, vo, ve);
    if constexpr (!HARD) {
      const A z = w.open + w.extend;
      if (z > A(0)) {
        const A inv = reciprocal_acc(z);
        w.open *= inv;
        w.extend *= inv;
      }
    }
    return w;
  }
  SOFTSW_HD static PrimeWeights<A> normalized_prime_weights(A h, A x, A y) {
    PrimeWeights<A> w = prime_weights(h, x, y);
    if constexpr (!HARD) {
      const A inv = reciprocal_acc(Math::exp2(-h) + w.p1 + w.p2);
      w.p1 *= inv;
      w.p2 *= inv;
    }
    return w;
  }
};

}  // namespace softsw
