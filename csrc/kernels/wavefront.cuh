// The wavefront skeleton shared by the CUDA passes.
//
// Work decomposition. A pair's DP rows are cut into bands of 32*R rows; a band
// is one warp's unit of work, and lane l owns the R consecutive rows
// l*R .. l*R+R-1 of it. At step t the lane's row k handles column
// c = t - l*R - k, so all 32*R cells of a step lie on one anti-diagonal
// (r + c = t, r the row within the band): the R cells of a thread are
// independent (instruction-level parallelism), and a lane's first row takes
// the cell above from lane l-1 with one warp shuffle -- no __syncthreads and
// no shared memory on the hot path, hence no length limit.
//
// Bands hand their boundary row to the next band through global memory, one
// tagged word per column (TaggedEdge: no fences on the hot path), so
// consecutive bands of one pair run concurrently on different warps and SMs
// (a single long pair fills the GPU). Warps are persistent and take units
// from a ticket counter in order (band_of_ticket: a pair's bands in rounds,
// top band first; bottom band first for the reverse passes), so a unit only
// ever waits on a unit with an earlier ticket, which a running warp holds: no
// deadlock, whatever the occupancy.
//
// The saved state of the forward ("hidden") is stored band by band in
// anti-diagonal order: cell (r, c) of a band with `rows` rows sits at
// ((r + c) mod n) * rows + r. A step of the warp therefore writes (and the
// backward reads) one contiguous run of 32*R values, and the map is a
// bijection onto rows * n slots (no padding).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "probability.h"
#include "problem.h"
#include "recurrence.h"

namespace softsw {
namespace cuda {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpsPerBlock = 4;

// f(std::integral_constant<int, k>) for k = N - 1 down to 0: a lane's rows in
// the order a step updates them (row k reads row k - 1's value of the step
// before), each index a constant whatever nvcc's unroller decides (with a
// plain loop it kept two rows' arrays in local memory).
template <int N, typename F>
__device__ __forceinline__ void for_rows_down(F&& f) {
  [&]<int... K>(std::integer_sequence<int, K...>) {
    (f(std::integral_constant<int, N - 1 - K>{}), ...);
  }(std::make_integer_sequence<int, N>{});
}

// --------------------------------------------------------------------------
// Element access
// --------------------------------------------------------------------------

template <typename T> __device__ __forceinline__ float to_float(T x);
template <> __device__ __forceinline__ float to_float<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename A, typename T> __device__ __forceinline__ A load_as(const T* p) {
  return A(to_float<T>(__ldg(p)));
}
template <> __device__ __forceinline__ double load_as<double, double>(const double* p) {
  return __ldg(p);
}

template <typename T> __device__ __forceinline__ T from_acc(float x);
template <> __device__ __forceinline__ float from_acc<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_acc<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <typename T, typename A> __device__ __forceinline__ T store_as(A x) {
  return from_acc<T>(static_cast<float>(x));
}
template <> __device__ __forceinline__ double store_as<double, double>(double x) { return x; }

// Prefetching: a value loaded ahead of its use is kept as loaded (raw) and
// converted when it is used. Converting at once would make the warp wait for
// the load right there, and the prefetch would hide nothing.
template <typename T> __device__ __forceinline__ T load_raw(const T* p) { return __ldg(p); }
template <typename T> __device__ __forceinline__ T raw_zero() {
  if constexpr (std::is_same_v<T, double>) return 0.0;
  else return from_acc<T>(0.0f);
}
template <typename A, typename T> __device__ __forceinline__ A to_acc(T x) {
  if constexpr (std::is_same_v<T, double>) return x;
  else return A(to_float<T>(x));
}

// A value times the kernel-unit scale, rounded on its own: never fused into an
// FMA with what it is then added to. Every pass and every work split then
// computes a cell's candidates with the same bits (the backward passes
// recompute them; an inference forward gives the training forward's score).
template <typename A> __device__ __forceinline__ A scaled(A x, A scale) {
  if constexpr (sizeof(A) == 8) return __dmul_rn(x, scale);
  else return __fmul_rn(x, scale);
}

// Four consecutive elements (16-byte aligned for float, 8 for half types,
// 32 for double) as loaded, and converted to the accumulate type.
template <typename T>
struct Raw4 {
  T v[4];
};
template <typename T>
__device__ __forceinline__ Raw4<T> load_raw4(const T* p) {
  Raw4<T> r;
  if constexpr (sizeof(T) == 8) {
    const double2 x = __ldg(reinterpret_cast<const double2*>(p));
    const double2 y = __ldg(reinterpret_cast<const double2*>(p) + 1);
    r.v[0] = x.x; r.v[1] = x.y; r.v[2] = y.x; r.v[3] = y.y;
  } else if constexpr (sizeof(T) == 4) {
    const float4 x = __ldg(reinterpret_cast<const float4*>(p));
    r.v[0] = x.x; r.v[1] = x.y; r.v[2] = x.z; r.v[3] = x.w;
  } else {
    const uint2 raw = __ldg(reinterpret_cast<const uint2*>(p));
    const T* h = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) r.v[i] = h[i];
  }
  return r;
}
template <typename T>
__device__ __forceinline__ Raw4<T> raw4_zero() {
  Raw4<T> r;
#pragma unroll
  for (int i = 0; i < 4; ++i) r.v[i] = raw_zero<T>();
  return r;
}
template <typename T, typename A>
__device__ __forceinline__ void convert4(const Raw4<T>& r, A scale, A (&out)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] = scaled(to_acc<A>(r.v[i]), scale);
}

