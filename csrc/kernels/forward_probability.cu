// The forward on CUDA in the probability domain (probability.h): linear gaps
// with a constant gap score or a gap tensor (GAP_TENSOR, below), T > 0, both
// reductions, every dtype; with or without the state the backward passes
// read. Affine gaps with constant gap scores at inference (AFFINE, below).
//
// The cell is Z = 1 + w Z[i-1,j-1] + c (Z[i-1,j] + Z[i,j-1]) with w = 2^s: one
// exp2 and three adds/FMAs, where the log domain needs a softmax of four
// terms. With a cell that cheap the scores' memory path decides the speed, so
// the scores are staged through shared memory.
//
// Work split. One warp per band of 32R rows (wavefront.cuh's geometry): lane l
// owns band rows lR .. lR+R-1 and at step t computes column t - lR - k of its
// row k. Several rows per lane mean fewer bands per pair (each band waits ~64
// steps for the one above it), R independent cells per step, and the step's
// per-lane work (shuffles, edges, the group check) shared by R cells:
// rows_per_thread says which (with state, probability_state_rows: the state
// keeps the layout of 32-row bands whatever R is, see `keep` below).
//
// Staging. The scores reach the warp through shared memory a chunk of 32
// steps ahead (staging.cuh): a step reads its score from a padded slot,
// conflict free, and the copy of the chunk after next is issued when a chunk
// is done.
//
// Scaling. Each row is kept as z = Z 2^-o with its own exponent o and brought
// back to [1, 2) after every group of steps (kGroupSteps<R>); a value from the
// row above is multiplied by f = 2^(o_above - o), recomputed then. The
// reductions fold into log2 units (SoftTotal, the running max) at the same
// time, before o changes.
//
// Range. probability.h says when the scaled form is exact: it is unless a
// value overflows between two renormalisations (tiny weights only lose what
// is negligible anyway). So the warp checks after every group that every z is
// finite and below the format's top binade (a value there cannot be
// renormalised: 2^-127 flushes to 0); if one is not (a score or gap too large
// for T, an inf or NaN score, an edge from a band that ran in the log domain
// with huge values), the group's steps are undone (a snapshot of the state is
// taken before them) and redone in the log domain (recurrence.h's
// LinearCell), as is the rest of the band. Every cell is exact either way,
// and a band's result depends on its data only. Band edges travel as a
// mantissa and an exponent (Z = m 2^e) whichever domain wrote them, published
// after the group of steps that finishes them is checked.
//
// State (a training forward): every cell's H = log2 Z (kernel units) goes to
// `hidden` in the band layout of wavefront.cuh (one coalesced run of 32 per
// step), and "max" keeps the largest H with its first row-major cell, as the
// log-domain forward does; the backward passes read both. Argmax: an inference
// forward does not keep the state the argmax serves, so it leaves it -1
// (problem.h).
//
// Tangent (the double backward's first pass, tangent.cuh): Hdot = dH along a
// direction dS on the scores (caller units; a constant gap has none) rides
// along as Y = Z Hdot, which obeys Z's recurrence with a source term
// (probability_tangent_cell): y = Y 2^-o shares z's exponent, renormalisation
// and group check, so Hdot = y / z to rounding, stored in the state's band
// layout; edges carry Hdot next to (m, e). In the log domain a cell takes
// LinearCell's weights p and Hdot = p1 (Hdot_diag + dS) + p2 Hdot_up + p3
// Hdot_left. It reduces nothing.
//
// Affine gaps (AFFINE, inference only): with o = 2^open and e = 2^extend the
// nodes of recurrence.h's AffineCell are linear too (probability.h:
// probability_affine_cell): D = w C[i-1,j-1], U = o A[i-1,j] + e U[i-1,j],
// L = o B[i,j-1] + e L[i,j-1], A = 1 + D + L, B = 1 + D + U, C = A + U, all
// in the row's scale. C is the largest node, so it is what the group check,
// the renormalisation and the reductions read (z); a row hands A and U down
// (band edges: each as its own mantissa and exponent, so a node far below C
// keeps its digits) and keeps B and L for the cell to its right. The log
// domain runs AffineCell's arithmetic on the same nodes.
#include "probability.h"
#include "staging.cuh"
#include "wavefront.cuh"

