// CPU kernels of softsw (SPEC.md, MATH.md): forward, backward and the
// Hessian-vector product (double backward) of the soft (T > 0) and hard
// (T = 0) Smith-Waterman recurrence, linear and affine gaps, every dtype.
// Torch-free C++20; parallel over the batch with std::thread.
//
// Units. Soft mode runs in base-2 units pre-scaled by beta = 1 / (T ln 2)
// (recurrence.h): `hidden` and `total` hold values in those units. Adjoints E
// are unit-free; tangents (MATH.md's Hdot) are kept in the caller's units, so
// the tangent of a weight is p * (vdot - hdot) / T. Hard mode is max-plus in
// the caller's units (beta = 1). A temperature so small that 1 / (T ln 2)
// overflows the accumulate type runs as hard (precisely: when 2^20 / (T ln 2)
// does, T <~ 1e-32 in float, 1e-302 in double, so that alignment scores up to
// ~1e6 stay finite in kernel units; below such T softmax_T is max to rounding).
//
// Weights. The backward passes normalise every soft node's weights (and the
// "soft" reduction's seeds) to sum to 1. With exact arithmetic they already
// do; as T -> 0 the stored values, ~score / T in kernel units, lose the
// log2(1 + ...) term to rounding, and unnormalised weights would then count
// tied paths twice (expected-alignment entries of 2). Normalised, the reverse
// pass is a Markov chain and the expected alignment a sub-probability.
//
// Hidden layout (accumulate type, padded extents M, N):
//   linear: H[b][i-1][j-1]                                      B*M*N
//   affine: [b][plane][i-1][j-1], plane 0 = C, 1 = U, 2 = L      3*B*M*N
// Cells outside a pair's (m, n) hold 0. The backward passes recompute
// D = C[i-1,j-1] + S, A = softmax_T(0, D, L) (the C' that U[i+1,j] opens from)
// and B = softmax_T(0, D, U) (the C' that L[i,j+1] opens from) from C, U, L,
// with the same arithmetic as the forward, so hard-mode ties are bit-exact.
//
// Hard-mode (T = 0) ties: one-hot on the first maximal candidate of a node,
//   linear cell, and the C node: start, match (D), gap down (U), gap right (L)
//   A = softmax(0, D, L): start, D, L;   B = softmax(0, D, U): start, D, U
//   U and L: open before extend.
// The gradient of T = 0 is therefore the traceback of one optimal path.
//
// Reductions. "max": the score is the largest cell (boundary zeros
// included); the adjoint is seeded at the argmax cell (first in row-major
// order), nothing when the max is a boundary 0. "soft" with T = 0 equals
// "max": the forward still reports argmax = -1 (problem.h), and the backward
// passes find the argmax again in `hidden`. Since an adjoint only flows up and
// left, a "max" backward only visits the rectangle above-left of the argmax.
//
// Bad or special input. A pair whose lengths are outside [0, M] x [0, N] gets
// a NaN score and total, argmax -1, hidden 0 and NaN in every gradient entry
// of that pair; nothing outside the arrays is read. NaN in a pair's scores
// makes its score NaN ("max": the first NaN cell is the argmax) and never
// touches another pair. An empty pair scores 0 with zero gradients.
//
// Speed. Pairs are spread over std::threads (as many as the CPUs this
// process may run on; SOFTSW_NUM_THREADS=k overrides). The linear-gap forward
// with a float accumulator is vectorised across the pairs of the batch (see
// "Vectorised linear-gap forward" below); every other pass is the scalar
// cell loop of this file.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <string>
#include <type_traits>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

#include "problem.h"
#include "recurrence.h"

namespace softsw {
namespace {

// ---------------------------------------------------------------------------
// Element types. Half types are converted by hand (no torch headers here),
// round-to-nearest-even, NaN kept quiet.
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Cell math on the CPU. glibc's exp2 takes a slow errno path whenever its
// result underflows, which soft Smith-Waterman hits at most cells (a
// candidate far below the max), so arguments below the smallest normal are
// flushed to 0 first. (Inline polynomials, as in the vectorised forward,
// measured no faster than libm in scalar code on the baseline ISA.)
// CpuLinearCell and CpuSoftTotal mirror LinearCell and SoftTotal of
// recurrence.h (same formulas, same hard tie order) on this exp2.
// ---------------------------------------------------------------------------

struct CpuMath {
  static float exp2(float x) { return x < -126.0f ? 0.0f : std::exp2(x); }
  static double exp2(double x) { return x < -1022.0 ? 0.0 : std::exp2(x); }
  static float log2(float x) { return std::log2(x); }
  static double log2(double x) { return std::log2(x); }
};

template <typename A, bool HARD>
struct CpuLinearCell {
  static A value(A v1, A v2, A v3) {
    if constexpr (HARD) {
      return LinearCell<A, true>::value(v1, v2, v3);
    } else {
      const A a = max_of(A(0), v1), b = min_of(A(0), v1);
      const A c = max_of(v2, v3), d = min_of(v2, v3);
      const A m = max_of(a, c), e = min_of(a, c);
      const A h = m + CpuMath::log2(A(1) + CpuMath::exp2(b - m) + CpuMath::exp2(d - m) +
                                    CpuMath::exp2(e - m));
      return is_nan(v1 + v2 + v3) ? quiet_nan<A>() : h;
    }
  }
  static Weights<A> weights(A h, A v1, A v2, A v3) {
    if constexpr (HARD) {
      return LinearCell<A, true>::weights(h, v1, v2, v3);
    } else {
      const A p1 = CpuMath::exp2(v1 - h), p2 = CpuMath::exp2(v2 - h), p3 = CpuMath::exp2(v3 - h);
      const A r = A(1) / (CpuMath::exp2(-h) + p1 + p2 + p3);  // 1 up to rounding ("Weights")
      return Weights<A>{p1 * r, p2 * r, p3 * r};
    }
  }
};

template <typename A>
struct CpuSoftTotal {
  A max = -std::numeric_limits<A>::infinity();
  A sum = A(0);
  void add(A x) {
    if (x > max) {
      sum = sum * CpuMath::exp2(max - x) + A(1);
      max = x;
    } else {
      sum += CpuMath::exp2(x - max);
    }
    if (is_nan(x)) max = x;
  }
  A value() const { return is_nan(max) ? max : max + CpuMath::log2(sum); }
};

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

// ---------------------------------------------------------------------------
// Batch parallelism: pairs are handed out dynamically to std::threads, each
// with its own scratch buffers. An exception in a worker (bad_alloc) is
// rethrown on the calling thread.
// ---------------------------------------------------------------------------

template <typename A>
struct Scratch {
  std::vector<A> buf[24];
  A* get(int k, int64_t n) {
    if (static_cast<int64_t>(buf[k].size()) < n) buf[k].resize(static_cast<size_t>(n));
    return buf[k].data();
  }
};

int thread_count(int64_t items, double work) {
  static const int hw = [] {
    int n = static_cast<int>(std::thread::hardware_concurrency());
#if defined(__linux__)
    cpu_set_t set;  // the CPUs this process may use (containers, taskset)
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) n = CPU_COUNT(&set);
#endif
    if (const char* env = std::getenv("SOFTSW_NUM_THREADS")) {
      const int e = std::atoi(env);
      if (e > 0) n = e;
    }
    return std::max(n, 1);
  }();
  const double per_thread = 1 << 15;  // below ~32k cells a thread costs more than it saves
  const int64_t by_work = static_cast<int64_t>(work / per_thread) + 1;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({hw, items, by_work})));
}