// Four consecutive elements, converted to / from the accumulate type.
template <typename T, typename A>
__device__ __forceinline__ void load4(const T* p, A scale, A (&out)[4]) {
  if constexpr (sizeof(T) == 8) {
    const double2 x = __ldg(reinterpret_cast<const double2*>(p));
    const double2 y = __ldg(reinterpret_cast<const double2*>(p) + 1);
    out[0] = scaled(A(x.x), scale); out[1] = scaled(A(x.y), scale);
    out[2] = scaled(A(y.x), scale); out[3] = scaled(A(y.y), scale);
  } else if constexpr (sizeof(T) == 4) {
    const float4 x = __ldg(reinterpret_cast<const float4*>(p));
    out[0] = scaled(A(x.x), scale); out[1] = scaled(A(x.y), scale);
    out[2] = scaled(A(x.z), scale); out[3] = scaled(A(x.w), scale);
  } else {
    const uint2 raw = __ldg(reinterpret_cast<const uint2*>(p));
    const T* h = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = scaled(A(to_float<T>(h[i])), scale);
  }
}

template <typename T, typename A>
__device__ __forceinline__ void store4(T* p, const A (&v)[4]) {
  if constexpr (sizeof(T) == 8) {
    reinterpret_cast<double2*>(p)[0] = make_double2(v[0], v[1]);
    reinterpret_cast<double2*>(p)[1] = make_double2(v[2], v[3]);
  } else if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    uint2 raw;
    T* h = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = store_as<T>(v[i]);
    *reinterpret_cast<uint2*>(p) = raw;
  }
}

// A gap score, constant or a strided (B, M, N) tensor, in kernel units.
// Kernels that know at compile time that the gap is a constant (the common
// case, a Python float) read it as at<false>: no load and no index arithmetic
// on the cell's critical path.
template <typename T, typename A>
struct GapReader {
  const T* data;
  int64_t s0, s1, s2;
  A value;   // constant, already scaled
  A scale;   // kernel units per caller unit
  template <bool kMayBeTensor = true>
  __device__ __forceinline__ A at(int64_t b, int64_t r, int64_t c) const {
    if constexpr (!kMayBeTensor) return value;
    return data ? scaled(load_as<A>(data + b * s0 + r * s1 + c * s2), scale) : value;
  }
};

// --------------------------------------------------------------------------
// Problem geometry
// --------------------------------------------------------------------------

// Hard (max-plus) exactly when the CPU kernels run hard: T = 0, or a
// temperature so small that 2^20 / (T ln 2) overflows the accumulate type
// (below it softmax_T is the max to rounding, and scores in kernel units
// would overflow).
inline bool runs_hard(const Problem& p) {
  const double t = p.temperature;
  if (!(t > 0.0)) return true;
  const double scaled = 1048576.0 / (t * kLn2);
  return accumulates_in_double(p.dtype) ? !std::isfinite(scaled)
                                        : !std::isfinite(static_cast<float>(scaled));
}

// Kernel units: soft mode pre-scales scores by 1 / (T ln 2) (recurrence.h).
inline double kernel_scale(const Problem& p) {
  return runs_hard(p) ? 1.0 : 1.0 / (p.temperature * kLn2);
}

// Whether environment variable `name` is exactly "0": how the switches that
// turn a kernel choice off for benchmarks of it are read (each caller keeps
// the answer in a static, read once).
inline bool env_is_zero(const char* name) {
  const char* e = std::getenv(name);
  return e && e[0] == '0' && e[1] == 0;
}

// Whether a gap tensor whose columns are contiguous is staged through shared
// memory as the scores are (the probability-domain forward, the backward's
// staged reverse pass), instead of read cell by cell. SOFTSW_STAGED_GAP=0
// reads every gap tensor cell by cell: for benchmarks of the staging in one
// build, and the emulation's check of the unstaged reads.
inline bool stages_gap_tensors() {
  static const bool on = !env_is_zero("SOFTSW_STAGED_GAP");
  return on;
}

// Whether the forward runs in the probability domain (forward_probability.cu):
// T > 0; linear gaps, constant within ProbabilityRange's bound (in kernel
// units, as gap_reader computes it) or a tensor (the kernel holds each cell's
// gap to the bound); affine gaps at inference, constant within the bound (an
// affine training forward keeps the log-domain state its passes read).
// SOFTSW_PROBABILITY_AFFINE=0 runs the affine inference in the log domain
// (forward_wavefront with AffineRow): for benchmarks of the choice in one
// build, and the emulation's check of that row with constant gaps.
inline bool runs_probability_forward(const Problem& p) {
  if (runs_hard(p) || (p.affine && (p.keeps_state || p.has_gap_tensor()))) return false;
  static const bool affine_on = !env_is_zero("SOFTSW_PROBABILITY_AFFINE");
  if (p.affine && !affine_on) return false;
  if (p.gap_open.data) return true;
  const double scale = kernel_scale(p);
  auto in_range = [&](double gap) {
    if (accumulates_in_double(p.dtype)) return ProbabilityRange<double>::gap_ok(gap * scale);
    return ProbabilityRange<float>::gap_ok(float(gap * double(float(scale))));
  };
  return in_range(p.gap_open.value) && (!p.affine || in_range(p.gap_extend.value));
}