namespace softsw {
namespace cuda {

template <typename T, typename A>
struct ProbabilityForwardArgs : WavefrontArgs<T, A> {
  A unscale;     // caller units per kernel unit
  A gap;         // the gap (affine: the open) in kernel units (log domain)
  A gap_weight;  // 2^gap (probability domain)
  A gap_extend = A(0), gap_extend_weight = A(0);  // affine: the extend, and 2^extend
  T* score = nullptr;
  A* hidden = nullptr;  // with state: H of every cell (wavefront.cuh's band layout); tangent: Hdot
  const T* dir_scores = nullptr;  // tangent: the direction on the scores, or nullptr (zero)
  bool stage_gap = false;  // GAP_TENSOR: staged (its columns contiguous), else read cell by cell
  int64_t* argmax = nullptr;
  A* total = nullptr;
};

// Steps between two checks (and renormalisations); a chunk holds whole
// groups. The check detects overflow, so the group's length is no part of
// exactness (probability.h): a longer one only sends more high-scoring pairs
// to the log domain. With several rows per lane 16 steps (half the check's
// work a cell) measured 3-9 % faster than 8 on the H200; one row spills at 16.
template <int R> constexpr int kGroupSteps = R > 1 ? 16 : 8;

// A band edge: N tagged values of A a column. A value Z = m 2^e takes two:
// the mantissa m in [1, 2) (or a non-finite m with e = 0 for an infinite or
// NaN H, 0 for Z = 0), then the exponent e, an integer kept as an A (in the
// log domain it may exceed int). Linear: (m, e) of Z; TANGENT: and Hdot;
// AFFINE: (m, e) of A, then of U. All words are loaded before any is waited
// on: one round trip.
template <typename A, int N>
struct ScaledEdge {
  static constexpr int kValues = N;
  static constexpr int kValueWords = TaggedEdge<A>::kWords;
  static constexpr int kWords = N * kValueWords;
  using Words = TaggedWords<kWords>;
  __device__ static void put(unsigned long long* column, const A (&v)[N], int col) {
#pragma unroll
    for (int i = 0; i < N; ++i) TaggedEdge<A>::put(column + i * kValueWords, v[i], col);
  }
  // `early`: the column's words loaded before (a chunk ahead), or none.
  __device__ static void get(const unsigned long long* column, int col, A (&v)[N], Words early) {
    const Words word = early.settle(column, col);
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = tagged_value<A>(word, i * kValueWords);
  }
};

// H = log2 Z (kernel units) as an edge's (m, e): m = 2^(H - e) in [1, 2)
// with e = floor(H); a non-finite H as (H, 0), -inf as (0, 0).
template <typename A>
__device__ __forceinline__ void log_to_scaled(A h, A& mant, A& e) {
  if (h == -std::numeric_limits<A>::infinity()) {
    mant = e = A(0);
  } else if (is_nan(h) || h == std::numeric_limits<A>::infinity()) {
    mant = h;
    e = A(0);
  } else {
    e = floor(h);
    mant = exp2_acc(h - e);
  }
}
// z 2^o (z >= 0 finite, the probability domain) as an edge's (m, e).
template <typename A>
__device__ __forceinline__ void probability_to_scaled(A z, int o, A& mant, A& e) {
  const int k = exponent_of(z);
  mant = z * pow2<A>(-k);
  e = A(k + o);
}

// An exponent stored as an A, as an int for pow2 (beyond +-2^30 pow2 gives
// inf or 0 either way).
template <typename A> __device__ __forceinline__ int exponent_int(A e) {
  const A limit = A(1 << 30);
  return static_cast<int>(e > limit ? limit : e < -limit ? -limit : e);
}

// SOFT: the reduction (a compile-time flag: it is decided in every cell).
// STATE: a training forward (H of every cell to `hidden`, the argmax).
// TANGENT: the tangent pass (Hdot of every cell to `hidden`; no reduction,
// SOFT and STATE false, R = 1).
// AFFINE: affine gaps (inference: STATE and TANGENT false).
// GAP_TENSOR: a linear gap read per cell (a.open; not with TANGENT or
// AFFINE), c = 2^g an exp2 a cell; a group with a gap outside
// ProbabilityRange's bound (the one the constant gap is held to before the
// launch) runs in the log domain, as one that overflows.
// The staging (8.4 KB a warp for float and one row per lane, twice that for
// double, two rows or the tangent's two inputs) lets 6 blocks of 4 warps (3
// for double, two rows or the tangent) share an SM: registers up to that
// occupancy (5 for 2-byte scores, whose staging code needs more, and for a
// training forward; 4 for the affine nodes, 2 in double, and 4 for a gap
// tensor's loads and exp2, whose two staging buffers leave room for 3 blocks
// in float).
template <typename T, typename A, int R, bool SOFT, bool STATE, bool TANGENT, bool AFFINE = false,
          bool GAP_TENSOR = false>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock,
                                  sizeof(A) == 8 && AFFINE           ? 2
                                  : sizeof(A) == 8 || R > 1 || TANGENT ? 3
                                  : AFFINE || GAP_TENSOR             ? 4
                                  : sizeof(T) == 2 || STATE          ? 5
                                                                     : 6)
    probability_forward(const ProbabilityForwardArgs<T, A> a) {
  static_assert(!TANGENT || (R == 1 && !SOFT && !STATE), "the tangent pass reduces nothing");
  static_assert(!AFFINE || (!STATE && !TANGENT), "affine gaps: inference only");
  static_assert(!GAP_TENSOR || (!AFFINE && !TANGENT), "gap tensors: the linear forward");
  constexpr A kMaxGap = A(ProbabilityRange<A>::kMaxLog2Weight);
  constexpr bool kReduces = !TANGENT;
  constexpr bool kStores = STATE || TANGENT;  // a value of every cell to `hidden`
  constexpr int kGroup = kGroupSteps<R>;
  static_assert(kChunkSteps % kGroup == 0, "a chunk holds whole groups");
  constexpr int kBandRows = kWarp * R;
  constexpr int kPitch = kStagePitch<T>;
  constexpr int kSlot = kBandRows * kPitch;  // elements of one slot
  // The top binade [2^127, 2^128) (float) counts as overflow: renormalising
  // a value there would multiply it by 2^-127, which pow2 flushes to 0.
  constexpr A kTopBinade = A(2) / std::numeric_limits<A>::min();
  using Edge = ScaledEdge<A, AFFINE ? 4 : TANGENT ? 3 : 2>;
  using LogCell = LinearCell<A, false>;
  using LogAffine = AffineCell<A, false>;
  extern __shared__ __align__(16) unsigned char stage_bytes[];
  // The scores' staging (all warps), then a second input's: (TANGENT) the
  // direction's, or (GAP_TENSOR) the gap tensor's when its columns are
  // contiguous (any batch and row strides: a (B, 1, N) broadcast stages one
  // row for every row); a gap tensor with other column strides is read cell
  // by cell.
  static_assert(!(TANGENT && GAP_TENSOR), "one second input");
  T* const stage = reinterpret_cast<T*>(stage_bytes) + (threadIdx.x / kWarp) * kStageElements<T, R>;
  T* const dir_stage = stage + kWarpsPerBlock * kStageElements<T, R>;
  const bool has_dir = TANGENT && a.dir_scores != nullptr;
  const bool staged_gap = GAP_TENSOR && a.stage_gap;
  const T* const gap_end =  // one past the gap tensor's last element
      staged_gap ? a.open.data + (a.batch - 1) * a.open.s0 + (a.rows - 1) * a.open.s1 + a.cols : nullptr;
  const int lane = threadIdx.x & (kWarp - 1);
  unsigned long long* const edges = static_cast<unsigned long long*>(a.ws.edges);
  const int64_t plane = a.rows * a.cols;
  const A c = a.gap_weight;  // affine: the open's
  const A ce = a.gap_extend_weight;
  const A scale = a.scale;

  for (;;) {
    const TakenUnit unit = take_unit</*REVERSE=*/false>(a);
    if (!unit.taken) return;
    const int64_t b = unit.b, band = unit.band;
    const PairLengths len = pair_lengths(a.lengths, b, a.rows, a.cols);
    const int m = static_cast<int>(len.m), n = static_cast<int>(len.n);
    if (m == 0 || n == 0) {
      if (kReduces && band == 0 && lane == 0) {
        const A value = len.valid ? A(0) : quiet_nan<A>();
        a.score[b] = store_as<T>(value);
        PairTotal<A>::of(value).store(a.total, b);
        a.argmax[b] = -1;
      }
      continue;
    }
    const int top = static_cast<int>(band) * kBandRows;
    if (top >= m) continue;  // padding rows: no work
    const int rows_here = m - top < kBandRows ? m - top : kBandRows;
    const bool has_above = band > 0;
    const bool has_below = top + kBandRows < m;
    const int64_t unit_id = b * a.nbands + band;
    const unsigned long long* edge_above = edges + (unit_id - 1) * a.cols * Edge::kWords;
    unsigned long long* edge_below = edges + unit_id * a.cols * Edge::kWords;
    const int steps = n + rows_here - 1;
    const int chunks = (steps + kChunkSteps - 1) / kChunkSteps;
    const int r0 = lane * R;  // this lane's first band row
    bool row_ok[R];
#pragma unroll
    for (int k = 0; k < R; ++k) row_ok[k] = r0 + k < rows_here;
    // With state: H of this lane's rows, in the layout of 32-row bands
    // (wavefront.cuh) whatever R is: the lane's rows lie in the 32-row band
    // `sub` of this band (sub > 0 only for R > 1), whose cell (r, c) sits at
    // ((r + c) mod n) * sub_rows + r, and whose anti-diagonal d is this
    // band's step d + 32 sub. Each step's stores are then one contiguous run
    // a 32-row band. And each row's first cell in row-major order (the argmax
    // index).
    const int sub_top = r0 / kWarp * kWarp;
    const int sub_rows = rows_here - sub_top < kWarp ? rows_here - sub_top : kWarp;
    A* const lane_hidden =
        kStores ? a.hidden + b * plane + int64_t(top + sub_top) * n + (r0 - sub_top) : nullptr;
    int64_t row_index[R];
#pragma unroll
    for (int k = 0; k < R; ++k) row_index[k] = int64_t(top + r0 + k) * a.cols - (r0 + k);

    // ---- staging: chunk q into slot q & 1, row lR + k at [k][l]
    const T* const band_scores = a.scores + b * plane + int64_t(top) * a.cols;
    const T* const band_dir = has_dir ? a.dir_scores + b * plane + int64_t(top) * a.cols : nullptr;
    const T* const band_gap = staged_gap ? a.open.data + b * a.open.s0 + int64_t(top) * a.open.s1 : nullptr;
    auto stage_chunk = [&](int q) {
      stage_parallelogram<T, R>(stage + (q & 1) * kSlot, band_scores, a.cols, q, rows_here, n,
                                a.scores, a.scores_end, lane);
      if (has_dir)
        stage_parallelogram<T, R>(dir_stage + (q & 1) * kSlot, band_dir, a.cols, q, rows_here, n,
                                  a.dir_scores, a.dir_scores + (a.scores_end - a.scores), lane);
      if (staged_gap)
        stage_parallelogram<T, R>(dir_stage + (q & 1) * kSlot, band_gap, a.open.s1, q, rows_here, n,
                                  a.open.data, gap_end, lane);
      copy_async_commit();  // one group for the chunk's inputs
    };
    // This lane's row k of a slot, from its first element (and of the direction's).
    const T* srow[R];
    const T* drow[R];
#pragma unroll
    for (int k = 0; k < R; ++k) {
      srow[k] = stage + (k * kWarp + lane) * kPitch + parallelogram_offset(band_scores, a.cols, r0 + k);
      drow[k] = dir_stage + (k * kWarp + lane) * kPitch +
                (has_dir      ? parallelogram_offset(band_dir, a.cols, r0 + k)
                 : staged_gap ? parallelogram_offset(band_gap, a.open.s1, r0 + k)
                              : 0);
    }
    // TANGENT: row k's direction at step x of a slot (caller units).
    auto direction = [&](int k, int slot, int x) {
      return has_dir ? to_acc<A>(drow[k][slot + x]) : A(0);
    };

    // ---- state, probability domain: row k as z = Z 2^-o[k]
    A z[R], diag[R], start[R], from_above[R], best_z[R], sum_z[R];
    int o[R];
#pragma unroll
    for (int k = 0; k < R; ++k) {
      z[k] = diag[k] = start[k] = from_above[k] = A(1);  // border: Z = 1
      best_z[k] = sum_z[k] = A(0);
      o[k] = 0;
    }
    int o_first = 0, o_last = 0;  // lane 0's row 0 and lane 31's row R-1
    // ---- TANGENT, probability domain: y = Y 2^-o[k] (Y = Z Hdot), in z's scale
    A y[R] = {}, ydiag[R] = {};
    // ---- AFFINE, probability domain: z is C, diag C[i-1,j-1]; the nodes A,
    // U (handed down) and B, L (to the right) in z's scale. Border: A = B =
    // 1, U = L = 0.
    A za[R], zu[R] = {}, zb[R], zl[R] = {};
#pragma unroll
    for (int k = 0; k < R; ++k) za[k] = zb[k] = A(1);
    // ---- state, log domain (after a switch): H = log2 Z (TANGENT: and Hdot;
    // AFFINE: h is C, and the nodes A, U, B, L)
    A h[R] = {}, hdiag[R] = {};
    A hd[R] = {}, hddiag[R] = {};
    A ha[R] = {}, hu[R] = {}, hb[R] = {}, hl[R] = {};
    // ---- reductions, log2 units (with state, "max" keeps the argmax too)
    A best = A(0);
    MaxArg<A> best_cell;
    A best_h[R];     // with state, "max", probability domain: a row's largest H
    int best_t[R];   // ... and its step (-1: none above the boundary's 0)
#pragma unroll
    for (int k = 0; k < R; ++k) {
      best_h[k] = A(0);
      best_t[k] = -1;
    }
    // Rows' probability-domain maxima into best_cell (before any log-domain
    // cell of the row: best_cell sees each row's cells in order).
    auto fold_best = [&]() {
#pragma unroll
      for (int k = 0; k < R; ++k)
        if (best_t[k] >= 0) best_cell.add(best_h[k], row_index[k] + best_t[k]);
    };
    SoftTotal<A> soft;
    // ---- edges: column 32k + lane of the band above (Z = edge_m 2^edge_e;
    // edge_up in lane 0's scale, edge_h its log2) and of this band's last
    // row for the band below (low_z 2^low_o or low_h; step 31 of a chunk
    // collects the next chunk's column 0 into pend_* until the store is done)
    // AFFINE: edge_* and low_z / low_h are A.
    A edge_m = A(1), edge_e = A(0), edge_up = A(1), edge_h = A(0);
    A low_z = A(1), pend_z = A(1), low_h = A(0), pend_h = A(0);
    int low_o = 0, pend_o = 0;
    // TANGENT: the edge's Hdot (edge_yup = edge_up Hdot: its Y in lane 0's
    // scale); the last row's y (log domain: Hdot) next to low_z and pend_z.
    // AFFINE: U, as a second (m, e) (edge_hd the exponent; 0 on the border),
    // edge_yup in lane 0's scale, its log2 edge_hu; low_y is the last row's
    // U (log domain: its log2).
    A edge_hd = A(0), edge_yup = A(0), low_y = A(0), pend_y = A(0);
    A edge_um = A(0), edge_hu = A(0);
    // Edge columns due for storing at the end of the group of steps: a full
    // group of 32 ending at store_group, and the pair's last column (when it
    // does not end a full group).
    int store_group = -1, store_tail = -1;

    auto fold = [&]() {
      if constexpr (!kReduces) return;
#pragma unroll
      for (int k = 0; k < R; ++k) {
        if (SOFT) {
          if (sum_z[k] > A(0)) soft.add(log2_acc(sum_z[k]) + A(o[k]));
        } else if (!STATE && best_z[k] > A(0)) {
          best = max_of(best, log2_acc(best_z[k]) + A(o[k]));
        }
        sum_z[k] = best_z[k] = A(0);
      }
    };
    auto renormalise = [&]() {
      fold();
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int e = exponent_of(z[k]);
        const A down = pow2<A>(-e);
        z[k] *= down;
        diag[k] *= down;
        if constexpr (TANGENT) {
          y[k] *= down;
          ydiag[k] *= down;
        }
        if constexpr (AFFINE) {
          za[k] *= down;
          zu[k] *= down;
          zb[k] *= down;
          zl[k] *= down;
        }
        o[k] += e;
        start[k] = pow2<A>(-o[k]);
      }
      from_above[0] = pow2<A>(__shfl_up_sync(kFullMask, o[R - 1], 1) - o[0]);
#pragma unroll
      for (int k = 1; k < R; ++k) from_above[k] = pow2<A>(o[k - 1] - o[k]);
      o_first = __shfl_sync(kFullMask, o[0], 0);
      o_last = __shfl_sync(kFullMask, o[R - 1], kWarp - 1);
      edge_up = edge_m * pow2<A>(exponent_int(edge_e) - o_first);
      if constexpr (AFFINE) edge_yup = edge_um * pow2<A>(exponent_int(edge_hd) - o_first);
      else edge_yup = edge_up * edge_hd;
    };
    auto inside = [&](int t, int k) {
      return row_ok[k] && static_cast<unsigned>(t - r0 - k) < static_cast<unsigned>(n);
    };
    // GAP_TENSOR: row k's gap at step t, column x of a slot (kernel units; 0
    // outside the pair, where nothing is read), and whether every gap of the
    // group so far is within ProbabilityRange's bound (else the group goes to
    // the log domain).
    auto cell_gap = [&](int t, int k, bool in, int slot, int x) {
      if (!in) return A(0);
      if (staged_gap) return scaled(to_acc<A>(drow[k][slot + x]), a.open.scale);
      return a.open.template at<true>(b, top + r0 + k, t - r0 - k);
    };
    bool gaps_in_range = true;
    // With state: a cell's H to `hidden`. Step t is anti-diagonal
    // t - sub_top of the lane's 32-row band: slot (t - sub_top) mod n (the
    // cell is inside the pair, so t - sub_top >= 0; unchecked, also < n).
    auto keep = [&](int t, int k, A h, auto checked) {
      if constexpr (kStores) {
        int slot_t = t - sub_top;
        if constexpr (decltype(checked)::value)
          while (slot_t >= n) slot_t -= n;  // slot_t < n + 32: rarely more than once
        lane_hidden[int64_t(slot_t) * sub_rows + k] = h;
      }
    };

    // One step in the probability domain. x: the step within its chunk.
    auto probability_step = [&](const int t, const int x, const int slot, auto checked) {
      constexpr bool kChecked = decltype(checked)::value;
      // What a row hands down: Z (AFFINE: A), and (TANGENT) y or (AFFINE) U.
      auto down = [&](int k) { return AFFINE ? za[k] : z[k]; };
      auto down2 = [&](int k) { return AFFINE ? zu[k] : y[k]; };
      const A up_lane = __shfl_up_sync(kFullMask, down(R - 1), 1) * from_above[0];
      const A up_edge = __shfl_sync(kFullMask, edge_up, x);
      A yup_lane = A(0), yup_edge = A(0);
      if constexpr (TANGENT || AFFINE) {
        yup_lane = __shfl_up_sync(kFullMask, down2(R - 1), 1) * from_above[0];
        yup_edge = __shfl_sync(kFullMask, edge_yup, x);
      }
      for_rows_down<R>([&](auto row) {
        constexpr int k = decltype(row)::value;
        // Lane 0's edge_up is the border 1 in its scale when there is no band above.
        const A up = k > 0 ? down(k - 1) * from_above[k] : lane != 0 ? up_lane : up_edge;
        const A w = exp2_acc(scaled(to_acc<A>(srow[k][slot + x]), scale));
        const bool in = !kChecked || inside(t, k);
        if constexpr (AFFINE) {
          const A uup = k > 0 ? zu[k - 1] * from_above[k] : lane != 0 ? yup_lane : yup_edge;
          const AffineNodes<A> nd =
              probability_affine_cell(start[k], w, diag[k], c, ce, up, uup, zb[k], zl[k]);
          diag[k] = up + uup;  // C[i-1,j]: the next cell's diagonal
          z[k] = in ? nd.c : z[k];
          za[k] = in ? nd.a : za[k];
          zu[k] = in ? nd.u : zu[k];
          zb[k] = in ? nd.b : zb[k];
          zl[k] = in ? nd.l : zl[k];
          if (SOFT) sum_z[k] += in ? nd.c : A(0);
          else best_z[k] = max_of(best_z[k], in ? nd.c : A(0));
          return;
        }
        A cg = c;  // the cell's gap weight
        if constexpr (GAP_TENSOR) {
          const A g = cell_gap(t, k, in, slot, x);
          gaps_in_range &= g >= -kMaxGap && g <= kMaxGap;  // false for NaN
          cg = exp2_acc(g);
        }
        const A zn = probability_cell(start[k], w, diag[k], cg, up, z[k]);
        if constexpr (TANGENT) {
          const A yup = k > 0 ? y[k - 1] * from_above[k] : lane != 0 ? yup_lane : yup_edge;
          const A yn = probability_tangent_cell(w, diag[k], ydiag[k], direction(k, slot, x), c, yup, y[k]);
          ydiag[k] = yup;
          y[k] = in ? yn : y[k];
          if (in) keep(t, k, yn / zn, checked);
        }
        diag[k] = up;
        z[k] = in ? zn : z[k];
        if constexpr (kReduces) {
          if (SOFT) sum_z[k] += in ? zn : A(0);
          else if (!STATE) best_z[k] = max_of(best_z[k], in ? zn : A(0));
        }
        if (STATE && in) {
          // "max": the first largest H of the row (no NaN here: a group with
          // one is undone); folded into best_cell when the row switches or ends.
          const A hk = log2_acc(zn) + A(o[k]);
          keep(t, k, hk, checked);
          if (!SOFT && hk > best_h[k]) {
            best_h[k] = hk;
            best_t[k] = t;
          }
        }
      });
      // Collected whether or not there is a band below (selects, no branch);
      // stored only when there is one.
      {
        const A v = __shfl_sync(kFullMask, down(R - 1), kWarp - 1);
        const int col = t - (kBandRows - 1);  // the column lane 31's last row finished
        const bool to_pend = x == kChunkSteps - 1 && lane == 0;
        const bool to_low = x != kChunkSteps - 1 && lane == (col & (kWarp - 1));
        pend_z = to_pend ? v : pend_z;
        pend_o = to_pend ? o_last : pend_o;
        low_z = to_low ? v : low_z;
        low_o = to_low ? o_last : low_o;
        if constexpr (TANGENT || AFFINE) {
          const A vy = __shfl_sync(kFullMask, down2(R - 1), kWarp - 1);
          pend_y = to_pend ? vy : pend_y;
          low_y = to_low ? vy : low_y;
        }
        if (has_below && col >= 0 && col < n) {
          if ((col & (kWarp - 1)) == kWarp - 1) store_group = col;
          else if (col == n - 1) store_tail = col;
        }
      }
    };
    auto log_step = [&](const int t, const int x, const int slot) {
      // What a row hands down: H (AFFINE: A), and (TANGENT) Hdot or (AFFINE) U.
      auto down = [&](int k) { return AFFINE ? ha[k] : h[k]; };
      auto down2 = [&](int k) { return AFFINE ? hu[k] : hd[k]; };
      const A up_lane = __shfl_up_sync(kFullMask, down(R - 1), 1);
      const A up_edge = __shfl_sync(kFullMask, edge_h, x);
      A hdup_lane = A(0), hdup_edge = A(0);
      if constexpr (TANGENT || AFFINE) {
        hdup_lane = __shfl_up_sync(kFullMask, down2(R - 1), 1);
        hdup_edge = __shfl_sync(kFullMask, AFFINE ? edge_hu : edge_hd, x);
      }
      for_rows_down<R>([&](auto row) {
        constexpr int k = decltype(row)::value;
        const A up = k > 0 ? down(k - 1) : lane != 0 ? up_lane : up_edge;  // border: 0
        const A sk = scaled(to_acc<A>(srow[k][slot + x]), scale);
        const bool in = inside(t, k);
        if constexpr (AFFINE) {  // AffineRow's cell (forward.cu)
          const A uup = k > 0 ? hu[k - 1] : lane != 0 ? hdup_lane : hdup_edge;  // border: -inf
          const A D = hdiag[k] + sk;
          const A U = LogAffine::gap(up + a.gap, uup + a.gap_extend);
          const A L = LogAffine::gap(hb[k] + a.gap, hl[k] + a.gap_extend);
          const A hn = LogCell::value(D, U, L);
          hdiag[k] = LogAffine::gap(up, uup);  // C[i-1,j] = log2(2^A + 2^U)
          if (in) {
            h[k] = hn;
            ha[k] = LogAffine::prime(D, L);
            hu[k] = U;
            hb[k] = LogAffine::prime(D, U);
            hl[k] = L;
            if (SOFT) soft.add(hn);
            else if (!is_nan(best)) best = is_nan(hn) ? hn : max_of(best, hn);  // NaN sticks
          }
          return;
        }
        const A g = GAP_TENSOR ? cell_gap(t, k, in, slot, x) : a.gap;
        const A vd = hdiag[k] + sk, vu = up + g, vl = h[k] + g;
        const A hn = LogCell::value(vd, vu, vl);
        if constexpr (TANGENT) {
          const A hdup = k > 0 ? hd[k - 1] : lane != 0 ? hdup_lane : hdup_edge;  // border: 0
          const Weights<A> p = LogCell::normalized_weights(hn, vd, vu, vl);
          const A hdn = p.p1 * (hddiag[k] + direction(k, slot, x)) + p.p2 * hdup + p.p3 * hd[k];
          hddiag[k] = hdup;
          if (in) {
            hd[k] = hdn;
            keep(t, k, hdn, std::true_type{});
          }
        }
        hdiag[k] = up;
        if (in) {
          h[k] = hn;
          if constexpr (kReduces) {
            if (SOFT) soft.add(hn);
            else if (!STATE && !is_nan(best)) best = is_nan(hn) ? hn : max_of(best, hn);  // NaN sticks
            else if (STATE) best_cell.add(hn, row_index[k] + t);
            keep(t, k, hn, std::true_type{});
          }
        }
      });
      if (has_below) {
        const A v = __shfl_sync(kFullMask, down(R - 1), kWarp - 1);
        const A vd = TANGENT || AFFINE ? __shfl_sync(kFullMask, down2(R - 1), kWarp - 1) : A(0);
        const int col = t - (kBandRows - 1);
        if (x == kChunkSteps - 1) {
          if (lane == 0) {
            pend_h = v;
            pend_y = vd;
          }
        } else if (lane == (col & (kWarp - 1))) {
          low_h = v;
          low_y = vd;
        }
        if (col >= 0 && col < n) {
          if ((col & (kWarp - 1)) == kWarp - 1) store_group = col;
          else if (col == n - 1) store_tail = col;
        }
      }
    };
    // The band's last row to the band below: columns (last & ~31) .. last.
    // y_col: TANGENT the column's y, or in the log domain its Hdot; AFFINE
    // its U (z_col, h_col: A), or in the log domain log2 U.
    auto put_columns = [&](int last, bool log_domain, A z_col, int o_col, A h_col, A y_col) {
      const int col = (last & ~(kWarp - 1)) + lane;
      if (col > last) return;
      A v[Edge::kValues];
      if (!log_domain) probability_to_scaled(z_col, o_col, v[0], v[1]);
      else log_to_scaled(h_col, v[0], v[1]);
      if constexpr (TANGENT) v[2] = log_domain ? y_col : y_col / z_col;
      if constexpr (AFFINE) {
        if (!log_domain) probability_to_scaled(y_col, o_col, v[2], v[3]);
        else log_to_scaled(y_col, v[2], v[3]);
      }
      Edge::put(edge_below + int64_t(col) * Edge::kWords, v, col);
    };
    // The columns due at the end of a group. The column collected at a
    // chunk's last step (t0 + 32 - 32R, lane 0's) waits in pend_* until the
    // full group before it is stored; it is stored from there when it is the
    // pair's last column.
    auto store_edge = [&](int t0, bool log_domain, bool chunk_end) {  // t0: the chunk's first step
      if (store_group >= 0) put_columns(store_group, log_domain, low_z, low_o, low_h, low_y);
      const bool pending = chunk_end && lane == 0;
      if (store_tail >= 0) {
        const bool from_pend = pending && (store_tail & ~(kWarp - 1)) == t0 + kChunkSteps - kBandRows;
        put_columns(store_tail, log_domain, from_pend ? pend_z : low_z, from_pend ? pend_o : low_o,
                    from_pend ? pend_h : low_h, from_pend ? pend_y : low_y);
      }
      if (pending) {
        low_z = pend_z;
        low_o = pend_o;
        low_h = pend_h;
        low_y = pend_y;
      }
      store_group = store_tail = -1;
    };

    // Steps first..31 of a chunk in the log domain.
    auto log_steps = [&](int t0, int first, int slot) {
#pragma unroll 1
      for (int x = first; x < kChunkSteps; ++x) {
        log_step(t0 + x, x, slot);
        if (x % kGroup == kGroup - 1) store_edge(t0, true, x == kChunkSteps - 1);
      }
    };
    // A chunk in the probability domain, a group of steps at a time, each group
    // checked; returns the first step of the group that overflowed (undone and
    // converted to the log domain), or 32.
    auto probability_chunk = [&](int t0, int slot, auto checked) {
      // Unchecked chunks unrolled whole: the step's place in the chunk (which
      // lane collects the edge, which stores) is then known at compile time.
#pragma unroll(decltype(checked)::value ? 1 : kChunkSteps / kGroup)
      for (int g = 0; g < kChunkSteps; g += kGroup) {
        A z0[R], diag0[R], y0[R], ydiag0[R], za0[R], zu0[R], zb0[R], zl0[R];
#pragma unroll
        for (int k = 0; k < R; ++k) {
          z0[k] = z[k];
          diag0[k] = diag[k];
          y0[k] = y[k];
          ydiag0[k] = ydiag[k];
          za0[k] = za[k];
          zu0[k] = zu[k];
          zb0[k] = zb[k];
          zl0[k] = zl[k];
        }
        const A low_z0 = low_z, low_y0 = low_y;
        const int low_o0 = low_o;
        A best_h0[R];
        int best_t0[R];
#pragma unroll
        for (int k = 0; k < R; ++k) {
          best_h0[k] = best_h[k];
          best_t0[k] = best_t[k];
        }
        gaps_in_range = true;
#pragma unroll
        for (int j = 0; j < kGroup; ++j) probability_step(t0 + g + j, g + j, slot, checked);
        bool finite = gaps_in_range;  // and below the top binade
#pragma unroll
        for (int k = 0; k < R; ++k) {
          finite &= z[k] < kTopBinade;  // false for NaN
          if constexpr (TANGENT) finite &= y[k] < kTopBinade && y[k] > -kTopBinade;
        }
        if (__all_sync(kFullMask, finite)) {
          renormalise();
          store_edge(t0, false, g + kGroup == kChunkSteps);
          continue;
        }
        // Back to the snapshot, in the log domain (o changes only where a
        // group passes its check).
#pragma unroll
        for (int k = 0; k < R; ++k) {
          h[k] = log2_acc(z0[k]) + A(o[k]);
          hdiag[k] = log2_acc(diag0[k]) + A(o[k]);  // -inf if it flushed to 0: negligible
          if constexpr (TANGENT) {  // Hdot = y / z (z >= 2^-o > 0; diag may have flushed: weight 0)
            hd[k] = y0[k] / z0[k];
            hddiag[k] = diag0[k] > A(0) ? ydiag0[k] / diag0[k] : A(0);
          }
          if constexpr (AFFINE) {  // a node 0 (border, or flushed: negligible) is -inf
            ha[k] = log2_acc(za0[k]) + A(o[k]);
            hu[k] = log2_acc(zu0[k]) + A(o[k]);
            hb[k] = log2_acc(zb0[k]) + A(o[k]);
            hl[k] = log2_acc(zl0[k]) + A(o[k]);
          }
          sum_z[k] = best_z[k] = A(0);  // what the undone steps added
        }
        edge_h = log2_acc(edge_m) + edge_e;
        low_h = log2_acc(low_z0) + A(low_o0);
        if constexpr (TANGENT) low_y = low_y0 / low_z0;
        if constexpr (AFFINE) {
          edge_hu = log2_acc(edge_um) + edge_hd;
          low_y = log2_acc(low_y0) + A(low_o0);
        }
#pragma unroll
        for (int k = 0; k < R; ++k) {  // the undone steps' H are written again
          best_h[k] = best_h0[k];
          best_t[k] = best_t0[k];
        }
        if (STATE && !SOFT) fold_best();
        store_group = store_tail = -1;
        return g;
      }
      return kChunkSteps;
    };

    stage_chunk(0);
    if (chunks > 1) stage_chunk(1);
    else copy_async_commit();
    bool log_domain = false;
    // The band above's column of the next chunk (this lane's), loaded a chunk
    // ahead.
    typename Edge::Words next_edge;
    if (has_above && lane < n) next_edge = Edge::Words::load(edge_above + int64_t(lane) * Edge::kWords);
    for (int q = 0; q < chunks; ++q) {
      const int t0 = q * kChunkSteps;
      copy_async_wait<1>();  // chunk q has landed (q + 1 may still be in flight)
      __syncwarp();
      if (has_above && t0 < n) {
        const int col = t0 + lane;
        A v[Edge::kValues] = {A(1)};  // beyond the pair: the border's
        if (col < n) Edge::get(edge_above + int64_t(col) * Edge::kWords, col, v, next_edge);
        if (col + kChunkSteps < n)
          next_edge = Edge::Words::load(edge_above + int64_t(col + kChunkSteps) * Edge::kWords);
        edge_m = v[0];
        edge_e = v[1];
        if constexpr (TANGENT) edge_hd = v[2];
        if constexpr (AFFINE) {
          edge_um = v[2];
          edge_hd = v[3];
        }
        if (log_domain) {
          edge_h = log2_acc(edge_m) + edge_e;
          if constexpr (AFFINE) edge_hu = log2_acc(edge_um) + edge_hd;
        } else {
          edge_up = edge_m * pow2<A>(exponent_int(edge_e) - o_first);
          if constexpr (AFFINE) edge_yup = edge_um * pow2<A>(exponent_int(edge_hd) - o_first);
          else edge_yup = edge_up * edge_hd;
        }
      }
      const int slot = (q & 1) * kSlot;
      int log_from = 0;
      if (!log_domain) {
        const bool unchecked =
            rows_here == kBandRows && t0 >= kBandRows - 1 && t0 + kChunkSteps <= n;
        log_from = unchecked ? probability_chunk(t0, slot, std::false_type{})
                             : probability_chunk(t0, slot, std::true_type{});
        log_domain = log_from < kChunkSteps;
      }
      if (log_domain) log_steps(t0, log_from, slot);
      __syncwarp();  // every lane is done reading this slot
      if (q + 2 < chunks) stage_chunk(q + 2);
      else copy_async_commit();  // an empty group keeps the count of wait<1>
    }
    if constexpr (!kReduces) continue;
    if (!log_domain) {
      fold();
      if (STATE && !SOFT) fold_best();
    }

    SoftTotal<A> band_soft;
    MaxArg<A> band_best;
    if (SOFT) band_soft = soft;
    else if (STATE) band_best = best_cell;
    else band_best.best = best;  // index -1: no argmax at inference
    publish_band_reduction<T, A>(a.ws, unit_id, band, !has_below, SOFT, band_soft,
                                 band_best, b, a.unscale, a.score, a.total, a.argmax);
  }
}

}  // namespace cuda