template <typename Work, typename Body>
void parallel_for(int64_t items, double work, Body&& body) {
  if (items <= 0) return;
  const int nt = thread_count(items, work);
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex mutex;
  auto worker = [&] {
    try {
      Work scratch;
      for (int64_t k; (k = next.fetch_add(1)) < items;) body(k, scratch);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!error) error = std::current_exception();
      next.store(items);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < nt; ++t) {
    try {
      threads.emplace_back(worker);
    } catch (...) {
      break;  // no more threads: the others do the work
    }
  }
  worker();
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

// ---------------------------------------------------------------------------
// One pair's view of the problem, in kernel units.
// ---------------------------------------------------------------------------

template <typename T>
struct GapView {
  using A = Acc<T>;
  const T* data = nullptr;  // the pair's slice, or nullptr: `value`
  int64_t si = 0, sj = 0;
  A value = 0, beta = 1;
  A at(int64_t i, int64_t j) const {  // gap move ending at DP cell (i, j), 1-based
    return data ? ld(data, (i - 1) * si + (j - 1) * sj) * beta : value;
  }
};

template <typename T>
struct PairView {
  using A = Acc<T>;
  int64_t N = 0;  // row stride of every (M, N) array
  const T* S = nullptr;
  A beta = 1;
  GapView<T> open, ext;
  A s(int64_t i, int64_t j) const { return ld(S, (i - 1) * N + (j - 1)) * beta; }
};

// A direction (double backward): the pair's (M, N) slice, nullptr = zero.
template <typename T>
inline Acc<T> dir_at(const T* d, int64_t N, int64_t i, int64_t j) {
  return d ? ld(d, (i - 1) * N + (j - 1)) : Acc<T>(0);
}

template <typename T>
struct Setup {
  using A = Acc<T>;
  const Problem& p;
  int64_t M, N, MN, planes;
  bool hard;
  bool soft_reduction;  // reduction "soft" with T > 0 (T = 0 soft is max)
  A beta;               // caller units -> kernel units
  A unit;               // kernel units -> caller units
  A inv_t;              // 1 / T for tangents (0 when hard)

  explicit Setup(const Problem& pr)
      : p(pr), M(pr.rows), N(pr.cols), MN(pr.rows * pr.cols), planes(pr.affine ? 3 : 1) {
    const double t = pr.temperature;
    const A b = static_cast<A>(1.0 / (t * kLn2));
    const A it = static_cast<A>(1.0 / t);
    // Tiny T runs as hard: kernel units must hold scores up to ~2^20 (float:
    // T >~ 1e-32, double: T >~ 1e-302); below, softmax_T equals max to rounding.
    hard = !(t > 0.0) || !std::isfinite(b * A(1 << 20)) || !std::isfinite(it);
    beta = hard ? A(1) : b;
    unit = hard ? A(1) : static_cast<A>(t * kLn2);
    inv_t = hard ? A(0) : it;
    soft_reduction = !hard && pr.reduction == Reduction::Soft;
  }

  // The pair's true extents; false when they are out of range.
  bool extents(int64_t b, int64_t& m, int64_t& n) const {
    if (p.lengths == nullptr) {
      m = M;
      n = N;
      return true;
    }
    m = p.lengths[2 * b];
    n = p.lengths[2 * b + 1];
    return m >= 0 && m <= M && n >= 0 && n <= N;
  }

  GapView<T> gap(const GapScores& g, int64_t b) const {
    GapView<T> v;
    v.beta = beta;
    if (g.data) {
      v.data = static_cast<const T*>(g.data) + b * g.stride[0];
      v.si = g.stride[1];
      v.sj = g.stride[2];
    } else {
      v.value = static_cast<A>(g.value) * beta;
    }
    return v;
  }

  PairView<T> pair(int64_t b) const {
    PairView<T> v;
    v.N = N;
    v.S = static_cast<const T*>(p.scores) + b * MN;
    v.beta = beta;
    v.open = gap(p.gap_open, b);
    v.ext = p.affine ? gap(p.gap_extend, b) : v.open;
    return v;
  }
};

// ---------------------------------------------------------------------------
// Forward (scalar).
// ---------------------------------------------------------------------------

template <typename A>
struct PairResult {
  A total = 0;
  int64_t argmax = -1;
};

template <typename T, bool HARD>
PairResult<Acc<T>> forward_linear(const PairView<T>& pv, int64_t m, int64_t n, Acc<T>* hid,
                                  bool soft_reduction, Scratch<Acc<T>>& sc) {
  using A = Acc<T>;
  using Cell = CpuLinearCell<A, HARD>;
  const int64_t N = pv.N;
  A* prev = sc.get(0, n + 1);
  A* cur = sc.get(1, n + 1);
  std::fill(prev, prev + n + 1, A(0));
  cur[0] = A(0);
  CpuSoftTotal<A> soft;
  MaxArg<A> best;
  for (int64_t i = 1; i <= m; ++i) {
    for (int64_t j = 1; j <= n; ++j) {
      const A g = pv.open.at(i, j);
      const A h = Cell::value(prev[j - 1] + pv.s(i, j), prev[j] + g, cur[j - 1] + g);
      cur[j] = h;
      if (soft_reduction) soft.add(h); else best.add(h, (i - 1) * N + (j - 1));
    }
    if (hid) std::copy(cur + 1, cur + n + 1, hid + (i - 1) * N);
    std::swap(prev, cur);
  }
  PairResult<A> r;
  if (soft_reduction) r.total = soft.value();
  else { r.total = best.best; r.argmax = best.index; }
  return r;
}

template <typename T, bool HARD>
PairResult<Acc<T>> forward_affine(const PairView<T>& pv, int64_t m, int64_t n, int64_t MN,
                                  Acc<T>* hid, bool soft_reduction, Scratch<Acc<T>>& sc) {
  using A = Acc<T>;
  using Lin = CpuLinearCell<A, HARD>;
  using Aff = CpuAffineCell<A, HARD>;
  const int64_t N = pv.N;
  // Previous row (p) and current row (c) of C, A and U; B and L of the left cell.
  A *Cp = sc.get(0, n + 1), *Ap = sc.get(1, n + 1), *Up = sc.get(2, n + 1);
  A *Cc = sc.get(3, n + 1), *Ac = sc.get(4, n + 1), *Uc = sc.get(5, n + 1);
  std::fill(Cp, Cp + n + 1, A(0));
  std::fill(Ap, Ap + n + 1, A(0));
  std::fill(Up, Up + n + 1, -kInf<A>);
  Cc[0] = A(0);
  CpuSoftTotal<A> soft;
  MaxArg<A> best;
  for (int64_t i = 1; i <= m; ++i) {
    A Bl = A(0), Ll = -kInf<A>;
    for (int64_t j = 1; j <= n; ++j) {
      const A o = pv.open.at(i, j), e = pv.ext.at(i, j);
      const A D = Cp[j - 1] + pv.s(i, j);
      const A U = Aff::gap(Ap[j] + o, Up[j] + e);
      const A L = Aff::gap(Bl + o, Ll + e);
      const A C = Lin::value(D, U, L);
      Ac[j] = Aff::prime(D, L);
      Bl = Aff::prime(D, U);
      Ll = L;
      Cc[j] = C;
      Uc[j] = U;
      if (hid) {
        const int64_t k = (i - 1) * N + (j - 1);
        hid[k] = C;
        hid[MN + k] = U;
        hid[2 * MN + k] = L;
      }
      if (soft_reduction) soft.add(C); else best.add(C, (i - 1) * N + (j - 1));
    }
    std::swap(Cp, Cc);
    std::swap(Ap, Ac);
    std::swap(Up, Uc);
  }
  PairResult<A> r;
  if (soft_reduction) r.total = soft.value();
  else { r.total = best.best; r.argmax = best.index; }
  return r;
}

// ---------------------------------------------------------------------------
// Vectorised linear-gap forward (float accumulate: float32, float16,
// bfloat16). One SIMD lane per pair of the batch, groups of W = 16 pairs,
// one row of the group at a time (the row's scores are first gathered into a
// lane-interleaved buffer, in kernel units). Written with GCC/Clang vector
// extensions on native-width vectors (VL = 4 on the wheel's baseline SSE2 or
// on NEON, 8 with AVX2+FMA or AVX-512VL), the W lanes being W / VL
// independent chains; the instruction set is picked at run time.
// SOFTSW_CPU_ISA=avx512|avx2|baseline|scalar caps it (scalar: no vector
// path at all), for tests. exp2 / log2 are polynomials: relative error ~2e-9
// and ~7e-10 before float rounding; exp2 flushes results below 2^-126 to 0.
// Hard mode computes exactly what the scalar cell computes (max-plus), so the
// backward's tie detection sees the same bits.
// ---------------------------------------------------------------------------

#if (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 9)) && \
    (defined(__x86_64__) || defined(__aarch64__))
#define SOFTSW_CPU_VECTOR 1
#else
#define SOFTSW_CPU_VECTOR 0
#endif

#if SOFTSW_CPU_VECTOR
// 64-byte vectors only live inside always-inlined code: no ABI is involved.
// (Not popped: the templates are instantiated at the end of the file.)
#pragma GCC diagnostic ignored "-Wpsabi"

namespace vec {

constexpr int W = 16;  // lanes (pairs) of a group, for every instruction set

// Native vectors of VL floats / int32 (VL = 4: SSE2 or NEON, 8: AVX2 or
// AVX-512VL; 512-bit vectors measured no faster). Wider-than-native vectors
// are avoided on purpose: compilers lower their comparisons and selects
// element by element.
template <int VL> struct VecOf;
template <> struct VecOf<4> {
  typedef float F __attribute__((vector_size(16)));
  typedef int32_t I __attribute__((vector_size(16)));
};
template <> struct VecOf<8> {
  typedef float F __attribute__((vector_size(32)));
  typedef int32_t I __attribute__((vector_size(32)));
};

#define SOFTSW_VINLINE inline __attribute__((always_inline))

template <int VL>
struct V {
  using F = typename VecOf<VL>::F;
  using I = typename VecOf<VL>::I;

  static SOFTSW_VINLINE F splat(float x) { return F{} + x; }
  static SOFTSW_VINLINE I splati(int32_t x) { return I{} + x; }
  static SOFTSW_VINLINE F load(const float* p) {
    F v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static SOFTSW_VINLINE I loadi(const int32_t* p) {
    I v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static SOFTSW_VINLINE void store(float* p, F v) { std::memcpy(p, &v, sizeof v); }
  static SOFTSW_VINLINE void storei(int32_t* p, I v) { std::memcpy(p, &v, sizeof v); }
  // Lane select by a comparison mask (-1 / 0).
  static SOFTSW_VINLINE F sel(I mask, F a, F b) { return (F)((mask & (I)a) | (~mask & (I)b)); }
  static SOFTSW_VINLINE I seli(I mask, I a, I b) { return (mask & a) | (~mask & b); }
  // max_of / min_of of recurrence.h, lane by lane (same NaN behaviour).
  static SOFTSW_VINLINE F vmax(F a, F b) { return sel(a > b, a, b); }
  static SOFTSW_VINLINE F vmin(F a, F b) { return sel(a < b, a, b); }

  static SOFTSW_VINLINE F exp2(F x) {
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
  }

  // log2 of y >= 1 (finite): y = 2^e m, m in [sqrt(1/2), sqrt(2)),
  // log2 m = u P(u^2) with u = (m - 1) / (m + 1).
  static SOFTSW_VINLINE F log2(F y) {
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
    return u * p + __builtin_convertvector(e, F);
  }

  // LinearCell<float, HARD>::value, lane by lane.
  template <bool HARD>
  static SOFTSW_VINLINE F cell(F v1, F v2, F v3) {
    const F zero = splat(0.0f);
    F h;
    if constexpr (HARD) {
      h = vmax(vmax(zero, v1), vmax(v2, v3));
    } else {
      const F a = vmax(zero, v1), b = vmin(zero, v1);
      const F c = vmax(v2, v3), d = vmin(v2, v3);
      const F m = vmax(a, c), e = vmin(a, c);
      h = m + log2(1.0f + exp2(b - m) + exp2(d - m) + exp2(e - m));
    }
    const F t = v1 + v2 + v3;
    return sel(t != t, t, h);
  }
};

// Per-lane state of a group.
struct alignas(64) Lanes {
  float best[W];    // "max": running max (boundary 0 included) ...
  int32_t bi[W];    // ... and its cell (i, j); -1: a boundary zero
  int32_t bj[W];
  float smax[W];    // "soft": the running sum as smax + log2(ssum)
  float ssum[W];
  int32_t nan[W];   // "soft": a NaN cell was seen
  int32_t m[W];     // lane extents (0 for an unused lane)
  int32_t n[W];
};

// One row i of the group: cells (i, 1..n) from the row above (`prev`,
// lane-interleaved: col j at j*W, col 0 = boundary), the row's scores `s` and
// gap scores `g` (col j at (j-1)*W); writes the row to `cur` and folds it
// into the reduction of the lanes whose pair contains the cell. The W lanes
// are K = W / VL native vectors, independent chains interleaved per column.
template <int VL, bool HARD, bool SOFT>
SOFTSW_VINLINE void row_body(const float* s, const float* g, const float* prev, float* cur,
                             int32_t n, int32_t i, Lanes& ln) {
  using X = V<VL>;
  using F = typename X::F;
  using I = typename X::I;
  constexpr int K = W / VL;
  const I iv = X::splati(i);
  I nl[K], rowok[K], bi[K], bj[K];
  F hd[K], hl[K], best[K];
  for (int k = 0; k < K; ++k) {
    nl[k] = X::loadi(ln.n + k * VL);
    rowok[k] = iv <= X::loadi(ln.m + k * VL);
    hd[k] = X::load(prev + k * VL);
    hl[k] = X::splat(0.0f);
    best[k] = X::load(ln.best + k * VL);
    bi[k] = X::loadi(ln.bi + k * VL);
    bj[k] = X::loadi(ln.bj + k * VL);
  }
  for (int32_t j = 1; j <= n; ++j) {
    const I jv = X::splati(j);
    for (int k = 0; k < K; ++k) {
      const F hu = X::load(prev + j * W + k * VL);
      const F gg = X::load(g + (j - 1) * W + k * VL);
      const F h = X::template cell<HARD>(hd[k] + X::load(s + (j - 1) * W + k * VL), hu + gg,
                                         hl[k] + gg);
      X::store(cur + j * W + k * VL, h);
      hd[k] = hu;
      hl[k] = h;
      if constexpr (!SOFT) {
        const I upd = rowok[k] & (jv <= nl[k]) & ((h > best[k]) | ((h != h) & (best[k] == best[k])));
        best[k] = X::sel(upd, h, best[k]);
        bi[k] = X::seli(upd, iv, bi[k]);
        bj[k] = X::seli(upd, jv, bj[k]);
      }
    }
  }
  for (int k = 0; k < K; ++k) {
    if constexpr (!SOFT) {
      X::store(ln.best + k * VL, best[k]);
      X::storei(ln.bi + k * VL, bi[k]);
      X::storei(ln.bj + k * VL, bj[k]);
    } else {
      // Row max (interior cells are >= 0, so 0 is a safe floor), then the
      // row's sum of 2^(h - max), merged into the running (smax, ssum).
      F rm = X::splat(0.0f);
      I nan = X::loadi(ln.nan + k * VL);
      for (int32_t j = 1; j <= n; ++j) {
        const I ok = rowok[k] & (X::splati(j) <= nl[k]);
        const F h = X::load(cur + j * W + k * VL);
        rm = X::vmax(rm, X::sel(ok, h, X::splat(0.0f)));
        nan |= ok & (h != h);
      }
      F sum = X::splat(0.0f);
      for (int32_t j = 1; j <= n; ++j) {
        const I ok = rowok[k] & (X::splati(j) <= nl[k]);
        sum += X::exp2(X::sel(ok, X::load(cur + j * W + k * VL) - rm, X::splat(-kInf<float>)));
      }
      const F M = X::load(ln.smax + k * VL);
      const F newM = X::vmax(M, rm);
      X::store(ln.ssum + k * VL, X::load(ln.ssum + k * VL) * X::exp2(M - newM) + sum * X::exp2(rm - newM));
      X::store(ln.smax + k * VL, newM);
      X::storei(ln.nan + k * VL, nan);
    }
  }
}

using RowFn = void (*)(const float*, const float*, const float*, float*, int32_t, int32_t, Lanes&);

template <bool HARD, bool SOFT>
void row_baseline(const float* s, const float* g, const float* prev, float* cur, int32_t n,
                  int32_t i, Lanes& ln) {
  row_body<4, HARD, SOFT>(s, g, prev, cur, n, i, ln);
}

#if defined(__x86_64__)
template <bool HARD, bool SOFT>
__attribute__((target("avx2,fma"))) void row_avx2(const float* s, const float* g,
                                                  const float* prev, float* cur, int32_t n,
                                                  int32_t i, Lanes& ln) {
  row_body<8, HARD, SOFT>(s, g, prev, cur, n, i, ln);
}
template <bool HARD, bool SOFT>
__attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma"))) void row_avx512(
    const float* s, const float* g, const float* prev, float* cur, int32_t n, int32_t i,
    Lanes& ln) {
  row_body<8, HARD, SOFT>(s, g, prev, cur, n, i, ln);
}
#endif

// 2: AVX-512, 1: AVX2 + FMA, 0: baseline, -1: no vector path (tests).
int isa_level() {
  static const int level = [] {
    int best = 0;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = 1;
    if (best == 1 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw"))
      best = 2;
#endif
    if (const char* env = std::getenv("SOFTSW_CPU_ISA")) {
      const std::string want(env);
      const int asked = want == "avx512"     ? 2
                        : want == "avx2"     ? 1
                        : want == "baseline" ? 0
                        : want == "scalar"   ? -1
                                             : best;
      best = std::min(best, asked);
    }
    return best;
  }();
  return level;
}

template <bool HARD, bool SOFT>
RowFn pick_row() {
#if defined(__x86_64__)
  switch (isa_level()) {
    case 2: return &row_avx512<HARD, SOFT>;
    case 1: return &row_avx2<HARD, SOFT>;
    default: break;
  }
#endif
  return &row_baseline<HARD, SOFT>;
}

RowFn pick_row(bool hard, bool soft) {
  if (hard) return soft ? pick_row<true, true>() : pick_row<true, false>();
  return soft ? pick_row<false, true>() : pick_row<false, false>();
}

}  // namespace vec

// One group of up to W pairs (valid and non-empty), start to finish.
template <typename T>
void forward_linear_group(const Setup<T>& su, const int64_t* pairs, int count, vec::RowFn row,
                          float* hidden, const ForwardOutputs& out, std::vector<float>& mem) {
  using vec::W;
  const Problem& p = su.p;
  const int64_t N = su.N;
  vec::Lanes ln;
  const T* S[W] = {};
  GapView<T> gv[W];
  float* hid[W] = {};
  int64_t mg = 0, ng = 0;
  for (int l = 0; l < W; ++l) {
    int64_t m = 0, n = 0;
    if (l < count) {
      const int64_t b = pairs[l];
      su.extents(b, m, n);
      S[l] = static_cast<const T*>(p.scores) + b * su.MN;
      gv[l] = su.gap(p.gap_open, b);
      hid[l] = hidden ? hidden + b * su.MN : nullptr;
      if (hid[l]) fill_outside<float>(hid[l], su.M, N, m, n, 0.0f);
    }
    ln.m[l] = static_cast<int32_t>(m);
    ln.n[l] = static_cast<int32_t>(n);
    ln.best[l] = 0.0f;
    ln.bi[l] = ln.bj[l] = -1;
    ln.smax[l] = ln.ssum[l] = 0.0f;
    ln.nan[l] = 0;
    mg = std::max(mg, m);
    ng = std::max(ng, n);
  }
  const int64_t stride = (ng + 1) * W;
  mem.assign(static_cast<size_t>(4 * stride + 16), 0.0f);
  float* base = mem.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  float *prev = base, *cur = base + stride, *sb = base + 2 * stride, *gb = base + 3 * stride;
  const bool gap_const = p.gap_open.data == nullptr;
  if (gap_const) std::fill(gb, gb + ng * W, gv[0].value);
  for (int64_t i = 1; i <= mg; ++i) {
    for (int l = 0; l < count; ++l) {
      if (i > ln.m[l]) continue;
      const T* src = S[l] + (i - 1) * N;
      for (int64_t j = 0; j < ng; ++j) sb[j * W + l] = ld(src, j) * su.beta;
      if (!gap_const)
        for (int64_t j = 0; j < ng; ++j) gb[j * W + l] = gv[l].at(i, j + 1);
    }
    row(sb, gb, prev, cur, static_cast<int32_t>(ng), static_cast<int32_t>(i), ln);
    for (int l = 0; l < count; ++l) {
      if (!hid[l] || i > ln.m[l]) continue;
      float* dst = hid[l] + (i - 1) * N;
      for (int64_t j = 0; j < ln.n[l]; ++j) dst[j] = cur[(j + 1) * W + l];
    }
    std::swap(prev, cur);
  }
  float* total = static_cast<float*>(out.total);
  T* score = static_cast<T*>(out.score);
  for (int l = 0; l < count; ++l) {
    const int64_t b = pairs[l];
    PairTotal<float> t;
    int64_t am = -1;
    if (su.soft_reduction) {
      t.base = ln.nan[l] ? quiet_nan<float>() : ln.smax[l];
      t.log2sum = ln.nan[l] ? 0.0f : CpuMath::log2(ln.ssum[l]);
    } else {
      t.base = ln.best[l];
      if (ln.bi[l] > 0 && p.reduction == Reduction::Max)
        am = (int64_t(ln.bi[l]) - 1) * N + (ln.bj[l] - 1);
    }
    t.store(total, b);
    st(score, b, t.value() * su.unit);
    out.argmax[b] = am;
  }
}

#endif  // SOFTSW_CPU_VECTOR

// The vectorised forward for linear gaps with a float accumulator; false
// when it does not apply (then the scalar forward runs).
template <typename T>
bool forward_linear_vector(const Setup<T>& su, const ForwardOutputs& out) {
#if SOFTSW_CPU_VECTOR
  const Problem& p = su.p;
  if constexpr (!std::is_same_v<Acc<T>, float>) {
    return false;
  } else {
    if (p.affine || su.M >= (int64_t(1) << 30) || su.N >= (int64_t(1) << 30) ||
        vec::isa_level() < 0)
      return false;
    float* hidden = static_cast<float*>(out.hidden);
    std::vector<int64_t> pairs;
    double work = 0;
    for (int64_t b = 0; b < p.batch; ++b) {
      int64_t m = 0, n = 0;
      const bool ok = su.extents(b, m, n);
      if (ok && m > 0 && n > 0) {
        pairs.push_back(b);
        work += double(m) * n;
        continue;
      }
      // Empty pair (score 0) or lengths out of range (NaN).
      if (hidden) fill_outside<float>(hidden + b * su.MN, su.M, su.N, 0, 0, 0.0f);
      const float t = ok ? 0.0f : quiet_nan<float>();
      PairTotal<float>::of(t).store(static_cast<float*>(out.total), b);
      st(static_cast<T*>(out.score), b, t);
      out.argmax[b] = -1;
    }
    if (pairs.empty()) return true;
    // Similar shapes share a group: fewer idle lanes.
    std::stable_sort(pairs.begin(), pairs.end(), [&](int64_t a, int64_t b) {
      int64_t ma, na, mb, nb;
      su.extents(a, ma, na);
      su.extents(b, mb, nb);
      return std::make_pair(na, ma) > std::make_pair(nb, mb);
    });
    const int64_t P = static_cast<int64_t>(pairs.size());
    const int64_t groups =
        std::max<int64_t>((P + vec::W - 1) / vec::W, std::min<int64_t>(P, thread_count(P, work)));
    const vec::RowFn row = vec::pick_row(su.hard, su.soft_reduction);
    parallel_for<Scratch<float>>(groups, work, [&](int64_t g, Scratch<float>& sc) {
      const int64_t lo = g * P / groups, hi = (g + 1) * P / groups;
      if (hi - lo > 1) {
        forward_linear_group<T>(su, pairs.data() + lo, static_cast<int>(hi - lo), row, hidden,
                                out, sc.buf[23] /* lane-interleaved rows */);
        return;
      }
      // A lone pair: one busy lane of W is slower than the scalar loop.
      const int64_t b = pairs[lo];
      int64_t m = 0, n = 0;
      su.extents(b, m, n);
      float* hid = hidden ? hidden + b * su.MN : nullptr;
      if (hid) fill_outside<float>(hid, su.M, su.N, m, n, 0.0f);
      const PairView<T> pv = su.pair(b);
      const PairResult<float> r =
          su.hard ? forward_linear<T, true>(pv, m, n, hid, false, sc)
                  : forward_linear<T, false>(pv, m, n, hid, su.soft_reduction, sc);
      PairTotal<float>::of(r.total).store(static_cast<float*>(out.total), b);
      st(static_cast<T*>(out.score), b, r.total * su.unit);
      out.argmax[b] = p.reduction == Reduction::Soft ? -1 : r.argmax;
    });
    return true;
  }
#else
  (void)su;
  (void)out;
  return false;
#endif
}

template <typename T>
void forward_impl(const Problem& p, const ForwardOutputs& out) {
  using A = Acc<T>;
  const Setup<T> su(p);
  if (forward_linear_vector<T>(su, out)) return;
  A* hidden = static_cast<A*>(out.hidden);
  T* score = static_cast<T*>(out.score);
  A* total = static_cast<A*>(out.total);
  parallel_for<Scratch<A>>(
      p.batch, double(p.batch) * su.MN * su.planes, [&](int64_t b, Scratch<A>& sc) {
        int64_t m = 0, n = 0;
        const bool ok = su.extents(b, m, n);
        if (!ok) m = n = 0;
        A* hid = hidden ? hidden + b * su.planes * su.MN : nullptr;
        if (hid)
          for (int64_t k = 0; k < su.planes; ++k)
            fill_outside<A>(hid + k * su.MN, su.M, su.N, m, n, A(0));
        PairResult<A> r;
        if (m > 0 && n > 0) {
          const PairView<T> pv = su.pair(b);
          if (p.affine)
            r = su.hard ? forward_affine<T, true>(pv, m, n, su.MN, hid, false, sc)
                        : forward_affine<T, false>(pv, m, n, su.MN, hid, su.soft_reduction, sc);
          else
            r = su.hard ? forward_linear<T, true>(pv, m, n, hid, false, sc)
                        : forward_linear<T, false>(pv, m, n, hid, su.soft_reduction, sc);
        }
        if (!ok) r.total = quiet_nan<A>();
        if (p.reduction == Reduction::Soft) r.argmax = -1;
        st(score, b, r.total * su.unit);
        PairTotal<A>::of(r.total).store(total, b);
        out.argmax[b] = r.argmax;
      });
}

// ---------------------------------------------------------------------------
// Seeds and the region a reverse pass visits.
// ---------------------------------------------------------------------------

template <typename A>
struct Seed {
  bool soft = false;  // soft: e0 = 2^(h - total) * scale everywhere; else 1 at the region's corner
  A total = 0;
  A scale = 1;  // 1 / sum of 2^(h - total) over the pair: 1 up to rounding (see "Weights")
  A sdot = 0;   // soft tangent: e0dot = e0 * (hdot - sdot) / T
  A inv_t = 0;
};

// 1 / sum over the pair's cells of 2^(h - total): normalises the "soft" seeds.
template <typename A>
A seed_scale(const A* hid_c, int64_t N, int64_t m, int64_t n, A total) {
  A z = A(0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) z += CpuMath::exp2(hid_c[i * N + j] - total);
  return z > A(0) ? A(1) / z : A(1);
}

// Rows 1..mr, cols 1..nr: the whole pair (soft), or up to the argmax (max).
// Returns false when the saved argmax does not fit the pair (corrupt state).
template <typename T>
bool region_of(const Setup<T>& su, const ForwardState& state, int64_t b, int64_t m, int64_t n,
               const Acc<T>* hid_c, int64_t& mr, int64_t& nr) {
  using A = Acc<T>;
  if (su.soft_reduction || m == 0 || n == 0) {
    mr = m;
    nr = n;
    return true;
  }
  int64_t a;
  if (su.p.reduction == Reduction::Soft) {  // T = 0 soft: the argmax again
    MaxArg<A> best;
    for (int64_t i = 1; i <= m; ++i)
      for (int64_t j = 1; j <= n; ++j) best.add(hid_c[(i - 1) * su.N + (j - 1)], (i - 1) * su.N + (j - 1));
    a = best.index;
  } else {
    a = state.argmax[b];
  }
  if (a < 0) {
    mr = nr = 0;
    return true;
  }
  mr = a / su.N + 1;
  nr = a % su.N + 1;
  return mr <= m && nr <= n;
}

// ---------------------------------------------------------------------------
// Linear gaps: tangent forward and the reverse pass (adjoint E, and with TAN
// its tangent Edot), MATH.md.
// ---------------------------------------------------------------------------

// Hdot over the region, row stride nr.
template <typename T, bool HARD>
void tangent_linear(const PairView<T>& pv, int64_t mr, int64_t nr, const Acc<T>* hid,
                    const T* ws, const T* wo, Acc<T>* hdot) {
  using A = Acc<T>;
  using Cell = CpuLinearCell<A, HARD>;
  const int64_t N = pv.N;
  auto H = [&](int64_t i, int64_t j) { return i == 0 || j == 0 ? A(0) : hid[(i - 1) * N + (j - 1)]; };
  auto Hd = [&](int64_t i, int64_t j) { return i == 0 || j == 0 ? A(0) : hdot[(i - 1) * nr + (j - 1)]; };
  for (int64_t i = 1; i <= mr; ++i)
    for (int64_t j = 1; j <= nr; ++j) {
      const A g = pv.open.at(i, j);
      const Weights<A> w =
          Cell::weights(H(i, j), H(i - 1, j - 1) + pv.s(i, j), H(i - 1, j) + g, H(i, j - 1) + g);
      const A gd = dir_at(wo, N, i, j);
      hdot[(i - 1) * nr + (j - 1)] = w.p1 * (Hd(i - 1, j - 1) + dir_at(ws, N, i, j)) +
                                     w.p2 * (Hd(i - 1, j) + gd) + w.p3 * (Hd(i, j - 1) + gd);
    }
}

// Writes, over the region, outS = gs * d s / d S and outG = gs * d s / d g
// (TAN: gs * (Hessian . W) instead). Messages from row i+1 travel in `in`,
// from the right neighbour in `right`.
template <typename T, bool HARD, bool TAN>
void reverse_linear(const PairView<T>& pv, int64_t mr, int64_t nr, const Acc<T>* hid,
                    const Acc<T>* hdot, const T* ws, const T* wo, const Seed<Acc<T>>& seed,
                    Acc<T> gs, T* outS, T* outG, Scratch<Acc<T>>& sc) {
  using A = Acc<T>;
  using Cell = CpuLinearCell<A, HARD>;
  const int64_t N = pv.N;
  const A it = seed.inv_t;
  auto H = [&](int64_t i, int64_t j) { return i == 0 || j == 0 ? A(0) : hid[(i - 1) * N + (j - 1)]; };
  auto Hd = [&](int64_t i, int64_t j) { return i == 0 || j == 0 ? A(0) : hdot[(i - 1) * nr + (j - 1)]; };
  A *in = sc.get(2, nr + 1), *out = sc.get(3, nr + 1);
  A *ind = sc.get(4, nr + 1), *outd = sc.get(5, nr + 1);
  std::fill(in, in + nr + 1, A(0));
  std::fill(ind, ind + nr + 1, A(0));
  for (int64_t i = mr; i >= 1; --i) {
    out[nr] = A(0);
    outd[nr] = A(0);
    A right = 0, rightd = 0;
    for (int64_t j = nr; j >= 1; --j) {
      const int64_t k = (i - 1) * N + (j - 1);
      const A h = hid[k], g = pv.open.at(i, j);
      const A v1 = H(i - 1, j - 1) + pv.s(i, j), v2 = H(i - 1, j) + g, v3 = H(i, j - 1) + g;
      const Weights<A> w = Cell::weights(h, v1, v2, v3);
      A e0 = A(0);
      if (seed.soft) e0 = CpuMath::exp2(h - seed.total) * seed.scale;
      else if (i == mr && j == nr) e0 = A(1);
      const A E = e0 + in[j] + right;
      const A m1 = E * w.p1, m2 = E * w.p2, m3 = E * w.p3;
      if constexpr (!TAN) {
        st(outS, k, gs * m1);
        if (outG) st(outG, k, gs * (m2 + m3));
      } else {
        const A hd = Hd(i, j), gd = dir_at(wo, N, i, j);
        const A d1 = w.p1 * (Hd(i - 1, j - 1) + dir_at(ws, N, i, j) - hd) * it;
        const A d2 = w.p2 * (Hd(i - 1, j) + gd - hd) * it;
        const A d3 = w.p3 * (Hd(i, j - 1) + gd - hd) * it;
        const A e0d = seed.soft ? e0 * (hd - seed.sdot) * it : A(0);
        const A Ed = e0d + ind[j] + rightd;
        const A md1 = Ed * w.p1 + E * d1, md2 = Ed * w.p2 + E * d2, md3 = Ed * w.p3 + E * d3;
        st(outS, k, gs * md1);
        if (outG) st(outG, k, gs * (md2 + md3));
        outd[j] += md2;
        outd[j - 1] = md1;
        rightd = md3;
      }
      out[j] += m2;
      out[j - 1] = m1;
      right = m3;
    }
    std::swap(in, out);
    std::swap(ind, outd);
  }
}

// ---------------------------------------------------------------------------
// Affine gaps: the same passes, node by node (D, U, L, A, B, C).
// ---------------------------------------------------------------------------

template <typename A>
struct AffineRow {  // derived values of one row, cols 0..nr
  A *D, *Ap, *Bp;
};

template <typename T>
struct AffineHidden {
  using A = Acc<T>;
  const A *C, *U, *L;
  int64_t N;
  A c(int64_t i, int64_t j) const { return i == 0 || j == 0 ? A(0) : C[(i - 1) * N + (j - 1)]; }
  A u(int64_t i, int64_t j) const { return i == 0 || j == 0 ? -kInf<A> : U[(i - 1) * N + (j - 1)]; }
  A l(int64_t i, int64_t j) const { return i == 0 || j == 0 ? -kInf<A> : L[(i - 1) * N + (j - 1)]; }
};

// D, A, B of row i over cols 1..nr, bit-identical to the forward's.
template <typename T, bool HARD>
void derive_affine_row(const PairView<T>& pv, const AffineHidden<T>& hv, int64_t i, int64_t nr,
                       const AffineRow<Acc<T>>& row) {
  using A = Acc<T>;
  using Aff = CpuAffineCell<A, HARD>;
  row.D[0] = -kInf<A>;
  row.Ap[0] = A(0);
  row.Bp[0] = A(0);
  for (int64_t j = 1; j <= nr; ++j) {
    if (i == 0) {
      row.D[j] = -kInf<A>;
      row.Ap[j] = row.Bp[j] = A(0);
      continue;
    }
    const A D = hv.c(i - 1, j - 1) + pv.s(i, j);
    row.D[j] = D;
    row.Ap[j] = Aff::prime(D, hv.l(i, j));
    row.Bp[j] = Aff::prime(D, hv.u(i, j));
  }
}

template <typename A>
struct AffineWeights {
  Weights<A> c;        // C node: p1 = D, p2 = U, p3 = L
  PrimeWeights<A> a;   // A node: p1 = D, p2 = L
  PrimeWeights<A> b;   // B node: p1 = D, p2 = U
  GapWeights<A> u, l;  // U and L nodes
};

// Weights of cell (i, j): `cur` is row i derived, `up` row i-1 derived.
template <typename T, bool HARD>
AffineWeights<Acc<T>> affine_weights(const PairView<T>& pv, const AffineHidden<T>& hv,
                                     const AffineRow<Acc<T>>& cur, const AffineRow<Acc<T>>& up,
                                     int64_t i, int64_t j) {
  using A = Acc<T>;
  using Lin = CpuLinearCell<A, HARD>;
  using Aff = CpuAffineCell<A, HARD>;
  const A o = pv.open.at(i, j), e = pv.ext.at(i, j);
  const A D = cur.D[j], U = hv.u(i, j), L = hv.l(i, j);
  AffineWeights<A> w;
  w.c = Lin::weights(hv.c(i, j), D, U, L);
  w.a = Aff::prime_weights(cur.Ap[j], D, L);
  w.b = Aff::prime_weights(cur.Bp[j], D, U);
  w.u = Aff::gap_weights(U, up.Ap[j] + o, hv.u(i - 1, j) + e);
  w.l = Aff::gap_weights(L, cur.Bp[j - 1] + o, hv.l(i, j - 1) + e);
  return w;
}

// Tangents of the affine nodes over the region (row stride nr): planes
// 0..4 of `tan` = Cdot, Udot, Ldot, Adot, Bdot.
template <typename A>
struct AffineTangents {
  A* t;
  int64_t nr, plane;
  A get(int k, int64_t i, int64_t j) const {
    return i == 0 || j == 0 ? A(0) : t[k * plane + (i - 1) * nr + (j - 1)];
  }
  A& at(int k, int64_t i, int64_t j) { return t[k * plane + (i - 1) * nr + (j - 1)]; }
};

template <typename T, bool HARD>
void tangent_affine(const PairView<T>& pv, const AffineHidden<T>& hv, int64_t mr, int64_t nr,
                    const T* ws, const T* wo, const T* we, AffineTangents<Acc<T>> td,
                    Scratch<Acc<T>>& sc) {
  using A = Acc<T>;
  const int64_t N = pv.N;
  AffineRow<A> cur{sc.get(6, nr + 1), sc.get(7, nr + 1), sc.get(8, nr + 1)};
  AffineRow<A> up{sc.get(9, nr + 1), sc.get(10, nr + 1), sc.get(11, nr + 1)};
  derive_affine_row<T, HARD>(pv, hv, 0, nr, up);
  for (int64_t i = 1; i <= mr; ++i) {
    derive_affine_row<T, HARD>(pv, hv, i, nr, cur);
    for (int64_t j = 1; j <= nr; ++j) {
      const AffineWeights<A> w = affine_weights<T, HARD>(pv, hv, cur, up, i, j);
      const A dO = dir_at(wo, N, i, j), dE = dir_at(we, N, i, j);
      const A Dd = td.get(0, i - 1, j - 1) + dir_at(ws, N, i, j);
      const A Ud = w.u.open * (td.get(3, i - 1, j) + dO) + w.u.extend * (td.get(1, i - 1, j) + dE);
      const A Ld = w.l.open * (td.get(4, i, j - 1) + dO) + w.l.extend * (td.get(2, i, j - 1) + dE);
      td.at(0, i, j) = w.c.p1 * Dd + w.c.p2 * Ud + w.c.p3 * Ld;
      td.at(1, i, j) = Ud;
      td.at(2, i, j) = Ld;
      td.at(3, i, j) = w.a.p1 * Dd + w.a.p2 * Ld;
      td.at(4, i, j) = w.b.p1 * Dd + w.b.p2 * Ud;
    }
    std::swap(cur, up);
  }
}

template <typename T, bool HARD, bool TAN>
void reverse_affine(const PairView<T>& pv, const AffineHidden<T>& hv, int64_t mr, int64_t nr,
                    AffineTangents<Acc<T>> td, const T* ws, const T* wo, const T* we,
                    const Seed<Acc<T>>& seed, Acc<T> gs, T* outS, T* outO, T* outE,
                    Scratch<Acc<T>>& sc) {
  using A = Acc<T>;
  const int64_t N = pv.N;
  const A it = seed.inv_t;
  AffineRow<A> cur{sc.get(6, nr + 1), sc.get(7, nr + 1), sc.get(8, nr + 1)};
  AffineRow<A> up{sc.get(9, nr + 1), sc.get(10, nr + 1), sc.get(11, nr + 1)};
  // Messages into row i from row i+1 (inX) and into row i-1 (outX):
  // to C from D[i+1,j+1], to A and to U from U[i+1,j]; plus their tangents.
  A* msg[12];
  for (int k = 0; k < 12; ++k) msg[k] = sc.get(k < 6 ? k : k + 6, nr + 1);
  A *inC = msg[0], *inA = msg[1], *inU = msg[2], *outC = msg[3], *outA = msg[4], *outU = msg[5];
  A *inCd = msg[6], *inAd = msg[7], *inUd = msg[8], *outCd = msg[9], *outAd = msg[10],
    *outUd = msg[11];
  for (A* a : {inC, inA, inU, inCd, inAd, inUd}) std::fill(a, a + nr + 1, A(0));
  derive_affine_row<T, HARD>(pv, hv, mr, nr, cur);
  derive_affine_row<T, HARD>(pv, hv, mr - 1, nr, up);
  for (int64_t i = mr; i >= 1; --i) {
    outC[nr] = outCd[nr] = A(0);
    A rB = 0, rL = 0, rBd = 0, rLd = 0;  // messages from L[i,j+1] to B and L of (i,j)
    for (int64_t j = nr; j >= 1; --j) {
      const int64_t k = (i - 1) * N + (j - 1);
      const AffineWeights<A> w = affine_weights<T, HARD>(pv, hv, cur, up, i, j);
      A e0 = A(0);
      if (seed.soft) e0 = CpuMath::exp2(hv.C[k] - seed.total) * seed.scale;
      else if (i == mr && j == nr) e0 = A(1);
      const A EC = e0 + inC[j], EA = inA[j], EB = rB;
      const A EU = inU[j] + EC * w.c.p2 + EB * w.b.p2;
      const A EL = rL + EC * w.c.p3 + EA * w.a.p2;
      const A ED = EC * w.c.p1 + EA * w.a.p1 + EB * w.b.p1;
      if constexpr (!TAN) {
        st(outS, k, gs * ED);
        if (outO) st(outO, k, gs * (EU * w.u.open + EL * w.l.open));
        if (outE) st(outE, k, gs * (EU * w.u.extend + EL * w.l.extend));
      } else {
        const A dO = dir_at(wo, N, i, j), dE = dir_at(we, N, i, j);
        const A Cd = td.get(0, i, j), Ud = td.get(1, i, j), Ld = td.get(2, i, j);
        const A Ad = td.get(3, i, j), Bd = td.get(4, i, j);
        const A Dd = td.get(0, i - 1, j - 1) + dir_at(ws, N, i, j);
        const A c1 = w.c.p1 * (Dd - Cd) * it, c2 = w.c.p2 * (Ud - Cd) * it,
                c3 = w.c.p3 * (Ld - Cd) * it;
        const A a1 = w.a.p1 * (Dd - Ad) * it, a2 = w.a.p2 * (Ld - Ad) * it;
        const A b1 = w.b.p1 * (Dd - Bd) * it, b2 = w.b.p2 * (Ud - Bd) * it;
        const A uo = w.u.open * (td.get(3, i - 1, j) + dO - Ud) * it;
        const A ue = w.u.extend * (td.get(1, i - 1, j) + dE - Ud) * it;
        const A lo = w.l.open * (td.get(4, i, j - 1) + dO - Ld) * it;
        const A le = w.l.extend * (td.get(2, i, j - 1) + dE - Ld) * it;
        const A e0d = seed.soft ? e0 * (Cd - seed.sdot) * it : A(0);
        const A ECd = e0d + inCd[j], EAd = inAd[j], EBd = rBd;
        const A EUd = inUd[j] + ECd * w.c.p2 + EC * c2 + EBd * w.b.p2 + EB * b2;
        const A ELd = rLd + ECd * w.c.p3 + EC * c3 + EAd * w.a.p2 + EA * a2;
        const A EDd = ECd * w.c.p1 + EC * c1 + EAd * w.a.p1 + EA * a1 + EBd * w.b.p1 + EB * b1;
        const A mUo = EUd * w.u.open + EU * uo, mUe = EUd * w.u.extend + EU * ue;
        const A mLo = ELd * w.l.open + EL * lo, mLe = ELd * w.l.extend + EL * le;
        st(outS, k, gs * EDd);
        if (outO) st(outO, k, gs * (mUo + mLo));
        if (outE) st(outE, k, gs * (mUe + mLe));
        outCd[j - 1] = EDd;
        outAd[j] = mUo;
        outUd[j] = mUe;
        rBd = mLo;
        rLd = mLe;
      }
      outC[j - 1] = ED;
      outA[j] = EU * w.u.open;
      outU[j] = EU * w.u.extend;
      rB = EL * w.l.open;
      rL = EL * w.l.extend;
    }
    std::swap(inC, outC);
    std::swap(inA, outA);
    std::swap(inU, outU);
    std::swap(inCd, outCd);
    std::swap(inAd, outAd);
    std::swap(inUd, outUd);
    std::swap(cur, up);
    if (i >= 2) derive_affine_row<T, HARD>(pv, hv, i - 2, nr, up);
  }
}

// ---------------------------------------------------------------------------
// Backward and double backward drivers.
// ---------------------------------------------------------------------------

template <typename T>
void backward_impl(const Problem& p, const BackwardArgs& args) {
  using A = Acc<T>;
  const Setup<T> su(p);
  const A* hidden = static_cast<const A*>(args.state.hidden);
  const A* total = static_cast<const A*>(args.state.total);
  const T* grad_score = static_cast<const T*>(args.grad_score);
  T* gS = static_cast<T*>(args.grad_scores);
  T* gO = static_cast<T*>(args.grad_gap_open);
  T* gE = p.affine ? static_cast<T*>(args.grad_gap_extend) : nullptr;
  parallel_for<Scratch<A>>(
      p.batch, double(p.batch) * su.MN * su.planes, [&](int64_t b, Scratch<A>& sc) {
        T* oS = gS + b * su.MN;
        T* oO = gO ? gO + b * su.MN : nullptr;
        T* oE = gE ? gE + b * su.MN : nullptr;
        int64_t m = 0, n = 0, mr = 0, nr = 0;
        const A* hid = hidden + b * su.planes * su.MN;
        if (!su.extents(b, m, n) || !region_of(su, args.state, b, m, n, hid, mr, nr)) {
          for (T* o : {oS, oO, oE}) fill_outside(o, su.M, su.N, 0, 0, quiet_nan<A>());
          return;
        }
        for (T* o : {oS, oO, oE}) fill_outside(o, su.M, su.N, mr, nr, A(0));
        if (mr == 0 || nr == 0) return;
        const PairView<T> pv = su.pair(b);
        Seed<A> seed;
        seed.soft = su.soft_reduction;
        seed.total = PairTotal<A>::load(total, b).value();
        if (seed.soft) seed.scale = seed_scale(hid, su.N, m, n, seed.total);
        const A gs = ld(grad_score, b);
        if (!p.affine) {
          if (su.hard)
            reverse_linear<T, true, false>(pv, mr, nr, hid, nullptr, nullptr, nullptr, seed, gs, oS, oO, sc);
          else
            reverse_linear<T, false, false>(pv, mr, nr, hid, nullptr, nullptr, nullptr, seed, gs, oS, oO, sc);
        } else {
          const AffineHidden<T> hv{hid, hid + su.MN, hid + 2 * su.MN, su.N};
          const AffineTangents<A> none{nullptr, 0, 0};
          if (su.hard)
            reverse_affine<T, true, false>(pv, hv, mr, nr, none, nullptr, nullptr, nullptr, seed, gs, oS, oO, oE, sc);
          else
            reverse_affine<T, false, false>(pv, hv, mr, nr, none, nullptr, nullptr, nullptr, seed, gs, oS, oO, oE, sc);
        }
      });
}

template <typename T>
void double_backward_impl(const Problem& p, const DoubleBackwardArgs& args) {
  using A = Acc<T>;
  const Setup<T> su(p);
  const A* hidden = static_cast<const A*>(args.state.hidden);
  const A* total = static_cast<const A*>(args.state.total);
  const T* grad_score = static_cast<const T*>(args.grad_score);
  const T* dS = static_cast<const T*>(args.dir_scores);
  const T* dO = static_cast<const T*>(args.dir_gap_open);
  const T* dE = p.affine ? static_cast<const T*>(args.dir_gap_extend) : nullptr;
  T* ggs = static_cast<T*>(args.grad_grad_score);
  T* hS = static_cast<T*>(args.hvp_scores);
  T* hO = static_cast<T*>(args.hvp_gap_open);
  T* hE = p.affine ? static_cast<T*>(args.hvp_gap_extend) : nullptr;
  parallel_for<Scratch<A>>(
      p.batch, 2.0 * p.batch * su.MN * su.planes, [&](int64_t b, Scratch<A>& sc) {
        T* oS = hS + b * su.MN;
        T* oO = hO ? hO + b * su.MN : nullptr;
        T* oE = hE ? hE + b * su.MN : nullptr;
        const T* ws = dS ? dS + b * su.MN : nullptr;
        const T* wo = dO ? dO + b * su.MN : nullptr;
        const T* we = dE ? dE + b * su.MN : nullptr;
        int64_t m = 0, n = 0, mr = 0, nr = 0;
        const A* hid = hidden + b * su.planes * su.MN;
        if (!su.extents(b, m, n) || !region_of(su, args.state, b, m, n, hid, mr, nr)) {
          st(ggs, b, quiet_nan<A>());
          for (T* o : {oS, oO, oE}) fill_outside(o, su.M, su.N, 0, 0, quiet_nan<A>());
          return;
        }
        // The Hessian is zero for T = 0: only <W, A> is needed there.
        const int64_t keep_r = su.hard ? 0 : mr, keep_c = su.hard ? 0 : nr;
        for (T* o : {oS, oO, oE}) fill_outside(o, su.M, su.N, keep_r, keep_c, A(0));
        if (mr == 0 || nr == 0) {
          st(ggs, b, A(0));
          return;
        }
        const PairView<T> pv = su.pair(b);
        const A gs = ld(grad_score, b);
        Seed<A> seed;
        seed.soft = su.soft_reduction;
        seed.total = PairTotal<A>::load(total, b).value();
        if (seed.soft) seed.scale = seed_scale(hid, su.N, m, n, seed.total);
        seed.inv_t = su.inv_t;
        const int64_t cells = mr * nr;
        A sdot = A(0);
        if (!p.affine) {
          A* hdot = sc.get(20, cells);
          if (su.hard) tangent_linear<T, true>(pv, mr, nr, hid, ws, wo, hdot);
          else tangent_linear<T, false>(pv, mr, nr, hid, ws, wo, hdot);
          if (seed.soft) {
            for (int64_t i = 1; i <= mr; ++i)
              for (int64_t j = 1; j <= nr; ++j)
                sdot += CpuMath::exp2(hid[(i - 1) * su.N + (j - 1)] - seed.total) * seed.scale *
                        hdot[(i - 1) * nr + (j - 1)];
          } else {
            sdot = hdot[cells - 1];
          }
          seed.sdot = sdot;
          if (!su.hard)
            reverse_linear<T, false, true>(pv, mr, nr, hid, hdot, ws, wo, seed, gs, oS, oO, sc);
        } else {
          const AffineHidden<T> hv{hid, hid + su.MN, hid + 2 * su.MN, su.N};
          AffineTangents<A> td{sc.get(20, 5 * cells), nr, cells};
          if (su.hard) tangent_affine<T, true>(pv, hv, mr, nr, ws, wo, we, td, sc);
          else tangent_affine<T, false>(pv, hv, mr, nr, ws, wo, we, td, sc);
          if (seed.soft) {
            for (int64_t i = 1; i <= mr; ++i)
              for (int64_t j = 1; j <= nr; ++j)
                sdot += CpuMath::exp2(hv.C[(i - 1) * su.N + (j - 1)] - seed.total) * seed.scale *
                        td.get(0, i, j);
          } else {
            sdot = td.get(0, mr, nr);
          }
          seed.sdot = sdot;
          if (!su.hard)
            reverse_affine<T, false, true>(pv, hv, mr, nr, td, ws, wo, we, seed, gs, oS, oO, oE, sc);
        }
        st(ggs, b, sdot);
      });
}

}  // namespace

void forward_cpu(const Problem& problem, const ForwardOutputs& out) {
  switch (problem.dtype) {
    case Dtype::Float16: return forward_impl<Half>(problem, out);
    case Dtype::BFloat16: return forward_impl<BFloat16>(problem, out);
    case Dtype::Float32: return forward_impl<float>(problem, out);
    case Dtype::Float64: return forward_impl<double>(problem, out);
  }
}

void backward_cpu(const Problem& problem, const BackwardArgs& args) {
  switch (problem.dtype) {
    case Dtype::Float16: return backward_impl<Half>(problem, args);
    case Dtype::BFloat16: return backward_impl<BFloat16>(problem, args);
    case Dtype::Float32: return backward_impl<float>(problem, args);
    case Dtype::Float64: return backward_impl<double>(problem, args);
  }
}

void double_backward_cpu(const Problem& problem, const DoubleBackwardArgs& args) {
  switch (problem.dtype) {
    case Dtype::Float16: return double_backward_impl<Half>(problem, args);
    case Dtype::BFloat16: return double_backward_impl<BFloat16>(problem, args);
    case Dtype::Float32: return double_backward_impl<float>(problem, args);
    case Dtype::Float64: return double_backward_impl<double>(problem, args);
  }
}

}  // namespace softsw
