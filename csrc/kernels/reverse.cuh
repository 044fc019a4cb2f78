// What the CUDA reverse passes share: their one argument struct, filled in one
// place (reverse_args), the merge of the double backward's <W, A>, and the
// staged reverse skeleton (reverse_staged, one or two rows per lane) with its
// row types in the passes. The passes: backward.cu (linear backward), affine.cu
// (affine backward, and its double-backward reverse pass), double_backward.cu
// (linear reverse tangent pass).
#pragma once

#include "problem.h"
#include "staging.cuh"
#include "wavefront.cuh"

namespace softsw {
namespace cuda {

template <typename T, typename A>
struct ReverseArgs : WavefrontArgs<T, A> {
  bool vector_ok;  // 16-byte access lines up for scores and grad_scores
  const T* grad_score;
  int64_t grad_score_stride;  // BackwardArgs has it
  const A* hidden;
  const int64_t* argmax;
  const A* total;
  // The outputs: the gradient, or in the double backward the Hessian-vector
  // product (hvp_*); gap outputs nullptr when not wanted.
  T* grad_scores;
  T* grad_open = nullptr;
  T* grad_extend = nullptr;
  // reverse_staged: the gap tensor (open) comes through shared memory, and
  // its gradient leaves through the same slot (launch_reverse_staged sets it).
  bool stage_gap = false;
  // The double backward's reverse pass only: the direction W (B, M, N)
  // contiguous, each nullptr for zero; the tangent pass's state (hdot,
  // hidden's layout) and soft-seed tangent (sdot, (B,), caller units); 1 / T
  // in caller units (0 when hard); <W, A> per pair; and for affine gaps the
  // second edge buffer (the contributions' tangents).
  const T* dir_scores = nullptr;
  const T* dir_open = nullptr;
  const T* dir_extend = nullptr;
  const A* hdot = nullptr;
  const A* sdot = nullptr;
  A inv_t = A(0);
  T* grad_grad_score = nullptr;
  unsigned long long* edges_dot = nullptr;
};

// The fields every reverse pass reads, for outputs of which `grad_scores` is
// the first.
template <typename T, typename A>
ReverseArgs<T, A> common_reverse_args(const Problem& p, const ForwardState& state,
                                      const void* grad_score, int64_t grad_score_stride,
                                      void* grad_scores, const Workspace& ws) {
  ReverseArgs<T, A> k;
  static_cast<WavefrontArgs<T, A>&>(k) = wavefront_args<T, A>(p, ws);
  k.vector_ok = vector_access_ok(p, p.scores) && vector_access_ok(p, grad_scores);
  k.grad_score = static_cast<const T*>(grad_score);
  k.grad_score_stride = grad_score_stride;
  k.hidden = static_cast<const A*>(state.hidden);
  k.argmax = state.argmax;
  k.total = static_cast<const A*>(state.total);
  k.grad_scores = static_cast<T*>(grad_scores);
  return k;
}

// The backward's arguments.
template <typename T, typename A>
ReverseArgs<T, A> reverse_args(const Problem& p, const BackwardArgs& args, const Workspace& ws) {
  ReverseArgs<T, A> k = common_reverse_args<T, A>(p, args.state, args.grad_score,
                                                  args.grad_score_stride, args.grad_scores, ws);
  k.grad_open = static_cast<T*>(args.grad_gap_open);
  k.grad_extend = static_cast<T*>(args.grad_gap_extend);
  return k;
}

// The double backward's reverse pass: the HVP as the outputs, the direction,
// the tangent pass's state, <W, A>.
template <typename T, typename A>
ReverseArgs<T, A> reverse_args(const Problem& p, const DoubleBackwardArgs& args,
                               const DoubleBackwardWorkspace& dws) {
  ReverseArgs<T, A> k = common_reverse_args<T, A>(p, args.state, args.grad_score,
                                                  args.grad_score_stride, args.hvp_scores, dws.ws);
  k.grad_open = static_cast<T*>(args.hvp_gap_open);
  k.grad_extend = static_cast<T*>(args.hvp_gap_extend);
  k.dir_scores = static_cast<const T*>(args.dir_scores);
  k.dir_open = static_cast<const T*>(args.dir_gap_open);
  k.dir_extend = static_cast<const T*>(args.dir_gap_extend);
  k.hdot = static_cast<const A*>(dws.hdot);
  k.sdot = static_cast<const A*>(dws.sdot);
  k.inv_t = runs_hard(p) ? A(0) : A(1.0 / p.temperature);
  k.grad_grad_score = static_cast<T*>(args.grad_grad_score);
  k.edges_dot = static_cast<unsigned long long*>(dws.edges_dot);
  return k;
}

// Every output of pair b NaN (every lane of the pair's band 0 calls this): a
// pair whose lengths are out of range, possible only where the Python-side
// check was skipped (graph capture), or whose argmax is outside them.
template <typename T, typename A>
__device__ void fill_invalid_pair(const ReverseArgs<T, A>& a, int64_t b, int lane) {
  const int64_t pair_offset = b * a.rows * a.cols;
  const T nan = store_as<T>(quiet_nan<A>());
  for (int64_t e = lane; e < a.rows * a.cols; e += kWarp) {
    a.grad_scores[pair_offset + e] = nan;
    if (a.grad_open) a.grad_open[pair_offset + e] = nan;
    if (a.grad_extend) a.grad_extend[pair_offset + e] = nan;
  }
  if (a.grad_grad_score && lane == 0) a.grad_grad_score[b] = nan;
}

// The double backward's <W, A> per pair, from each band's share (`share`,
// this lane's; reduced over the warp here; every lane calls this): a band
// below the top one publishes its share with a release flag; the pair's top
// band (band 0) waits for those of bands 1 .. `last` (they hold earlier
// tickets) and adds them in band order, a result independent of scheduling,
// into out[b].
template <typename T, typename A>
__device__ void merge_band_shares(const Workspace& ws, int64_t unit_id, int64_t band, int64_t last,
                                  A share, int64_t b, T* out) {
  share = warp_sum(share);
  if ((threadIdx.x & (kWarp - 1)) != 0) return;
  if (band > 0) {
    __stcg(&ws.partials[unit_id].a, double(share));
    store_release(ws.flags + unit_id, 1);
    return;
  }
  A acc = A(0) + share;
  for (int64_t k = 1; k <= last; ++k) {
    wait_for(ws.flags + unit_id + k, 1);
    acc += A(__ldcg(&ws.partials[unit_id + k].a));
  }
  out[b] = store_as<T>(acc);
}


// --------------------------------------------------------------------------
// The staged reverse skeleton (R rows per lane)
// --------------------------------------------------------------------------
//
// Bands of 32R rows (wavefront.cuh's geometry): lane l holds band rows lR ..
// lR + R - 1 and at step t handles column t - lR - k of its row k; steps run
// from the last anti-diagonal down to the first. A cell's adjoint takes what
// the cell to its right handed it (the row's own value of the step before)
// and what the row below handed it (up share of the step before, diagonal
// share of the step before that): row k < R - 1 takes row k + 1's from the
// lane's registers, the lane's last row from lane l + 1 (one shuffle), lane
// 31's last row from the band below's edge, so the R cells of a step are
// independent and share the step's skeleton work (ring copies and waits,
// shuffles, edge polls, checks). R = 2 can run the backward (AdjointRow) in
// float accumulate with linear constant gaps (reverse_staged_rows: measured
// slower, so on request only); the
// forward's state stays in its bands of 32 rows, two of which make a band
// of 64 (lanes 0-15 read the first, 16-31 the second).
//
// One skeleton, row types for what a pass carries (as forward.cu has for the
// gap models):
//  * AdjointRow (backward.cu): the adjoint E = d score / d H; writes
//    d score / d S (and the gap's with gap tensors).
//  * TangentAdjointRow (double_backward.cu): E and its tangent Edot along the
//    direction, reading the tangent pass's Hdot beside H and the direction W
//    beside S; writes the Hessian-vector product and sums <W, A>.
// A row's cell gets its stencil of the saved planes (Row::kPlanes: H, Hdot),
// its staged inputs (Row::kStaged: S in kernel units, W as given), the gap,
// the seed and what its readers handed it (`take`: the cell to its right's
// share, the row below's; one per carried value, Row::kValues), and returns
// what it hands the three cells it read (`give`: diagonal, up, left) and its
// results (CellResult): for the scores' slot, and with gap tensors for the
// gap's output. A row object lives for one band: it may hold per-pair values
// and sums (Row::finish).
//
// The scores (W, and in the backward a gap tensor with contiguous columns)
// reach the warp through shared memory a chunk of 32 steps
// ahead (staging.cuh): each step leaves its result in the slot over the score
// it read, and the finished chunk is stored a row at a time (coalesced). The
// planes come from the forward's (tangent pass's) band layout (one coalesced
// run per anti-diagonal) into a ring of 8 anti-diagonals in shared memory,
// copied (cp.async, a group a step) 8 steps before they are read: groups
// complete in order, so a step waits for the copies of its own three
// anti-diagonals (wait_group 5), not for the latest copy, as a wait on a
// register loaded from global memory would (every such load shares one
// scoreboard); the neighbour's values are read from the ring instead of
// shuffled. The row above the band comes a chunk ahead. For the backward,
// shared memory stays at the scores' two slots and the ring (37 KB a block in
// float), so that 6 blocks of 4 warps share an SM: while a band waits on the
// band below it others compute. At two rows a lane the slots hold 64 rows
// (74 KB a block in float, 3 blocks an SM; 43 KB with 2-byte scores, 5), and
// a lane's two values of an anti-diagonal, adjacent in the state, go over as
// one 8-byte copy where they are aligned.
constexpr int kHiddenRing = 8;
// The band edge between neighbouring bands goes over in groups of 8 columns,
// not whole chunks: a band then starts ~31 + 8 steps after the band below it
// instead of ~31 + 32 (with 16 bands a pair, fewer warps wait on the band
// pipeline). The tags are per column, so the group is this pass's choice.
constexpr int kEdgeGroup = 8;

// What a reverse cell reads of saved plane p around it: its own value, the
// cells above, on the diagonal and to the left.
template <typename A, int P>
struct ReverseStencil {
  A here[P], up[P], diag[P], left[P];
};

// The adjoint part of every linear row's cell: the weights p of the cell's
// three candidates (recomputed from H, plane 0 of the stencil, and its score
// s and gap g in kernel units), E = seed + what its readers handed it (value
// 0), and E p_k to the cells it read (value 0 of `give`). Returns p, and E in `E`.
template <typename A, bool HARD, int P, int V>
__device__ __forceinline__ Weights<A> linear_adjoint(const ReverseStencil<A, P>& h, A s, A g, A seed,
                                                     const A (&take)[2][V], A (&give)[3][V], A& E) {
  const Weights<A> p =
      LinearCell<A, HARD>::normalized_weights(h.here[0], h.diag[0] + s, h.up[0] + g, h.left[0] + g);
  E = seed + take[0][0] + take[1][0];
  give[0][0] = E * p.p1;
  give[1][0] = E * p.p2;
  give[2][0] = E * p.p3;
  return p;
}

// The tangents of a linear cell's weights along the direction, pdot_k =
// p_k (v_k - Hdot) / T, where v_k = Hdot of candidate k plus the direction
// on its move (the score's for the diagonal, the gap's for up and left), and
// the cell's own Hdot. That Hdot is taken as sum_k p_k v_k (the start term's
// v is 0), its definition, from the weights this pass uses, not as the
// tangent pass stored it: then sum_k pdot_k = 0 holds to rounding. A tangent
// pass in the probability domain computes Hdot from Z, not from the stored H
// these weights come from; in float32 at |H| ~ 1e3 the two weightings differ
// by ~1e-4, and the differences v_k - Hdot would carry that into the HVP.
template <typename A>
struct WeightTangents {
  A pd1, pd2, pd3, hd;  // pdot of diagonal, up, left; the cell's Hdot
};

template <typename A>
__device__ __forceinline__ WeightTangents<A> linear_weight_tangents(const Weights<A>& p, A v_diag,
                                                                  A v_up, A v_left, A inv_t) {
  const A hd = p.p1 * v_diag + p.p2 * v_up + p.p3 * v_left;
  return {p.p1 * (v_diag - hd) * inv_t, p.p2 * (v_up - hd) * inv_t,
          p.p3 * (v_left - hd) * inv_t, hd};
}

// What a reverse cell computes for its outputs: the derivative for the
// scores' output (written over the score in its slot), and with gap tensors
// the one for the gap's output.
template <typename A>
struct CellResult {
  A scores, gap;
};

// Bytes of shared memory of a block of reverse_staged with row type Row, R
// rows a lane, and (stage_gap) a staged gap tensor.
template <typename T, typename A, typename Row, int R>
constexpr size_t staged_reverse_smem_bytes(bool stage_gap) {
  return (Row::kStaged + (stage_gap ? 1 : 0)) * staging_smem_bytes<T, R>() +
         size_t(kWarpsPerBlock) * Row::kPlanes * kHiddenRing * kWarp * R * sizeof(A);
}

// Steps of a chunk unrolled together (see run_chunk): 8, but the whole chunk
// where the loop's extra live values would spill at the 80 registers of 6
// blocks an SM (one row a lane: 2-byte scores, gap tensors).
template <typename T, int R, bool GAP_TENSOR>
constexpr int kUnrolledSteps = R > 1 || (sizeof(T) >= 4 && (sizeof(T) == 8 || !GAP_TENSOR)) ? 8 : kChunkSteps;

// Blocks an SM reverse_staged's registers are held to. One row a lane: the
// row's, at most 3 where a gap tensor may be staged (its staging buffer
// leaves room for 3 in float). Two rows a lane: what the staging of 64-row
// slots leaves room for (74 KB a block in float: 3 blocks; 43 KB with 2-byte
// scores: 5).
template <typename T, typename Row, int R, bool GAP_TENSOR>
constexpr int kReverseMinBlocks = R > 1 ? (sizeof(T) == 2 ? 5 : 3)
                                : GAP_TENSOR && Row::kStagesGap && Row::kMinBlocks > 3 ? 3
                                                                                      : Row::kMinBlocks;

template <typename T, typename A, typename Row, int R, bool SOFT, bool GAP_TENSOR>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock, kReverseMinBlocks<T, Row, R, GAP_TENSOR>)
    reverse_staged(const ReverseArgs<T, A> a) {
  static_assert(kChunkSteps % kHiddenRing == 0, "a chunk starts the ring over");
  static_assert(R == 1 || (R == 2 && !GAP_TENSOR),
                "two rows a lane without gap tensors (a staged one would leave one block an SM)");
  constexpr int kBandRows = kWarp * R;
  // The forward's state is in bands of 32 rows (it ran one row a lane): a
  // band of 64 rows reads two of them (see the ring below).
  constexpr int kStateRows = kWarp;
  constexpr int kPitch = kStagePitch<T>;
  constexpr int kSlot = kBandRows * kPitch;
  constexpr int P = Row::kPlanes, V = Row::kValues, I = Row::kStaged;
  const int lane = threadIdx.x & (kWarp - 1);
  const int warp = threadIdx.x / kWarp;
  const int r0 = R * lane;  // this lane's first row of the band
  // A column of the band edge: the V values handed up, each a tagged word (or two).
  using Edge = TaggedEdge<A>;
  using EdgeWords = TaggedWords<V * Edge::kWords>;
  constexpr int kColumnWords = V * Edge::kWords;
  // GAP_TENSOR, a.stage_gap (the columns contiguous; any batch and row
  // strides): the gap tensor is staged as the inputs are, after them.
  const bool staged_gap = GAP_TENSOR && a.stage_gap;
  const int buffers = I + (staged_gap ? 1 : 0);
  // Shared memory: input i's staging (all warps), the gap's, then the warps' rings.
  extern __shared__ __align__(16) unsigned char stage_bytes[];
  T* stage[I];
#pragma unroll
  for (int i = 0; i < I; ++i)
    stage[i] = reinterpret_cast<T*>(stage_bytes + i * staging_smem_bytes<T, R>()) +
               warp * kStageElements<T, R>;
  T* const gap_stage = reinterpret_cast<T*>(stage_bytes + I * staging_smem_bytes<T, R>()) +
                       warp * kStageElements<T, R>;
  const T* const gap_end =  // one past the gap tensor's last element
      staged_gap ? a.open.data + (a.batch - 1) * a.open.s0 + (a.rows - 1) * a.open.s1 + a.cols : nullptr;
  // This warp's ring of plane p: anti-diagonal t at (t mod 8) * 32R, band row r at + r.
  A* const rings = reinterpret_cast<A*>(stage_bytes + buffers * staging_smem_bytes<T, R>()) +
                   warp * P * kHiddenRing * kBandRows;
  unsigned long long* const edges = static_cast<unsigned long long*>(a.ws.edges);
  const A* planes[P];  // plane p of every pair
  const T* inputs[I];  // input i (nullptr: zeros), and its tensor's end
  const T* inputs_end[I];
  {
    const A* all_planes[2] = {a.hidden, a.hdot};
    const T* all_inputs[2] = {a.scores, a.dir_scores};
#pragma unroll
    for (int p = 0; p < P; ++p) planes[p] = all_planes[p];
#pragma unroll
    for (int i = 0; i < I; ++i) {
      inputs[i] = all_inputs[i];
      inputs_end[i] = i == 0 || !all_inputs[i] ? a.scores_end : all_inputs[i] + a.batch * a.rows * a.cols;
    }
  }

  for (;;) {
    const TakenUnit unit = take_unit</*REVERSE=*/true>(a);
    if (!unit.taken) return;
    const int64_t b = unit.b, band = unit.band;
    const PairLengths len = pair_lengths(a.lengths, b, a.rows, a.cols);
    const int m = static_cast<int>(len.m), n = static_cast<int>(len.n);
    const int64_t pair_offset = b * a.rows * a.cols;
    Row row(a, b);
    if (!len.valid) {
      if (band == 0) fill_invalid_pair(a, b, lane);
      continue;
    }
    if (m == 0 || n == 0) {  // outputs were cleared
      if (band == 0) row.empty(a, b, lane);
      continue;
    }
    const int top = static_cast<int>(band) * kBandRows;
    if (top >= m) continue;  // outputs were cleared
    const int rows_here = m - top < kBandRows ? m - top : kBandRows;
    const bool has_above = band > 0;
    const bool has_below = top + kBandRows < m;
    const int64_t unit_id = b * a.nbands + band;
    const unsigned long long* edge_below = edges + (unit_id + 1) * a.cols * kColumnWords;
    unsigned long long* edge_above = edges + unit_id * a.cols * kColumnWords;
    const PairTotal<A> total = PairTotal<A>::load(a.total, b);
    const int64_t target = a.argmax[b];
    const int target_r = target >= 0 ? static_cast<int>(target / a.cols) : -1;
    const int target_c = target >= 0 ? static_cast<int>(target % a.cols) : -1;
    bool row_ok[R];  // row k of this lane is inside the pair
    int target_t[R];  // "max": the step at which row k reaches the argmax cell (-1: never)
#pragma unroll
    for (int k = 0; k < R; ++k) {
      row_ok[k] = r0 + k < rows_here;
      target_t[k] = top + r0 + k == target_r ? target_c + r0 + k : -1;
    }
    const int64_t band_offset = pair_offset + int64_t(top) * a.cols;
    T* const band_grads = a.grad_scores + band_offset;
    bool staged[I];   // input i is read (else zeros)
    T* srow[I][R];    // this lane's row k of input i's first slot
#pragma unroll
    for (int i = 0; i < I; ++i) {
      staged[i] = inputs[i] != nullptr;
#pragma unroll
      for (int k = 0; k < R; ++k)
        srow[i][k] = stage[i] + (k * kWarp + lane) * kPitch +
                     (staged[i] ? parallelogram_offset(inputs[i] + band_offset, a.cols, r0 + k) : 0);
    }
    // The staged gap: the band's first row (row stride a.open.s1, 0 for one
    // row broadcast to all), this lane's row of the first slot.
    const T* const band_gap = staged_gap ? a.open.data + b * a.open.s0 + int64_t(top) * a.open.s1 : nullptr;
    T* gap_row[R];
#pragma unroll
    for (int k = 0; k < R; ++k)
      gap_row[k] = gap_stage + (k * kWarp + lane) * kPitch +
                   (staged_gap ? parallelogram_offset(band_gap, a.open.s1, r0 + k) : 0);
    const int steps = n + rows_here - 1;
    const int chunks = (steps + kChunkSteps - 1) / kChunkSteps;

    // The lane's rows in the forward's state: its band of 32 rows (with two
    // rows a lane, lanes 0-15 in the band's first, 16-31 in its second) of
    // `state_rows` rows from pair row state_top, where cell (r, c) sits at
    // ((r + c) mod n) * state_rows + r (wavefront.cuh). The band's
    // anti-diagonal d (row r of the band at column d - r) is anti-diagonal
    // d - shift of the lane's state band, and the lane's rows are adjacent
    // on it.
    const int state_top = top + (r0 & ~(kStateRows - 1));
    const int state_rows = min(kStateRows, m - state_top);  // <= 0: the pair ends above
    const int shift = state_top - top;
    auto state_slot = [&](const int d) {
      const int s = (d - shift) % n;
      return s < 0 ? s + n : s;
    };
    // Rings: slot d % 8 holds plane p on anti-diagonal d (0 outside the pair).
    // Every step t, run or skipped, copies d = t - 8 into the slot it frees
    // (t % 8, known at compile time in the unrolled steps) as one group;
    // `next_slot` walks d's slot in the state down with it.
    const int t_top = chunks * kChunkSteps - 1;  // the last chunk's first step
    int next_slot = state_slot(t_top - kHiddenRing);
    auto ring = [&](const int p, const int x, const int r) -> A {
      return rings[(p * kHiddenRing + (x & (kHiddenRing - 1))) * kBandRows + r];
    };
    // This lane's R rows of plane p on anti-diagonal x (two floats: one 8-byte load).
    auto ring_rows = [&](const int p, const int x, A (&out)[R]) {
      const A* const at = rings + (p * kHiddenRing + (x & (kHiddenRing - 1))) * kBandRows + r0;
      if constexpr (R == 2 && sizeof(A) == 4) {
        const float2 v = *reinterpret_cast<const float2*>(at);
        out[0] = v.x;
        out[1] = v.y;
      } else {
#pragma unroll
        for (int k = 0; k < R; ++k) out[k] = at[k];
      }
    };
    const A* band_plane[P];  // plane p of the lane's state band, its first row
#pragma unroll
    for (int p = 0; p < P; ++p)
      band_plane[p] = planes[p] + pair_offset + int64_t(state_top) * n + (r0 - shift);
    // Two rows of floats a lane go over as one 8-byte copy where the
    // state's pairs of rows are 8-byte aligned (state bands of 32 rows, the
    // pair's state at an even offset): in the unchecked chunks (`wide`).
    bool wide_ok = R == 2 && sizeof(A) == 4;
#pragma unroll
    for (int p = 0; p < P; ++p)
      wide_ok &= (reinterpret_cast<uintptr_t>(planes[p] + pair_offset) & (2 * sizeof(A) - 1)) == 0;
    auto copy_ring = [&](const int x, const int slot, const bool (&ok)[R], const bool wide) {
#pragma unroll
      for (int p = 0; p < P; ++p) {
        A* const dst = rings + (p * kHiddenRing + (x & (kHiddenRing - 1))) * kBandRows + r0;
        if (R == 2 && wide) {
          copy_async<2 * sizeof(A)>(dst, band_plane[p] + int64_t(slot) * kStateRows, true);
        } else {
#pragma unroll
          for (int k = 0; k < R; ++k)
            copy_async<sizeof(A)>(dst + k, ok[k] ? band_plane[p] + int64_t(slot) * state_rows + k : planes[p],
                                  ok[k]);
        }
      }
      copy_async_commit();
    };
    // The copies of anti-diagonal d: row k's inside the pair where `checked`.
    auto ring_ok = [&](const int d, const bool checked, bool (&ok)[R]) {
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int c = d - r0 - k;
        ok[k] = !checked || (row_ok[k] && c >= 0 && c < n);
      }
    };
    auto load_ring = [&](const int t, const int x, auto checked) {
      constexpr bool kChecked = decltype(checked)::value;
      bool ok[R];
      ring_ok(t - kHiddenRing, kChecked, ok);
      copy_ring(x, next_slot, ok, !kChecked && wide_ok);
      next_slot = next_slot == 0 ? n - 1 : next_slot - 1;
    };

    // The planes of the row above the band on a chunk's columns 32q + l: this
    // chunk's (up: column c, diag: column c - 1) and the next chunk's, loaded
    // ahead. The state band above's last row: cell (31, c) at ((31 + c) mod n) * 32 + 31.
    A above_up[P], above_diag[P], next_up[P], next_diag[P];
#pragma unroll
    for (int p = 0; p < P; ++p) above_up[p] = above_diag[p] = next_up[p] = next_diag[p] = A(0);
    auto load_above = [&](int q) {
      const int c = kChunkSteps * q + lane;
#pragma unroll
      for (int p = 0; p < P; ++p) next_up[p] = next_diag[p] = A(0);
      if (!has_above || q < 0 || c - 1 >= n) return;
      const int slot_up = (kStateRows - 1 + c) % n;
      const int slot_diag = slot_up == 0 ? n - 1 : slot_up - 1;
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const A* above = planes[p] + pair_offset + int64_t(top - kStateRows) * n + kStateRows - 1;
        next_up[p] = c < n ? __ldg(above + int64_t(slot_up) * kStateRows) : A(0);
        next_diag[p] = c >= 1 ? __ldg(above + int64_t(slot_diag) * kStateRows) : A(0);
      }
    };
    load_above(chunks - 1);