// Rows per lane of a tall band: 4, but 2 for affine gaps in double (the
// affine backward keeps ~2.5x the linear state per row; 4 rows of doubles spill).
template <typename A, bool AFFINE>
constexpr int kTallRows = AFFINE && sizeof(A) == 8 ? 2 : 4;

// Rows per lane of the probability-domain forward without state: two in
// float, one in double (two staging slots of 64 rows of doubles would leave
// one block per SM); SOFTSW_PROBABILITY_ROWS=1 forces one in float (for
// benchmarks of the choice). More rows share the step's per-lane work
// (shuffles, band edges, the group check and renormalisation) among more
// cells: in the unchecked chunks about 25 instructions a cell at one row, 18
// at two (sm_90 SASS); and a tall pair has fewer bands. The staging grows
// with the rows (3 blocks per SM at two rows). Measured on the H200 (fp32,
// 2026-12-05): two rows 7-18 % faster than one at 128 to 16384 rows; four
// (14 instructions a cell, one block per SM) slower than one, so not built.
// A forward with state runs probability_state_rows.
inline int probability_inference_rows(const Problem& p) {
  static const int rows = [] {
    const char* e = std::getenv("SOFTSW_PROBABILITY_ROWS");
    return e && e[0] == '1' && e[1] == 0 ? 1 : 2;
  }();
  return accumulates_in_double(p.dtype) ? 1 : rows;
}

// Rows per lane of the probability-domain forward with state (linear gaps, a
// constant gap): one. Two in float where SOFTSW_STATE_ROWS=2 asks for them
// (for benchmarks of the choice, and the emulation's check of them): unlike
// inference, the forward with state ran slower at two rows on the H100 (fp32,
// soft, 2026-12-07: 0.185 / 0.503 / 1.840 ms against 0.156 / 0.441 / 1.620 at
// 1024x128^2, 256x512^2, 8x4096^2; 3 blocks an SM against 5, and a log2 and a
// store a cell besides the exp2). The state keeps the band layout of 32-row
// bands whatever the forward runs (rows_per_thread counts the passes over it
// in those): a warp of two rows a lane computes two of those bands, lanes
// 0-15 the first, 16-31 the second, and stores each in its layout
// (forward_probability.cu).
inline int probability_state_rows(const Problem& p) {
  static const bool one = [] {
    const char* e = std::getenv("SOFTSW_STATE_ROWS");
    return !(e && e[0] == '2' && e[1] == 0);
  }();
  return accumulates_in_double(p.dtype) || one || p.affine || p.has_gap_tensor() ? 1 : 2;
}

// Rows per thread: 1 or the tall count. A band takes n + 32R - 1 steps for n
// columns, so tall bands waste the fill and drain on short targets; on long
// ones several rows per thread give independent cells per step (hiding the
// cell's latency) and 16-byte loads and stores.
// SOFTSW_ROWS_PER_LANE=1 or 4 forces either for linear gaps (for benchmarks of
// the choice).
inline int rows_per_thread(const Problem& p) {
  // Measured on the H200: one row per lane (4x the warps) is faster for every
  // log-domain inference shape, linear or affine. A forward in the
  // probability domain with state counts one row here (every pass over the
  // state follows the layout of 32-row bands, whatever rows the forward runs:
  // probability_state_rows) and probability_inference_rows without. Affine
  // gaps run one: their five nodes at two rows (162 registers, 3 blocks an SM)
  // measured slower than one row (128, 4 blocks) on the H100 (fp32, 2026-12-07:
  // 175 against 196 G cells/s at 256x512^2, 142 against 149 at 64x1024^2, the
  // same at 1024x128^2).
  if (runs_probability_forward(p))
    return p.keeps_state || p.affine || p.has_gap_tensor() ? 1 : probability_inference_rows(p);
  if (!p.keeps_state) return 1;
  if (p.affine) {
    if (p.rows <= 32) return 1;
    return accumulates_in_double(p.dtype) ? kTallRows<double, true> : kTallRows<float, true>;
  }
  static const int forced = [] {
    const char* e = std::getenv("SOFTSW_ROWS_PER_LANE");
    return e && (e[0] == '1' || e[0] == '4') && e[1] == 0 ? e[0] - '0' : 0;
  }();
  if (forced) return forced;
  // With H stored, 4 rows per lane win from 512 columns on.
  return p.rows <= 32 || p.cols < 256 ? 1 : 4;
}

// Whether 16-byte vector access lines up for every pair and band: rows of
// `scores` start on a multiple of 4 elements, as does each band of `hidden`.
inline bool vector_access_ok(const Problem& p, const void* scores) {
  const uintptr_t align = p.dtype == Dtype::Float64 ? 16 : p.dtype == Dtype::Float32 ? 16 : 8;
  return p.cols % 4 == 0 && reinterpret_cast<uintptr_t>(scores) % align == 0;
}