namespace cuda {

// For a problem the probability-domain passes cover (runs_probability_forward:
// the training forward ran there too, so its state and the tangents share the
// layout of 32-row bands), calls f(args) with the arguments of a
// pass over it (outputs unset; a ProbabilityForwardArgs<T, A> of p's dtype)
// and returns true; returns false, calling nothing, for the others.
template <typename F>
bool run_probability_pass(const Problem& p, const Workspace& ws, F&& f) {
  if (!runs_probability_forward(p)) return false;
  dispatch_dtype(p.dtype, [&](auto* tag, auto acc) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using A = decltype(acc);
    ProbabilityForwardArgs<T, A> args;
    static_cast<WavefrontArgs<T, A>&>(args) = wavefront_args<T, A>(p, ws);
    args.unscale = A(p.temperature * kLn2);
    args.gap = args.open.value;  // constants (runs_probability_forward), or a tensor in args.open
    args.gap_weight = A(std::exp2(double(args.gap)));
    if (p.affine) {
      args.gap_extend = args.extend.value;
      args.gap_extend_weight = A(std::exp2(double(args.gap_extend)));
    }
    f(args);
  });
  return true;
}

}  // namespace cuda

bool probability_forward_cuda(const Problem& p, const ForwardOutputs& out,
                              const cuda::Workspace& ws, cudaStream_t s) {
  using namespace cuda;
  return run_probability_pass(p, ws, [&](auto& args) {
    using T = std::remove_pointer_t<decltype(args.score)>;
    using A = std::remove_pointer_t<decltype(args.hidden)>;
    args.score = static_cast<T*>(out.score);
    args.hidden = static_cast<A*>(out.hidden);
    args.argmax = out.argmax;
    args.total = static_cast<A*>(out.total);
    auto launch = [&](auto rows_per_lane, auto soft, auto state) {
      constexpr int R = decltype(rows_per_lane)::value;
      launch_persistent<probability_forward<T, A, R, soft(), state(), false>>(
          args, s, "probability_forward", staging_smem_bytes<T, R>());
    };
    if (p.gap_open.data) {  // one row per lane (rows_per_thread)
      // The second staging buffer at every launch (launch_persistent counts
      // a kernel's blocks an SM once), staged into or not.
      args.stage_gap = args.open.s2 == 1 && stages_gap_tensors();
      auto with_gap_tensor = [&](auto soft, auto state) {
        launch_persistent<probability_forward<T, A, 1, soft(), state(), false, false, true>>(
            args, s, "probability_forward (gap tensor)", 2 * staging_smem_bytes<T, 1>());
      };
      auto with_state = [&](auto soft) {
        if (args.hidden) with_gap_tensor(soft, std::true_type{});
        else with_gap_tensor(soft, std::false_type{});
      };
      if (args.soft_reduction) with_state(std::true_type{});
      else with_state(std::false_type{});
      return;
    }
    if (p.affine) {  // inference, one row per lane (runs_probability_forward, rows_per_thread)
      auto affine = [&](auto soft) {
        launch_persistent<probability_forward<T, A, 1, soft(), false, false, true>>(
            args, s, "probability_forward (affine)", staging_smem_bytes<T, 1>());
      };
      if (args.soft_reduction) affine(std::true_type{});
      else affine(std::false_type{});
      return;
    }
    // Rows per lane: with state as probability_state_rows says (bands of 64
    // rows at two, each storing two 32-row bands of the state; the workspace,
    // sized for 32-row bands, holds their fewer units); without, as
    // rows_per_thread says. One or two in float, one in double.
    auto with_state = [&](auto soft) {
      const auto one = std::integral_constant<int, 1>{};
      if constexpr (sizeof(A) == 4) {
        const auto two = std::integral_constant<int, 2>{};
        if (args.hidden && probability_state_rows(p) == 2) {
          args.nbands = bands_of(p.rows, 2 * kWarp);
          return launch(two, soft, std::true_type{});
        }
        if (!args.hidden && rows_per_thread(p) == 2) return launch(two, soft, std::false_type{});
      }
      if (args.hidden) return launch(one, soft, std::true_type{});
      launch(one, soft, std::false_type{});
    };
    if (args.soft_reduction) with_state(std::true_type{});
    else with_state(std::false_type{});
  });
}

bool probability_tangent_cuda(const Problem& p, const DoubleBackwardArgs& d, void* hdot,
                              const cuda::Workspace& ws, cudaStream_t s) {
  using namespace cuda;
  // The affine tangent, and the tangent with gap tensors (second derivatives
  // to the gaps too), run in the log domain (forward.cu).
  if (p.affine || p.has_gap_tensor()) return false;
  return run_probability_pass(p, ws, [&](auto& args) {
    using T = std::remove_pointer_t<decltype(args.score)>;
    using A = std::remove_pointer_t<decltype(args.hidden)>;
    args.hidden = static_cast<A*>(hdot);  // the band layout of the forward's state
    args.dir_scores = static_cast<const T*>(d.dir_scores);
    launch_persistent<probability_forward<T, A, 1, false, false, true>>(
        args, s, "probability_forward (tangent)", 2 * staging_smem_bytes<T, 1>());
  });
}

}  // namespace softsw