    // What this lane's row k handed on the last two steps: m1 (this step's
    // diagonal share), m1p (the step before's), m2 (up), m3 (left); each a
    // value per carried value.
    A m1[R][V], m1p[R][V], m2[R][V], m3[R][V];
    A below_reg[V];       // the band below's contributions (lane 31's columns, mod 32)
#pragma unroll
    for (int v = 0; v < V; ++v) {
#pragma unroll
      for (int k = 0; k < R; ++k) m1[k][v] = m1p[k][v] = m2[k][v] = m3[k][v] = A(0);
      below_reg[v] = A(0);
    }
    EdgeWords below_next;  // ... this lane's next group's, loaded ahead (or none yet)
    EdgeChunk<A, V> to_above;  // the band's top row's contributions, for the band above

    // One reverse step on this lane's cells (r0 + k, t - r0 - k) with inputs
    // in[k] and (staged_gap) the staged gaps gap[k] (x = t mod 32, a constant
    // in the unrolled chunks); the cells' results to `result` (a gap
    // tensor's gradient already written when it is not staged). The R cells
    // of a step are independent: row k takes row k + 1's shares of the
    // steps before. Conditions on the step's place in its chunk use x:
    // constants in the unrolled chunks. Lane 31's last row's column c_last =
    // t - (32R - 1) has c_last mod 32 = (x + 1) mod 32.
    auto step = [&](const int t, const int x, const A (&in)[R][I], const A (&gap)[R], const bool checked,
                    CellResult<A> (&result)[R]) {
      const int c_last = t - (kBandRows - 1);
      const int x_last = (x + 1) & (kWarp - 1);
      // A group of the band below's contributions (kEdgeGroup columns, the
      // lanes of its columns): at its last column, or at the pair's last
      // column (only in checked chunks: c_last < n - 31 else).
      if (has_below && ((x_last & (kEdgeGroup - 1)) == kEdgeGroup - 1 || (checked && c_last == n - 1)) &&
          c_last >= 0 && c_last < n) {
        const int c = (c_last & ~(kWarp - 1)) + lane;
        const int first = c_last & ~(kEdgeGroup - 1);
        if (c >= first && c <= c_last) {
          const EdgeWords w = below_next.settle(edge_below + int64_t(c) * kColumnWords, c);
#pragma unroll
          for (int v = 0; v < V; ++v) below_reg[v] = tagged_value<A>(w, v * Edge::kWords);
        }
        // The next group's words (columns run downwards; after a chunk's
        // first group, the last group of the chunk before), loaded a group
        // ahead by the lanes that read them; not with 2-byte scores, whose
        // staging code needs the registers (it would spill).
        const int next = first - kEdgeGroup;
        if (sizeof(T) >= 4 && next >= 0 && lane / kEdgeGroup == (next & (kWarp - 1)) / kEdgeGroup)
          below_next = EdgeWords::load(edge_below + int64_t((next & ~(kWarp - 1)) + lane) * kColumnWords);
      }
      // The row above the lane's first row: lane l - 1's last (lane 0: the edge).
      const int r_up = lane > 0 ? r0 - 1 : 0;
      ReverseStencil<A, P> h[R];
#pragma unroll
      for (int p = 0; p < P; ++p) {
        A here[R], left[R];
        ring_rows(p, x, here);
        ring_rows(p, x - 1, left);
        const A up_lane = ring(p, x - 1, r_up);
        const A diag_lane = ring(p, x - 2, r_up);
        const A up_edge = __shfl_sync(kFullMask, above_up[p], x);
        const A diag_edge = __shfl_sync(kFullMask, above_diag[p], x);
#pragma unroll
        for (int k = 0; k < R; ++k) {
          h[k].here[p] = here[k];
          h[k].left[p] = left[k];
          if (k == 0) {
            h[k].up[p] = lane != 0 ? up_lane : up_edge;  // the edge is 0 with no band above
            h[k].diag[p] = lane != 0 ? diag_lane : diag_edge;
          } else {  // the lane's row k - 1
            h[k].up[p] = left[k - 1];
            h[k].diag[p] = ring(p, x - 2, r0 + k - 1);
          }
        }
      }
      // What the cells' readers handed them: the cell to the right, the row below.
      A take[R][2][V];
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const A below = __shfl_sync(kFullMask, below_reg[v], x_last);
        const A down_lane = __shfl_down_sync(kFullMask, m2[0][v] + m1p[0][v], 1);
#pragma unroll
        for (int k = 0; k < R; ++k) {
          take[k][0][v] = m3[k][v];
          if (k < R - 1) take[k][1][v] = m2[k + 1][v] + m1p[k + 1][v];
          else take[k][1][v] = lane != kWarp - 1 ? down_lane : below;  // 0 with no band below
        }
      }