// Bands of `band_rows` rows a pair of `rows` rows has (one for an empty pair).
inline int64_t bands_of(int64_t rows, int64_t band_rows) {
  return rows == 0 ? 1 : (rows + band_rows - 1) / band_rows;
}

inline int64_t band_count(const Problem& p) { return bands_of(p.rows, int64_t(kWarp) * rows_per_thread(p)); }

// The pair's true lengths; `valid` is false for out-of-range lengths (only
// possible when the Python-side check was skipped, e.g. under graph capture).
struct PairLengths {
  int64_t m, n;
  bool valid;
};

__device__ __forceinline__ PairLengths pair_lengths(const int64_t* lengths, int64_t b,
                                                    int64_t rows, int64_t cols) {
  if (!lengths) return {rows, cols, true};
  const int64_t m = lengths[2 * b], n = lengths[2 * b + 1];
  const bool ok = m >= 0 && m <= rows && n >= 0 && n <= cols;
  return {ok ? m : 0, ok ? n : 0, ok};
}

// --------------------------------------------------------------------------
// Workspace: [ticket (16 B)] [flags: units x int32] [partials: units x 16 B]
//            [edges: units x cols x edge_values x 2 accumulate types]
// --------------------------------------------------------------------------

struct Partial {
  double a;       // max (MaxArg.best) or log2-sum max (SoftTotal.max)
  double b;       // SoftTotal.sum, or the argmax index (as a double-sized slot)
};

struct Workspace {
  unsigned long long* ticket;
  int* flags;
  Partial* partials;
  void* edges;
};

inline int64_t align16(int64_t x) { return (x + 15) / 16 * 16; }

inline Workspace carve_workspace(const Problem& p, void* base) {
  const int64_t units = p.batch * band_count(p);
  char* at = static_cast<char*>(base);
  Workspace w;
  w.ticket = reinterpret_cast<unsigned long long*>(at);
  at += 16;
  w.flags = reinterpret_cast<int*>(at);
  at += align16(units * int64_t(sizeof(int)));
  w.partials = reinterpret_cast<Partial*>(at);
  at += align16(units * int64_t(sizeof(Partial)));
  w.edges = at;
  return w;
}

// Values a band hands the next per column: H, or the affine C, A and U. The
// probability-domain forward hands Z as a mantissa and an exponent (affine:
// A and U, four), the linear reverse tangent pass E and Edot: two.
inline int64_t edge_values(const Problem& p) { return p.affine ? 4 : 2; }

inline int64_t workspace_bytes(const Problem& p) {
  const int64_t units = p.batch * band_count(p);
  const int64_t acc = accumulates_in_double(p.dtype) ? 8 : 4;
  // Edges hold tagged words (TaggedEdge): twice the accumulate type per value.
  return 16 + align16(units * int64_t(sizeof(int))) + align16(units * int64_t(sizeof(Partial))) +
         align16(units * p.cols * edge_values(p) * acc * 2);
}

// Double backward: the workspace above, then a second edge buffer, the
// per-pair soft-seed tangent sdot, and the tangent state hdot in the layout
// of `hidden`:
//   [workspace_bytes(p)] [edges_dot] [sdot: batch x acc] [hdot: hdot_elements x acc]
// edges_dot carries the tangent pass's band edges (tagged words: H and Hdot;
// affine C, Cdot, A, U, Adot, Udot), then, for affine gaps, the reverse
// pass's tangent contributions (Cdot, Adot, Udot; cleared in between). hdot
// is Hdot, or the affine planes Cdot, Udot, Ldot, Adot, Bdot.
struct DoubleBackwardWorkspace {
  Workspace ws;     // ticket, flags, partials, edges: as for the other passes
  void* edges_dot;
  void* sdot;
  void* hdot;
};

inline int64_t edges_dot_bytes(const Problem& p) {
  const int64_t units = p.batch * band_count(p);
  const int64_t acc = accumulates_in_double(p.dtype) ? 8 : 4;
  // Tagged values per column (two words of 4 bytes each of acc): the affine
  // tangent row's 6; the linear tangent's (m, e, Hdot) in the probability
  // domain (LinearTangentRow: 2), and the reverse pass's 2.
  return align16(units * p.cols * acc * 2 * (p.affine ? 6 : 3));
}

inline int64_t hdot_elements(const Problem& p) {
  return (p.affine ? 5 : 1) * p.batch * p.rows * p.cols;
}

inline int64_t double_backward_workspace_bytes(const Problem& p) {
  const int64_t acc = accumulates_in_double(p.dtype) ? 8 : 4;
  return workspace_bytes(p) + edges_dot_bytes(p) + align16(p.batch * acc) +
         align16(hdot_elements(p) * acc);
}

inline DoubleBackwardWorkspace carve_double_backward_workspace(const Problem& p, void* base) {
  const int64_t acc = accumulates_in_double(p.dtype) ? 8 : 4;
  DoubleBackwardWorkspace w;
  w.ws = carve_workspace(p, base);
  char* at = static_cast<char*>(base) + workspace_bytes(p);
  w.edges_dot = at;
  at += edges_dot_bytes(p);
  w.sdot = at;
  at += align16(p.batch * acc);
  w.hdot = at;
  return w;
}

// Tickets and flags start at zero for every pass.
inline void clear_sync_state(const Problem& p, const Workspace& w, cudaStream_t stream) {
  const int64_t units = p.batch * band_count(p);
  const int64_t bytes = 16 + align16(units * int64_t(sizeof(int)));
  cudaMemsetAsync(w.ticket, 0, bytes, stream);
}

// The passes that hand edges as tagged words clear them too: one memset of
// the whole workspace (one launch matters on small problems).
inline void clear_workspace(const Problem& p, const Workspace& w, cudaStream_t stream) {
  cudaMemsetAsync(w.ticket, 0, workspace_bytes(p), stream);
}

// A forward keeps M*N cells of `hidden` per pair (per plane) but writes only
// a short pair's m*n: the rest is zeroed, not left as stale memory.
inline void clear_hidden_past_short_pairs(const Problem& p, void* hidden, cudaStream_t stream) {
  if (!hidden || !p.lengths) return;
  const int64_t acc = accumulates_in_double(p.dtype) ? 8 : 4;
  cudaMemsetAsync(hidden, 0, hidden_elements(p.batch, p.rows, p.cols, p.affine) * acc, stream);
}

// --------------------------------------------------------------------------
// Synchronisation between warps
// --------------------------------------------------------------------------

// The accesses of the protocols between warps (below), in one place: relaxed
// 8-byte words, and acquire / release flags. Under SOFTSW_WARP_EMULATION
// (dev/emulate: the kernels' logic run on the CPU, every lane a fiber of one
// thread) they are plain accesses.
__device__ __forceinline__ unsigned long long load_relaxed(const unsigned long long* p) {
#if defined(SOFTSW_WARP_EMULATION)
  return *static_cast<const volatile unsigned long long*>(p);
#else
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
#endif
}
__device__ __forceinline__ void store_relaxed(unsigned long long* p, unsigned long long v) {
#if defined(SOFTSW_WARP_EMULATION)
  *static_cast<volatile unsigned long long*>(p) = v;
#else
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#endif
}
__device__ __forceinline__ int load_acquire(const int* flag) {
#if defined(SOFTSW_WARP_EMULATION)
  return *static_cast<const volatile int*>(flag);
#else
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
  return v;
#endif
}
__device__ __forceinline__ void store_release(int* flag, int v) {
#if defined(SOFTSW_WARP_EMULATION)
  *static_cast<volatile int*>(flag) = v;
#else
  asm volatile("st.release.gpu.global.s32 [%0], %1;" ::"l"(flag), "r"(v) : "memory");
#endif
}

// A boundary value handed between bands, column by column, with no fences:
// each 32-bit half of the value travels in one 8-byte word together with a
// tag (column + 1), stored and loaded as a single-copy-atomic relaxed access.
// A reader spins until the tags match, so it never needs an acquire (which
// on this hardware invalidates the whole L1, where the scores are cached).
//
// K tagged words of one column, loaded together (one round trip) and checked
// together. A load issued a chunk before the value is needed hides the round
// trip whenever the neighbouring band is that far ahead already.
template <int K>
struct TaggedWords {
  unsigned long long word[K] = {};  // tag 0: never ready (tags are column + 1)

  __device__ static TaggedWords load(const unsigned long long* slot) {
    TaggedWords w;
#pragma unroll
    for (int k = 0; k < K; ++k) w.word[k] = load_relaxed(slot + k);
    return w;
  }
  __device__ bool ready(int column) const {
    const unsigned long long tag = static_cast<unsigned long long>(column + 1);
    bool ok = true;
#pragma unroll
    for (int k = 0; k < K; ++k) ok &= (word[k] >> 32) == tag;
    return ok;
  }
  // `column`'s words at `slot`: these if they were published when loaded,
  // else polled until they are. A miss is loaded again at once, with no sleep
  // before the first reload: a miss is often no early load at all, not a late
  // band.
  __device__ TaggedWords settle(const unsigned long long* slot, int column) const {
    if (ready(column)) return *this;
    for (;;) {
      const TaggedWords w = load(slot);
      if (w.ready(column)) return w;
      __nanosleep(32);
    }
  }
  __device__ uint32_t bits(int k) const { return static_cast<uint32_t>(word[k]); }
};

// The value of type A whose words start at word `first` of `w` (a column's
// tagged words may hold several values, EdgeChunk's layout).
template <typename A, int K>
__device__ __forceinline__ A tagged_value(const TaggedWords<K>& w, int first) {
  constexpr int kWords = sizeof(A) / 4;
  uint32_t bits[kWords];
#pragma unroll
  for (int k = 0; k < kWords; ++k) bits[k] = w.bits(first + k);
  A value;
  memcpy(&value, bits, sizeof(A));
  return value;
}

template <typename A>
struct TaggedEdge {
  static constexpr int kWords = sizeof(A) / 4;
  using Words = TaggedWords<kWords>;