      A give[R][3][V] = {};
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int c = t - r0 - k, r = top + r0 + k;
        result[k] = {A(0), A(0)};
        if (!checked || (c >= 0 && c < n && row_ok[k])) {
          const A g = staged_gap ? gap[k] : a.open.template at<GAP_TENSOR>(b, r, c);
          A seed;
          if constexpr (SOFT) seed = total.seed(h[k].here[0]);
          else seed = t == target_t[k] ? A(1) : A(0);
          result[k] = row.template cell<SOFT, GAP_TENSOR>(a, b, r, c, h[k], in[k], g, seed, take[k], give[k]);
          if (GAP_TENSOR && a.grad_open && !staged_gap)
            a.grad_open[pair_offset + int64_t(r) * a.cols + c] = store_as<T>(result[k].gap);
        }
      }
      // Lane 0's first row is the band's top row: hand its contributions up.
      if (has_above) {
#pragma unroll
        for (int v = 0; v < V; ++v) to_above.collect(v, give[0][1][v] + m1[0][v], 0, x, lane);
        // Columns run downwards: a group is done at its first column.
        if ((x & (kEdgeGroup - 1)) == 0 && t < n)
          to_above.store(edge_above, t, min(t + kEdgeGroup - 1, n - 1), lane);
      }
#pragma unroll
      for (int k = 0; k < R; ++k) {
#pragma unroll
        for (int v = 0; v < V; ++v) {
          m1p[k][v] = m1[k][v];
          m1[k][v] = give[k][0][v];
          m2[k][v] = give[k][1][v];
          m3[k][v] = give[k][2][v];
        }
      }
    };

    // Chunk q: steps 32q + 31 down to 32q (those below `steps`), 8 at a time
    // in a loop, unrolled within: the ring's slot and the step's place in an
    // edge group (x mod 8) are then known at compile time, and the kernel's
    // code stays small enough for the instruction cache (a chunk unrolled
    // whole made ~12,000 instructions).
    constexpr int kUnrolled = kUnrolledSteps<T, R, GAP_TENSOR>;
    static_assert(kUnrolled % kHiddenRing == 0 && kUnrolled % kEdgeGroup == 0 &&
                      kChunkSteps % kUnrolled == 0,
                  "x mod 8 is a constant of the unrolled steps");
    auto run_chunk = [&](const int q, auto checked) {
      constexpr bool kChecked = decltype(checked)::value;
      const int t0 = q * kChunkSteps;
      const int slot = (q & 1) * kSlot;
#pragma unroll 1
      for (int x0 = kChunkSteps - kUnrolled; x0 >= 0; x0 -= kUnrolled) {
#pragma unroll
        for (int j = kUnrolled - 1; j >= 0; --j) {
          const int x = x0 + j;
          const int t = t0 + x;
          // Steps t, t - 1, t - 2 of the rings (copied 8, 7, 6 steps ago) and
          // the chunk's inputs (staged a chunk before) have landed, for every
          // lane: the 5 groups since may still be in flight.
          copy_async_wait<kHiddenRing - 3>();
          __syncwarp();
          if (!kChecked || t < steps) {
            A in[R][I], gap[R];
#pragma unroll
            for (int k = 0; k < R; ++k) {
              in[k][0] = scaled(to_acc<A>(srow[0][k][slot + x]), a.scale);
#pragma unroll
              for (int i = 1; i < I; ++i) in[k][i] = staged[i] ? to_acc<A>(srow[i][k][slot + x]) : A(0);
              gap[k] = staged_gap ? scaled(to_acc<A>(gap_row[k][slot + x]), a.open.scale) : A(0);
            }
            CellResult<A> result[R];
            step(t, x, in, gap, kChecked, result);
#pragma unroll
            for (int k = 0; k < R; ++k) {
              const int c = t - r0 - k;
              if (!kChecked || (c >= 0 && c < n && row_ok[k])) {
                srow[0][k][slot + x] = store_as<T>(result[k].scores);
                if (staged_gap) gap_row[k][slot + x] = store_as<T>(result[k].gap);
              }
            }
          }
          load_ring(t, x, checked);
        }
      }
    };

    auto stage_chunk = [&](int q) {
#pragma unroll
      for (int i = 0; i < I; ++i)
        if (staged[i])
          stage_parallelogram<T, R>(stage[i] + (q & 1) * kSlot, inputs[i] + band_offset, a.cols, q,
                                    rows_here, n, inputs[i], inputs_end[i], lane);
      if (staged_gap)
        stage_parallelogram<T, R>(gap_stage + (q & 1) * kSlot, band_gap, a.open.s1, q, rows_here, n,
                                  a.open.data, gap_end, lane);
      copy_async_commit();  // one group for the chunk's inputs
    };
    // The first two chunks' inputs, then the rings' first 8 anti-diagonals
    // (t_top .. t_top - 7): groups complete in order, so a step's wait for
    // its ring slots covers its chunk's inputs too.
    stage_chunk(chunks - 1);
    if (chunks > 1) stage_chunk(chunks - 2);