  __device__ static void put(unsigned long long* slot, A value, int column) {
    const unsigned long long tag = static_cast<unsigned long long>(column + 1) << 32;
    uint32_t bits[kWords];
    memcpy(bits, &value, sizeof(A));
#pragma unroll
    for (int w = 0; w < kWords; ++w) store_relaxed(slot + w, tag | bits[w]);
  }

  // `early`: the slot's words loaded before (a chunk ahead), or none.
  __device__ static A get(const unsigned long long* slot, int column, Words early) {
    return tagged_value<A>(early.settle(slot, column), 0);
  }
  // Polled from the start.
  __device__ static A get(const unsigned long long* slot, int column) {
    return get(slot, column, Words{});
  }
};

// A band's edge row handed to the neighbouring band 32 columns at a time:
// lane l holds column 32k + l of the current chunk (one shuffle per value and
// step), and the warp stores a finished chunk with one coalesced tagged store,
// instead of one lane storing alone (divergent) on every step. The edge holds
// N tagged values per column.
template <typename A, int N>
struct EdgeChunk {
  A held[N];

  __device__ EdgeChunk() {
#pragma unroll
    for (int i = 0; i < N; ++i) held[i] = A(0);
  }
  // Value i of column `col` (warp-uniform; any value outside the pair), as
  // lane `src` has it.
  __device__ void collect(int i, A value, int src, int col, int lane) {
    const A v = __shfl_sync(kFullMask, value, src);
    held[i] = lane == (col & (kWarp - 1)) ? v : held[i];
  }
  // Columns first..last (inclusive, inside one aligned chunk) to `edge`.
  __device__ void store(unsigned long long* edge, int first, int last, int lane) const {
    const int col = (first & ~(kWarp - 1)) + lane;
    if (col < first || col > last) return;
#pragma unroll
    for (int i = 0; i < N; ++i)
      TaggedEdge<A>::put(edge + (int64_t(col) * N + i) * TaggedEdge<A>::kWords, held[i], col);
  }
};

// Every calling lane spins until *flag >= target (so each lane's later loads
// are ordered after the producer's release).
__device__ __forceinline__ void wait_for(const int* flag, int target) {
  while (load_acquire(flag) < target) __nanosleep(64);
}

// A ticket's pair and band. Tickets give a pair's bands out in rounds of
// `round` bands (round <= 0 or >= nbands: all of them at once): round r holds
// bands r * round .. of every pair, pair after pair. A band waits for the one
// before it (a lag of a few dozen steps a band), so when all of a pair's bands
// start together the last waits nbands - 1 lags; with rounds sized to the
// resident warps (band_round_for), a warp that finishes a band takes one of
// the next round, whose band before it has long been running. Every band's
// predecessor has an earlier ticket either way, so the warps holding tickets
// never wait on a band that no warp holds.
struct BandUnit {
  int64_t b, band;
};
__device__ __forceinline__ BandUnit band_of_ticket(long long unit, int64_t batch, int64_t nbands,
                                                   int64_t round) {
  if (round <= 0 || round >= nbands) return {unit / nbands, unit % nbands};
  const int64_t per_round = batch * round;
  const int64_t r = unit / per_round;
  const int64_t width = min(round, nbands - r * round);  // the last round may be narrower
  const int64_t within = unit - r * per_round;
  return {within / width, r * round + within % width};
}

// The next unit for this warp, in ticket order; the same for all lanes.
__device__ __forceinline__ long long next_unit(unsigned long long* ticket) {
  unsigned long long u = 0;
  if ((threadIdx.x & 31) == 0) u = atomicAdd(ticket, 1ull);
  return static_cast<long long>(__shfl_sync(kFullMask, u, 0));
}

// --------------------------------------------------------------------------
// Warp reductions (deterministic: a fixed butterfly)
// --------------------------------------------------------------------------

template <typename A>
__device__ __forceinline__ MaxArg<A> warp_max(MaxArg<A> x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    MaxArg<A> o;
    o.best = __shfl_xor_sync(kFullMask, x.best, off);
    o.index = __shfl_xor_sync(kFullMask, x.index, off);
    x.merge(o);
  }
  return x;
}

// Sum over the warp with a fixed butterfly. Both partners of every exchange
// add the same two values (a + b == b + a exactly), so every lane ends with
// the same bits, independent of scheduling.
template <typename A>
__device__ __forceinline__ A warp_sum(A x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(kFullMask, x, off);
  return x;
}

template <typename A>
__device__ __forceinline__ SoftTotal<A> warp_soft_total(SoftTotal<A> x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    SoftTotal<A> o;
    o.max = __shfl_xor_sync(kFullMask, x.max, off);
    o.sum = __shfl_xor_sync(kFullMask, x.sum, off);
    // Merge in lane order so that both partners compute the same bits.
    if ((threadIdx.x & off) == 0) {
      x.merge(o);
    } else {
      o.merge(x);
      x = o;
    }
  }
  return x;
}

// A band's share of the pair's reduction (each lane's own share; reduced over
// the warp here) goes to the partials; the pair's last band then merges the
// partials of all bands in band order (a result independent of scheduling)
// and writes the score, the total and the argmax.
template <typename T, typename A>
__device__ void publish_band_reduction(const Workspace& ws, int64_t unit_id, int64_t band,
                                       bool last_band, bool soft, SoftTotal<A> band_soft,
                                       MaxArg<A> band_best, int64_t b, A unscale, T* score,
                                       A* total, int64_t* argmax) {
  const int lane = threadIdx.x & (kWarp - 1);
  Partial part;
  if (soft) {
    band_soft = warp_soft_total(band_soft);
    part = {double(band_soft.max), double(band_soft.sum)};
  } else {
    band_best = warp_max(band_best);
    part = {double(band_best.best), double(band_best.index)};
  }
  if (lane == kWarp - 1) {
    __stcg(&ws.partials[unit_id].a, part.a);
    __stcg(&ws.partials[unit_id].b, part.b);
    store_release(ws.flags + unit_id, 1);
  }
  if (!last_band || lane != 0) return;
  if (soft) {
    SoftTotal<A> acc;
    for (int64_t k = 0; k <= band; ++k) {
      SoftTotal<A> o = band_soft;
      if (k < band) {
        wait_for(ws.flags + unit_id - band + k, 1);
        o.max = A(__ldcg(&ws.partials[unit_id - band + k].a));
        o.sum = A(__ldcg(&ws.partials[unit_id - band + k].b));
      }
      acc.merge(o);
    }
    PairTotal<A>::of(acc).store(total, b);
    score[b] = store_as<T>(acc.value() * unscale);
    argmax[b] = -1;
  } else {
    MaxArg<A> acc;
    for (int64_t k = 0; k <= band; ++k) {
      MaxArg<A> o = band_best;
      if (k < band) {
        wait_for(ws.flags + unit_id - band + k, 1);
        o.best = A(__ldcg(&ws.partials[unit_id - band + k].a));
        o.index = static_cast<int64_t>(__ldcg(&ws.partials[unit_id - band + k].b));
      }
      acc.merge(o);
    }
    PairTotal<A>::of(acc.best).store(total, b);
    score[b] = store_as<T>(acc.best * unscale);
    argmax[b] = acc.index;
  }
}

// --------------------------------------------------------------------------
// Launch helpers
// --------------------------------------------------------------------------

// kernel<<<blocks, threads, smem, stream>>>(args...); under
// SOFTSW_WARP_EMULATION the emulator's launch (dev/emulate), which runs the
// grid's blocks one after another on the CPU.
#if defined(SOFTSW_WARP_EMULATION)
#define SOFTSW_LAUNCH(kernel, blocks, threads, smem, stream, ...) \
  ::softsw_emulation::launch((blocks), (threads), (smem), [&] { kernel(__VA_ARGS__); })
#else
#define SOFTSW_LAUNCH(kernel, blocks, threads, smem, stream, ...) \
  kernel<<<(blocks), (threads), (smem), (stream)>>>(__VA_ARGS__)
#endif

inline void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("softsw: CUDA launch of ") + what +
                             " failed: " + cudaGetErrorString(err));
}

// Persistent grid: enough resident warps to fill the GPU, never more than
// there are units.
// Both queries are cached: on small problems the host is the bottleneck.
inline int multiprocessor_count() {
  constexpr int kMaxDevices = 64;
  static int cached[kMaxDevices] = {};
  int device = 0;
  cudaGetDevice(&device);
  if (device < 0 || device >= kMaxDevices) device = 0;
  if (cached[device] == 0)
    cudaDeviceGetAttribute(&cached[device], cudaDevAttrMultiProcessorCount, device);
  return cached[device] > 0 ? cached[device] : 1;
}

// `per_sm` caches the kernel's residency (a static of the caller, one per
// kernel instantiation): it depends on the kernel's resources only.
template <typename Kernel>
inline int persistent_blocks(Kernel kernel, int64_t units, int& per_sm, size_t smem = 0) {
  if (per_sm == 0)
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarp * kWarpsPerBlock, smem);
  const int64_t resident = int64_t(multiprocessor_count()) * (per_sm > 0 ? per_sm : 1);
  const int64_t needed = (units + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<int>(needed < resident ? needed : resident);
}

// Bands a pair per round of tickets (band_of_ticket) for `warps` resident
// warps: as many as give every pair's round a warp (at least 1, at most all
// of them). SOFTSW_BAND_ROUNDS=0 gives every pair's bands in one round (for
// benchmarks of the choice).
inline int64_t band_round_for(int64_t batch, int64_t nbands, int64_t warps) {
  static const bool off = env_is_zero("SOFTSW_BAND_ROUNDS");
  if (off || batch <= 0) return 0;
  const int64_t round = warps / batch;
  return round < 1 ? 1 : round >= nbands ? 0 : round;
}