#pragma unroll
    for (int i = 0; i < kHiddenRing; ++i) {
      bool ok[R];
      ring_ok(t_top - i, true, ok);
      copy_ring(kChunkSteps - 1 - i, state_slot(t_top - i), ok, false);
    }
    for (int q = chunks - 1; q >= 0; --q) {
      const int t0 = q * kChunkSteps;
#pragma unroll
      for (int p = 0; p < P; ++p) {
        above_up[p] = next_up[p];
        above_diag[p] = next_diag[p];
      }
      load_above(q - 1);
      // Unchecked: every cell of every lane inside the pair, also the
      // anti-diagonals 8 steps below (loaded in the chunk) for every lane.
      const bool unchecked = rows_here == kBandRows && t0 >= kBandRows - 1 + kHiddenRing &&
                             t0 + kChunkSteps <= n;
      if (unchecked) run_chunk(q, std::false_type{});
      else run_chunk(q, std::true_type{});
      __syncwarp();  // every lane's results are in the slot
      flush_parallelogram<T, R>(stage[0] + (q & 1) * kSlot, band_grads, a.cols, q, rows_here, n,
                                [&](int row_) { return parallelogram_offset(a.scores + band_offset, a.cols, row_); },
                                lane);
      if (staged_gap && a.grad_open)
        flush_parallelogram<T, R>(gap_stage + (q & 1) * kSlot, a.grad_open + band_offset, a.cols, q,
                                  rows_here, n,
                                  [&](int row_) { return parallelogram_offset(band_gap, a.open.s1, row_); },
                                  lane);
      __syncwarp();  // the slot is free again
      if (q >= 2) stage_chunk(q - 2);
    }
    copy_async_wait<0>();  // the rings' last (empty) copies, before the next band's
    __syncwarp();
    row.finish(a, unit_id, band, (m - 1) / kBandRows, b);
  }
}

// Launch reverse_staged with row type Row and R rows a lane on `stream`: the
// soft reduction's variant where the problem asks for it, except in hard
// mode, which seeds the argmax alone. A gap tensor with contiguous columns is
// staged where the row allows it (Row::kStagesGap) and stages_gap_tensors()
// says so. A kernel's shared memory is the same at every launch
// (launch_persistent sets the limit and counts the blocks an SM once a
// kernel): the gap's buffer whenever the variant may stage it. The pass's
// bands are 32R rows: fewer than the workspace's (sized for the forward's
// 32-row bands) with two rows a lane.
template <typename T, typename A, typename Row, int R, bool GAP_TENSOR>
inline void launch_reverse_staged(const ReverseArgs<T, A>& args, cudaStream_t stream,
                                  const char* name) {
  constexpr bool kMayStageGap = GAP_TENSOR && Row::kStagesGap;
  ReverseArgs<T, A> k = args;
  k.stage_gap = kMayStageGap && k.open.data && k.open.s2 == 1 && stages_gap_tensors();
  k.nbands = bands_of(k.rows, kWarp * R);
  constexpr size_t smem = staged_reverse_smem_bytes<T, A, Row, R>(kMayStageGap);
  if constexpr (!Row::kHard) {
    if (k.soft_reduction)
      return launch_persistent<reverse_staged<T, A, Row, R, true, GAP_TENSOR>>(k, stream, name, smem);
  }
  launch_persistent<reverse_staged<T, A, Row, R, false, GAP_TENSOR>>(k, stream, name, smem);
}