// Launch a persistent wavefront kernel over the args.batch * args.nbands
// units on `stream`, with args.band_round set for the grid's warps
// (band_round_for). Each instantiation caches its own residency. `smem`
// bytes of dynamic shared memory per block (the same on every call of one
// instantiation).
template <auto Kernel, typename Args>
inline void launch_persistent(const Args& args, cudaStream_t stream, const char* name,
                              size_t smem = 0) {
  static int per_sm = 0;
  static const bool smem_ok = smem <= 48 * 1024 ||
      cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(smem)) == cudaSuccess;
  if (!smem_ok) check_launch(name);
  const int blocks = persistent_blocks(Kernel, args.batch * args.nbands, per_sm, smem);
  if (blocks == 0) return;
  Args launched = args;
  launched.band_round = band_round_for(args.batch, args.nbands, int64_t(blocks) * kWarpsPerBlock);
  SOFTSW_LAUNCH(Kernel, blocks, kWarp * kWarpsPerBlock, smem, stream, launched);
  check_launch(name);
}

// Calls f(rows, hard, gap_tensor) with each a std::integral_constant: the
// compile-time variants of a wavefront kernel (accumulate type A, affine or
// linear gaps) for problem `p`.
template <typename A, bool AFFINE, typename F>
inline void dispatch_variant(const Problem& p, bool hard, F&& f) {
  auto with_r = [&](auto hard_c, auto gap_c) {
    if (rows_per_thread(p) == 1) f(std::integral_constant<int, 1>{}, hard_c, gap_c);
    else f(std::integral_constant<int, kTallRows<A, AFFINE>>{}, hard_c, gap_c);
  };
  auto with_gap = [&](auto hard_c) {
    if (p.has_gap_tensor()) with_r(hard_c, std::true_type{});
    else with_r(hard_c, std::false_type{});
  };
  if (hard) with_gap(std::true_type{});
  else with_gap(std::false_type{});
}

template <typename T, typename A>
GapReader<T, A> gap_reader(const GapScores& g, A scale) {
  return {static_cast<const T*>(g.data), g.stride[0], g.stride[1], g.stride[2],
          A(g.value * double(scale)), scale};
}

// What every wavefront pass reads of its problem; each pass's argument struct
// (ForwardArgs, ProbabilityForwardArgs, ReverseArgs) extends it, and
// wavefront_args fills it.
template <typename T, typename A>
struct WavefrontArgs {
  int64_t batch, rows, cols, nbands;
  const T* scores;
  const T* scores_end;  // one past the last element (staging.cuh)
  const int64_t* lengths;
  GapReader<T, A> open, extend;  // linear gaps read `open` only
  A scale;                       // kernel units per caller unit
  bool soft_reduction;
  Workspace ws;
  int64_t band_round = 0;  // band_of_ticket (set at launch)
};

template <typename T, typename A>
WavefrontArgs<T, A> wavefront_args(const Problem& p, const Workspace& ws) {
  const A scale = A(kernel_scale(p));
  WavefrontArgs<T, A> a;
  a.batch = p.batch;
  a.rows = p.rows;
  a.cols = p.cols;
  a.nbands = band_count(p);
  a.scores = static_cast<const T*>(p.scores);
  a.scores_end = a.scores + p.batch * p.rows * p.cols;
  a.lengths = p.lengths;
  a.open = gap_reader<T, A>(p.gap_open, scale);
  a.extend = gap_reader<T, A>(p.gap_extend, scale);
  a.scale = scale;
  a.soft_reduction = p.reduction == Reduction::Soft;
  a.ws = ws;
  return a;
}

// The next unit a warp of a persistent pass takes, in ticket order
// (band_of_ticket), the same for all lanes: pair b and band `band`, the
// bottom band first in a reverse pass; `taken` false once the tickets run out.
struct TakenUnit {
  int64_t b, band;
  bool taken;
};
template <bool REVERSE, typename T, typename A>
__device__ __forceinline__ TakenUnit take_unit(const WavefrontArgs<T, A>& a) {
  const long long unit = next_unit(a.ws.ticket);
  if (unit >= a.batch * a.nbands) return {0, 0, false};
  const BandUnit t = band_of_ticket(unit, a.batch, a.nbands, a.band_round);
  return {t.b, REVERSE ? a.nbands - 1 - t.band : t.band, true};
}

// Dispatch on the element type: f<scalar_t, acc_t>().
template <typename F>
inline void dispatch_dtype(Dtype d, F&& f) {
  switch (d) {
    case Dtype::Float16: f(static_cast<__half*>(nullptr), float(0)); break;
    case Dtype::BFloat16: f(static_cast<__nv_bfloat16*>(nullptr), float(0)); break;
    case Dtype::Float32: f(static_cast<float*>(nullptr), float(0)); break;
    case Dtype::Float64: f(static_cast<double*>(nullptr), double(0)); break;
  }
}

}  // namespace cuda

// The forward in the probability domain (forward_probability.cu), for the
// problems it covers (runs_probability_forward); false, launching nothing, for
// the others.
bool probability_forward_cuda(const Problem& problem, const ForwardOutputs& out,
                              const cuda::Workspace& ws, cudaStream_t stream);
// The double backward's tangent pass (tangent.cuh) on the same skeleton, for
// the problems it covers (Hdot of every cell into `hdot`, band edges in `ws`'s
// edges: edges_dot_bytes); false, launching nothing, for the others.
bool probability_tangent_cuda(const Problem& problem, const DoubleBackwardArgs& args, void* hdot,
                              const cuda::Workspace& ws, cudaStream_t stream);

}  // namespace softsw