// SOFTSW_STAGED_BACKWARD=0 runs the problems of one row per lane on the
// unstaged kernels of the tall problems too (backward_wavefront,
// reverse_tangent_wavefront) instead of reverse_staged: for benchmarks of the
// choice, and the emulation's check of those kernels on every shape.
inline bool staged_backward() {
  static const bool on = !env_is_zero("SOFTSW_STAGED_BACKWARD");
  return on;
}

// Rows per lane of the backward's reverse_staged (AdjointRow): two for linear
// gaps held constant, accumulated in float, on pairs taller than one band of
// 32 rows; one else (double: two 64-row staging slots of doubles would leave
// one block an SM; a gap tensor's staging buffer would double the shared
// memory). Two rows give each step two independent cells and share the
// step's skeleton (ring copies and waits, shuffles, edge polls, checks)
// between them; the band pipeline has half the bands. But the 64-row slots
// leave 3 blocks an SM (12 warps) where one row runs 6, and measured on the
// H100 (fp32, soft, 2026-12-07) the backward took 0.265 / 0.862 / 3.337 ms
// at two rows against 0.243 / 0.847 / 2.992 at one (1024x128^2, 256x512^2,
// 8x4096^2). So one row runs; SOFTSW_REVERSE_ROWS=2 runs two where they
// apply (for benchmarks of the choice, and the emulation's check of them).
inline int reverse_staged_rows(const Problem& p) {
  static const int rows = [] {
    const char* e = std::getenv("SOFTSW_REVERSE_ROWS");
    return e && e[0] == '2' && e[1] == 0 ? 2 : 1;
  }();
  const bool two = !accumulates_in_double(p.dtype) && !p.affine && !p.has_gap_tensor() && p.rows > kWarp;
  return two ? rows : 1;
}

}  // namespace cuda
}  // namespace softsw
