// Backward pass on CUDA: the reverse wavefront of docs/math.md. The adjoint
// E = d score / d H flows from each cell to the three cells it read; a cell's
// transition weights are recomputed from the forward's saved H (wavefront.cuh
// gives the layout), and d score / d S = E * p1, d score / d g = E * (p2 + p3).
//
// The band skeleton is the forward's mirrored: steps run from the last
// anti-diagonal to the first, a lane's last row takes what the row below
// contributes from lane l+1 (one shuffle), and the band below hands its first
// row's contributions up through global memory (tagged words). Two kernels:
// backward_staged (one row per lane: the problems whose forward ran with one,
// wavefront.cuh's rows_per_thread) reads the scores through shared memory and
// writes the gradient back the same way; backward_wavefront (four rows per
// lane, tall log-domain problems) runs the bulk of a tall band unchecked in
// groups of 4 steps with 16-byte loads of S and H and 16-byte stores of the
// gradient; the fill and drain check every cell.
#include "affine.cuh"
#include "reverse.cuh"
#include "staging.cuh"
#include "wavefront.cuh"

namespace softsw {
namespace cuda {

template <typename T, typename A, int R, bool HARD, bool GAP_TENSOR>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock)
    backward_wavefront(const ReverseArgs<T, A> a) {
  using Cell = LinearCell<A, HARD>;
  constexpr int kBandRows = kWarp * R;
  const int lane = threadIdx.x & (kWarp - 1);
  const bool soft_reduction = a.soft_reduction && !HARD;
  using Edge = TaggedEdge<A>;
  unsigned long long* const edges = static_cast<unsigned long long*>(a.ws.edges);

  for (;;) {
    const TakenUnit unit = take_unit</*REVERSE=*/true>(a);
    if (!unit.taken) return;
    const int64_t b = unit.b, band = unit.band;
    const PairLengths len = pair_lengths(a.lengths, b, a.rows, a.cols);
    const int m = static_cast<int>(len.m), n = static_cast<int>(len.n);
    const int64_t pair_offset = b * a.rows * a.cols;
    if (!len.valid) {
      if (band == 0) {
        for (int64_t e = lane; e < a.rows * a.cols; e += kWarp) {
          a.grad_scores[pair_offset + e] = store_as<T>(quiet_nan<A>());
          if (a.grad_open) a.grad_open[pair_offset + e] = store_as<T>(quiet_nan<A>());
        }
      }
      continue;
    }
    const int top = static_cast<int>(band) * kBandRows;
    if (m == 0 || n == 0 || top >= m) continue;  // outputs were cleared
    const int rows_here = m - top < kBandRows ? m - top : kBandRows;
    const bool has_above = band > 0;
    const bool has_below = top + kBandRows < m;
    const int64_t unit_id = b * a.nbands + band;
    const unsigned long long* edge_below = edges + (unit_id + 1) * a.cols * Edge::kWords;
    unsigned long long* edge_above = edges + unit_id * a.cols * Edge::kWords;
    const A* hidden = a.hidden + pair_offset + int64_t(top) * n;
    const A* hidden_above = a.hidden + pair_offset + int64_t(top - kBandRows) * n;
    const A g_out = load_as<A>(a.grad_score + b * a.grad_score_stride);
    const PairTotal<A> total = PairTotal<A>::load(a.total, b);
    const int64_t target = a.argmax[b];
    const int target_r = target >= 0 ? static_cast<int>(target / a.cols) : -1;
    const int target_c = target >= 0 ? static_cast<int>(target % a.cols) : -1;

    const int r0 = lane * R;
    const T* srow[R];
    T* grow[R];
    bool row_ok[R];
#pragma unroll
    for (int k = 0; k < R; ++k) {
      row_ok[k] = top + r0 + k < m;
      srow[k] = a.scores + pair_offset + int64_t(top + r0 + k) * a.cols;
      grow[k] = a.grad_scores + pair_offset + int64_t(top + r0 + k) * a.cols;
    }

    // H of this lane's rows on anti-diagonal d (0 where the cell is outside).
    auto load_diagonal = [&](int d, A (&out)[R], bool checked) {
      const int slot = d >= 0 ? d % n : 0;
      const A* at = hidden + int64_t(slot) * rows_here + r0;
      if (!checked && R == 4 && a.vector_ok) {
        if constexpr (R == 4) load4<A, A>(at, A(1), out);
      } else {
#pragma unroll
        for (int k = 0; k < R; ++k) {
          const int c = d - r0 - k;
          out[k] = (c >= 0 && c < n && row_ok[k]) ? __ldg(at + k) : A(0);
        }
      }
    };
    // H on anti-diagonals t, t-1, t-2, and t-3: loaded one step before it is
    // first read (a load at the end of step t is read in step t-2), so that
    // its latency passes behind a whole step.
    A w0[R], w1[R], w2[R], w3[R];
    const int lanes_active = (rows_here + R - 1) / R;
    const int steps = n + lanes_active * R - 1;
    load_diagonal(steps - 1, w0, true);
    load_diagonal(steps - 2, w1, true);
    load_diagonal(steps - 3, w2, true);
    load_diagonal(steps - 4, w3, true);

    // Contributions E * p_k this lane's rows made on the last two steps.
    A m1[R], m1p[R], m2[R], m3[R];
#pragma unroll
    for (int k = 0; k < R; ++k) m1[k] = m1p[k] = m2[k] = m3[k] = A(0);
    A above_up = A(0), above_diag = A(0);  // H of the row above the band (lane 0's chunk)
    A below_reg = A(0);                    // contributions of the band below (lane 31's chunk)
    EdgeChunk<A, 1> to_above;  // the band's top row's contributions, for the band above

    // One reverse step; `s[k]` is row k's score (kernel units); returns each
    // row's d score / d S (times g_out) in `grad`.
    auto step = [&](const int t, const A (&s)[R], A (&grad)[R], const bool checked) {
      if (has_above && t < n && ((t & (kWarp - 1)) == kWarp - 1 || t == n - 1)) {
        const int c = (t & ~(kWarp - 1)) + lane;
        const int slot_up = (kBandRows - 1 + c) % n;
        const int slot_diag = (kBandRows - 1 + c - 1 + n) % n;
        above_up = c < n ? __ldg(hidden_above + int64_t(slot_up) * kBandRows + kBandRows - 1)
                         : A(0);
        above_diag = (c >= 1 && c - 1 < n)
                         ? __ldg(hidden_above + int64_t(slot_diag) * kBandRows + kBandRows - 1)
                         : A(0);
      }
      const int c_last = t - (kBandRows - 1);
      if (has_below && c_last >= 0 && c_last < n &&
          ((c_last & (kWarp - 1)) == kWarp - 1 || c_last == n - 1)) {
        const int c = (c_last & ~(kWarp - 1)) + lane;
        below_reg = c < n ? Edge::get(edge_below + int64_t(c) * Edge::kWords, c) : A(0);
      }
      const int src = t & (kWarp - 1);
      A up0 = __shfl_up_sync(kFullMask, w1[R - 1], 1);
      A diag0 = __shfl_up_sync(kFullMask, w2[R - 1], 1);
      const A chunk_up = __shfl_sync(kFullMask, above_up, src);
      const A chunk_diag = __shfl_sync(kFullMask, above_diag, src);
      if (lane == 0) {
        up0 = has_above ? chunk_up : A(0);
        diag0 = has_above ? chunk_diag : A(0);
      }
      A down = __shfl_down_sync(kFullMask, m2[0] + m1p[0], 1);
      const A chunk_below = __shfl_sync(kFullMask, below_reg, c_last & (kWarp - 1));
      if (lane == kWarp - 1) down = has_below ? chunk_below : A(0);

      A n1[R], n2[R], n3[R];
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int c = t - r0 - k;
        const int r = top + r0 + k;
        n1[k] = n2[k] = n3[k] = A(0);
        grad[k] = A(0);
        if (!checked || (c >= 0 && c < n && row_ok[k])) {
          const A up = k == 0 ? up0 : w1[k - 1];
          const A diag = k == 0 ? diag0 : w2[k - 1];
          const A h = w0[k];
          const A g = a.open.template at<GAP_TENSOR>(b, r, c);
          const Weights<A> p = Cell::normalized_weights(h, diag + s[k], up + g, w1[k] + g);
          const A seed = soft_reduction ? total.seed(h)
                                        : (r == target_r && c == target_c ? A(1) : A(0));
          const A from_below = k == R - 1 ? down : m2[k + 1] + m1p[k + 1];
          const A E = seed + m3[k] + from_below;
          n1[k] = E * p.p1;
          n2[k] = E * p.p2;
          n3[k] = E * p.p3;
          grad[k] = n1[k] * g_out;
          if (a.grad_open) a.grad_open[pair_offset + int64_t(r) * a.cols + c] =
              store_as<T>((n2[k] + n3[k]) * g_out);
        }
      }

      // Lane 0's first row is the band's top row: hand its contributions up.
      if (has_above) {
        to_above.collect(0, n2[0] + m1[0], 0, t, lane);
        // Columns run downwards: a chunk is done at its first column.
        if (t < n && (t & (kWarp - 1)) == 0) to_above.store(edge_above, t, min(t + kWarp - 1, n - 1), lane);
      }

#pragma unroll
      for (int k = 0; k < R; ++k) {
        m1p[k] = m1[k];
        m1[k] = n1[k];
        m2[k] = n2[k];
        m3[k] = n3[k];
        w0[k] = w1[k];
        w1[k] = w2[k];
        w2[k] = w3[k];
      }
    };

    // Steps to - 1 down to from. Unchecked (CHECKED false) only where every
    // cell of every lane is inside the pair.
    auto run_steps = [&](int from, int to, auto checked) {
      constexpr bool kChecked = decltype(checked)::value;
      auto load = [&](int t, T (&raw)[R]) {  // converted when used (load_raw)
#pragma unroll
        for (int k = 0; k < R; ++k) {
          const int c = t - r0 - k;
          const bool inside = kChecked ? (c >= 0 && c < n && row_ok[k]) : true;
          raw[k] = (t >= from && inside) ? load_raw(srow[k] + c) : raw_zero<T>();
        }
      };
      T s_next[R];
      load(to - 1, s_next);
      for (int t = to - 1; t >= from; --t) {
        A s[R], grad[R];
#pragma unroll
        for (int k = 0; k < R; ++k) s[k] = scaled(to_acc<A>(s_next[k]), a.scale);
        load(t - 1, s_next);
        step(t, s, grad, kChecked);
#pragma unroll
        for (int k = 0; k < R; ++k) {
          const int c = t - r0 - k;
          if (!kChecked || (c >= 0 && c < n && row_ok[k])) grow[k][c] = store_as<T>(grad[k]);
        }
        load_diagonal(t - 4, w3, kChecked || t - 4 < kBandRows - 1);
      }
    };

    // As in the forward: steps kBandRows - 1 .. n - 1 of a full band run
    // unchecked, whole aligned groups of 4 among them (R = 4) as the bulk.
    const bool full = rows_here == kBandRows && n > kBandRows - 1;
    const int plain_begin = full ? kBandRows - 1 : 0;
    const int plain_end = full ? n : 0;
    int bulk_begin = plain_end, bulk_end = plain_end;
    if constexpr (R == 4) {
      if (a.vector_ok && full) {
        const int first = (kBandRows - 1 + 3) & ~3;
        const int last = n & ~3;
        if (last > first) {
          bulk_begin = first;
          bulk_end = last;
        }
      }
    }
    run_steps(plain_end, steps, std::true_type{});
    run_steps(bulk_end, plain_end, std::false_type{});
    if constexpr (R == 4) {
      if (bulk_end > bulk_begin) {
        // Group g (steps 4g+3 .. 4g) touches, in row k, columns 4q + j - k
        // (q = g - l, j = 3..0): the head of vector q and the tail of q-1.
        A vp[R][4], vc[R][4];
        Raw4<T> vn[R];         // the next group's vectors, converted when used
        A gc[R][4], gn[R][4];  // gradient of vector q (completed this group) and q-1
        auto load_vec = [&](int k, int q) {
          return q >= 0 && 4 * q + 3 < a.cols ? load_raw4(srow[k] + 4 * q) : raw4_zero<T>();
        };
        const int q_top = (bulk_end - 4) / 4 - lane;
#pragma unroll
        for (int k = 0; k < R; ++k) {
          convert4(load_vec(k, q_top), a.scale, vc[k]);
          convert4(load_vec(k, q_top - 1), a.scale, vp[k]);
        }
        for (int t0 = bulk_end - 4; t0 >= bulk_begin; t0 -= 4) {
          const int q = t0 / 4 - lane;
          const bool first_group = t0 == bulk_end - 4;
#pragma unroll
          for (int k = 0; k < R; ++k) vn[k] = load_vec(k, q - 2);
#pragma unroll
          for (int j = 3; j >= 0; --j) {
            A s[R], grad[R];
#pragma unroll
            for (int k = 0; k < R; ++k) s[k] = j >= k ? vc[k][j - k] : vp[k][4 + j - k];
            step(t0 + j, s, grad, false);
#pragma unroll
            for (int k = 0; k < R; ++k) {
              if (j >= k) gc[k][j - k] = grad[k];
              else gn[k][4 + j - k] = grad[k];
            }
            // H four diagonals back: all inside unless near the fill.
            const int d = t0 + j - 4;
            load_diagonal(d, w3, d < kBandRows - 1);
          }
#pragma unroll
          for (int k = 0; k < R; ++k) {
            if (first_group) {  // the tail of vector q went out with the checked steps
#pragma unroll
              for (int i = 0; i < 4; ++i)
                if (i + k <= 3) grow[k][4 * q + i] = store_as<T>(gc[k][i]);
            } else {
              store4<T, A>(grow[k] + 4 * q, gc[k]);
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              gc[k][i] = gn[k][i];
              vc[k][i] = vp[k][i];
            }
            convert4(vn[k], a.scale, vp[k]);
          }
        }
        // Vector q-1 of the lowest group is only partly done: store its tail,
        // the checked steps below write the rest.
        const int q_low = bulk_begin / 4 - lane - 1;
#pragma unroll
        for (int k = 0; k < R; ++k)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            if (i >= 4 - k) grow[k][4 * q_low + i] = store_as<T>(gc[k][i]);
      }
    }
    run_steps(plain_begin, bulk_begin, std::false_type{});
    run_steps(0, plain_begin, std::true_type{});
  }
}


// One row per lane (R = 1), the scores staged through shared memory a chunk
// of 32 steps ahead (staging.cuh): each step leaves its d score / d S in the
// slot over the score it read, and the finished chunk is stored a row at a
// time (coalesced). H of the band comes from `hidden` (one coalesced run per
// anti-diagonal) into a ring of 8 anti-diagonals in shared memory, copied
// (cp.async, a group a step) 8 steps before it is read: groups complete in
// order, so a step waits for the copies of its own three anti-diagonals
// (wait_group 5), not for the latest copy, as a wait on a register loaded
// from global memory would (every such load shares one scoreboard); the
// neighbour's H is read from the ring instead of shuffled. H of the row
// above the band comes a chunk ahead. Shared memory stays at the scores' two
// slots and the ring (37 KB a block in float), so that 6 blocks of 4 warps
// share an SM: while a band waits on the band below it others compute.
constexpr int kHiddenRing = 8;
// Bytes of shared memory of a block of backward_staged.
template <typename T, typename A>
constexpr size_t staged_backward_smem_bytes() {
  return staging_smem_bytes<T, 1>() + size_t(kWarpsPerBlock) * kHiddenRing * kWarp * sizeof(A);
}
// The band edge between neighbouring bands goes over in groups of 8 columns,
// not whole chunks: a band then starts ~31 + 8 steps after the band below it
// instead of ~31 + 32 (with 16 bands a pair, fewer warps wait on the band
// pipeline). The tags are per column, so the group is this pass's choice.
constexpr int kEdgeGroup = 8;
// Steps of a chunk unrolled together (see run_chunk): 8, but the whole chunk
// where the loop's extra live values would spill at the 80 registers of 6
// blocks an SM (2-byte scores, gap tensors).
template <typename T, bool GAP_TENSOR>
constexpr int kUnrolledSteps = sizeof(T) >= 4 && (sizeof(T) == 8 || !GAP_TENSOR) ? 8 : kChunkSteps;

template <typename T, typename A, bool HARD, bool SOFT, bool GAP_TENSOR>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock, sizeof(A) == 8 ? 3 : 6)
    backward_staged(const ReverseArgs<T, A> a) {
  static_assert(kChunkSteps % kHiddenRing == 0, "a chunk starts the ring over");
  using Cell = LinearCell<A, HARD>;
  constexpr int kBandRows = kWarp;
  constexpr int kPitch = kStagePitch<T>;
  constexpr int kSlot = kBandRows * kPitch;
  const int lane = threadIdx.x & (kWarp - 1);
  using Edge = TaggedEdge<A>;
  extern __shared__ __align__(16) unsigned char stage_bytes[];
  T* const stage = reinterpret_cast<T*>(stage_bytes) + (threadIdx.x / kWarp) * kStageElements<T, 1>;
  // This warp's H ring: anti-diagonal t at (t mod 8) * 32, lane l's row at + l.
  A* const hring = reinterpret_cast<A*>(stage_bytes + staging_smem_bytes<T, 1>()) +
                   (threadIdx.x / kWarp) * kHiddenRing * kWarp;
  unsigned long long* const edges = static_cast<unsigned long long*>(a.ws.edges);

  for (;;) {
    const TakenUnit unit = take_unit</*REVERSE=*/true>(a);
    if (!unit.taken) return;
    const int64_t b = unit.b, band = unit.band;
    const PairLengths len = pair_lengths(a.lengths, b, a.rows, a.cols);
    const int m = static_cast<int>(len.m), n = static_cast<int>(len.n);
    const int64_t pair_offset = b * a.rows * a.cols;
    if (!len.valid) {
      if (band == 0) {
        for (int64_t e = lane; e < a.rows * a.cols; e += kWarp) {
          a.grad_scores[pair_offset + e] = store_as<T>(quiet_nan<A>());
          if (a.grad_open) a.grad_open[pair_offset + e] = store_as<T>(quiet_nan<A>());
        }
      }
      continue;
    }
    const int top = static_cast<int>(band) * kBandRows;
    if (m == 0 || n == 0 || top >= m) continue;  // outputs were cleared
    const int rows_here = m - top < kBandRows ? m - top : kBandRows;
    const bool has_above = band > 0;
    const bool has_below = top + kBandRows < m;
    const int64_t unit_id = b * a.nbands + band;
    const unsigned long long* edge_below = edges + (unit_id + 1) * a.cols * Edge::kWords;
    unsigned long long* edge_above = edges + unit_id * a.cols * Edge::kWords;
    const A* const hidden = a.hidden + pair_offset + int64_t(top) * n + lane;
    // The band above's last row: cell (31, c) at ((31 + c) mod n) * 32 + 31.
    const A* const hidden_above = a.hidden + pair_offset + int64_t(top - kBandRows) * n + kBandRows - 1;
    const A g_out = load_as<A>(a.grad_score + b * a.grad_score_stride);
    const PairTotal<A> total = PairTotal<A>::load(a.total, b);
    const int64_t target = a.argmax[b];
    const int target_r = target >= 0 ? static_cast<int>(target / a.cols) : -1;
    const int target_c = target >= 0 ? static_cast<int>(target % a.cols) : -1;
    const bool row_ok = lane < rows_here;
    const int r = top + lane;  // this lane's row of the pair
    // "max": the step at which this lane reaches the argmax cell (-1: never).
    const int target_t = r == target_r ? target_c + lane : -1;
    const T* const band_scores = a.scores + pair_offset + int64_t(top) * a.cols;
    T* const band_grads = a.grad_scores + pair_offset + int64_t(top) * a.cols;
    T* const srow = stage + lane * kPitch + parallelogram_offset(band_scores, a.cols, lane);
    const int steps = n + rows_here - 1;
    const int chunks = (steps + kChunkSteps - 1) / kChunkSteps;

    // H ring: slot d % 8 holds H on anti-diagonal d (0 outside the pair).
    // Every step t, run or skipped, copies d = t - 8 into the slot it frees
    // (t % 8, known at compile time in the unrolled steps) as one group;
    // `next_slot` walks (d mod n) down with it.
    const int t_top = chunks * kChunkSteps - 1;  // the last chunk's first step
    int next_slot = (t_top - kHiddenRing) % n;
    auto ring = [&](const int x, const int l) -> A { return hring[(x & (kHiddenRing - 1)) * kWarp + l]; };
    auto copy_ring = [&](const int x, const int slot, const bool ok) {
      copy_async<sizeof(A)>(hring + (x & (kHiddenRing - 1)) * kWarp + lane,
                            ok ? hidden + int64_t(slot) * rows_here : a.hidden, ok);
      copy_async_commit();
    };
    auto load_ring = [&](const int t, const int x, auto checked) {
      const int c = t - kHiddenRing - lane;
      copy_ring(x, next_slot, !decltype(checked)::value || (row_ok && c >= 0 && c < n));
      next_slot = next_slot == 0 ? n - 1 : next_slot - 1;
    };

    // H of the row above the band on a chunk's columns 32q + l: this chunk's
    // (up: column c, diag: column c - 1) and the next chunk's, loaded ahead.
    A above_up = A(0), above_diag = A(0), next_up = A(0), next_diag = A(0);
    auto load_above = [&](int q) {
      const int c = kChunkSteps * q + lane;
      next_up = next_diag = A(0);
      if (!has_above || q < 0 || c - 1 >= n) return;
      const int slot_up = (kBandRows - 1 + c) % n;
      const int slot_diag = slot_up == 0 ? n - 1 : slot_up - 1;
      next_up = c < n ? __ldg(hidden_above + int64_t(slot_up) * kBandRows) : A(0);
      next_diag = c >= 1 ? __ldg(hidden_above + int64_t(slot_diag) * kBandRows) : A(0);
    };
    load_above(chunks - 1);

    // Contributions E * p_k this lane's row made on the last two steps.
    A m1 = A(0), m1p = A(0), m2 = A(0), m3 = A(0);
    A below_reg = A(0);        // contributions of the band below (lane 31's columns, mod 32)
    typename Edge::Words below_next;  // ... this lane's next group's, loaded ahead (or none yet)
    EdgeChunk<A, 1> to_above;  // the band's top row's contributions, for the band above

    // One reverse step on this lane's cell (r, t - lane) with score s
    // (x = t mod 32, a constant in the unrolled chunks); returns its
    // d score / d S (times g_out).
    // Conditions on the step's place in its chunk use x: constants in the
    // unrolled chunks. Lane 31's column c_last = t - 31 has c_last mod 32 =
    // (x + 1) mod 32.
    auto step = [&](const int t, const int x, const A s, const bool checked) {
      const int c_last = t - (kBandRows - 1);
      const int x_last = (x + 1) & (kWarp - 1);
      // A group of the band below's contributions (kEdgeGroup columns, the
      // lanes of its columns): at its last column, or at the pair's last
      // column (only in checked chunks: c_last < n - 31 else).
      if (has_below && ((x_last & (kEdgeGroup - 1)) == kEdgeGroup - 1 || (checked && c_last == n - 1)) &&
          c_last >= 0 && c_last < n) {
        const int c = (c_last & ~(kWarp - 1)) + lane;
        const int first = c_last & ~(kEdgeGroup - 1);
        if (c >= first && c <= c_last)
          below_reg = Edge::get(edge_below + int64_t(c) * Edge::kWords, c, below_next);
        // The next group's words (columns run downwards; after a chunk's
        // first group, the last group of the chunk before), loaded a group
        // ahead by the lanes that read them; not with 2-byte scores, whose
        // staging code needs the registers (it would spill).
        const int next = first - kEdgeGroup;
        if (sizeof(T) >= 4 && next >= 0 && lane / kEdgeGroup == (next & (kWarp - 1)) / kEdgeGroup)
          below_next = Edge::Words::load(edge_below + int64_t((next & ~(kWarp - 1)) + lane) * Edge::kWords);
      }
      const int l_up = lane > 0 ? lane - 1 : 0;  // the row above's lane (lane 0: the edge)
      const A h = ring(x, lane);
      const A left = ring(x - 1, lane);
      const A up_lane = ring(x - 1, l_up);
      const A diag_lane = ring(x - 2, l_up);
      const A up_edge = __shfl_sync(kFullMask, above_up, x);
      const A diag_edge = __shfl_sync(kFullMask, above_diag, x);
      const A up = lane != 0 ? up_lane : up_edge;  // the edge is 0 with no band above
      const A diag = lane != 0 ? diag_lane : diag_edge;
      const A below = __shfl_sync(kFullMask, below_reg, x_last);
      const A down_lane = __shfl_down_sync(kFullMask, m2 + m1p, 1);
      const A down = lane != kWarp - 1 ? down_lane : below;  // 0 with no band below

      const int c = t - lane;
      A n1 = A(0), n2 = A(0), n3 = A(0), grad = A(0);
      if (!checked || (c >= 0 && c < n && row_ok)) {
        const A g = a.open.template at<GAP_TENSOR>(b, r, c);
        const Weights<A> p = Cell::normalized_weights(h, diag + s, up + g, left + g);
        A seed;
        if constexpr (SOFT) seed = total.seed(h);
        else seed = t == target_t ? A(1) : A(0);
        const A E = seed + m3 + down;
        n1 = E * p.p1;
        n2 = E * p.p2;
        n3 = E * p.p3;
        grad = n1 * g_out;
        if (GAP_TENSOR && a.grad_open)
          a.grad_open[pair_offset + int64_t(r) * a.cols + c] = store_as<T>((n2 + n3) * g_out);
      }
      // Lane 0's row is the band's top row: hand its contributions up.
      if (has_above) {
        to_above.collect(0, n2 + m1, 0, x, lane);
        // Columns run downwards: a group is done at its first column.
        if ((x & (kEdgeGroup - 1)) == 0 && t < n)
          to_above.store(edge_above, t, min(t + kEdgeGroup - 1, n - 1), lane);
      }
      m1p = m1;
      m1 = n1;
      m2 = n2;
      m3 = n3;
      return grad;
    };

    // Chunk q: steps 32q + 31 down to 32q (those below `steps`), 8 at a time
    // in a loop, unrolled within: the ring's slot and the step's place in an
    // edge group (x mod 8) are then known at compile time, and the kernel's
    // code stays small enough for the instruction cache (a chunk unrolled
    // whole made ~12,000 instructions).
    constexpr int kUnrolled = kUnrolledSteps<T, GAP_TENSOR>;
    static_assert(kUnrolled % kHiddenRing == 0 && kUnrolled % kEdgeGroup == 0 &&
                      kChunkSteps % kUnrolled == 0,
                  "x mod 8 is a constant of the unrolled steps");
    auto run_chunk = [&](const int q, auto checked) {
      constexpr bool kChecked = decltype(checked)::value;
      T* const slot = srow + (q & 1) * kSlot;
      const int t0 = q * kChunkSteps;
#pragma unroll 1
      for (int x0 = kChunkSteps - kUnrolled; x0 >= 0; x0 -= kUnrolled) {
#pragma unroll
        for (int j = kUnrolled - 1; j >= 0; --j) {
          const int x = x0 + j;
          const int t = t0 + x;
          // Steps t, t - 1, t - 2 of the ring (copied 8, 7, 6 steps ago) and
          // the chunk's scores (staged a chunk before) have landed, for every
          // lane: the 5 groups since may still be in flight.
          copy_async_wait<kHiddenRing - 3>();
          __syncwarp();
          if (!kChecked || t < steps) {
            const A grad = step(t, x, scaled(to_acc<A>(slot[x]), a.scale), kChecked);
            const int c = t - lane;
            if (!kChecked || (c >= 0 && c < n && row_ok)) slot[x] = store_as<T>(grad);
          }
          load_ring(t, x, checked);
        }
      }
    };

    auto stage_chunk = [&](int q) {
      stage_parallelogram<T, 1>(stage + (q & 1) * kSlot, band_scores, a.cols, q, rows_here, n,
                                a.scores, a.scores_end, lane);
    };
    // The first two chunks' scores, then the ring's first 8 anti-diagonals
    // (t_top .. t_top - 7): groups complete in order, so a step's wait for
    // its ring slots covers its chunk's scores too.
    stage_chunk(chunks - 1);
    if (chunks > 1) stage_chunk(chunks - 2);
#pragma unroll
    for (int i = 0; i < kHiddenRing; ++i) {
      const int d = t_top - i, c = d - lane;
      copy_ring(kChunkSteps - 1 - i, d % n, row_ok && c >= 0 && c < n);
    }
    for (int q = chunks - 1; q >= 0; --q) {
      const int t0 = q * kChunkSteps;
      above_up = next_up;
      above_diag = next_diag;
      load_above(q - 1);
      // Unchecked: every cell of every lane inside the pair, also the
      // anti-diagonals 8 steps below (loaded in the chunk) for every lane.
      const bool unchecked = rows_here == kBandRows && t0 >= kBandRows - 1 + kHiddenRing &&
                             t0 + kChunkSteps <= n;
      if (unchecked) run_chunk(q, std::false_type{});
      else run_chunk(q, std::true_type{});
      __syncwarp();  // every lane's results are in the slot
      flush_parallelogram(stage + (q & 1) * kSlot, band_grads, a.cols, q, rows_here, n,
                          [&](int row) { return parallelogram_offset(band_scores, a.cols, row); },
                          lane);
      __syncwarp();  // the slot is free again
      if (q >= 2) stage_chunk(q - 2);
    }
    copy_async_wait<0>();  // the ring's last (empty) copies, before the next band's
    __syncwarp();
  }
}

// SOFTSW_STAGED_BACKWARD=0 runs backward_wavefront instead (for benchmarks
// of the choice).
inline bool staged_backward() {
  static const bool on = [] {
    const char* e = std::getenv("SOFTSW_STAGED_BACKWARD");
    return !(e && e[0] == '0' && e[1] == 0);
  }();
  return on;
}

}  // namespace cuda

void backward_cuda(const Problem& p, const BackwardArgs& args, void* workspace, void* stream) {
  using namespace cuda;
  if (p.affine) return affine_backward_cuda(p, args, workspace, stream);
  if (p.batch == 0 || p.rows == 0 || p.cols == 0) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const Workspace ws = carve_workspace(p, workspace);
  clear_workspace(p, ws, s);
  const int64_t cells = p.batch * p.rows * p.cols;
  const int64_t elem = p.dtype == Dtype::Float64 ? 8 : p.dtype == Dtype::Float32 ? 4 : 2;
  if (p.lengths) {  // cells outside the pairs get exactly zero
    cudaMemsetAsync(args.grad_scores, 0, cells * elem, s);
    if (args.grad_gap_open) cudaMemsetAsync(args.grad_gap_open, 0, cells * elem, s);
  }
  dispatch_dtype(p.dtype, [&](auto* tag, auto acc) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using A = decltype(acc);
    const ReverseArgs<T, A> k = reverse_args<T, A>(p, args, ws);
    dispatch_variant<A, false>(p, runs_hard(p), [&](auto r, auto hard_c, auto gap_tensor) {
      if constexpr (r() == 1) {
        if (staged_backward()) {
          if constexpr (!hard_c()) {  // hard mode seeds the argmax alone
            if (k.soft_reduction)
              return launch_persistent<backward_staged<T, A, false, true, gap_tensor()>>(
                  k, s, "backward_staged", staged_backward_smem_bytes<T, A>());
          }
          return launch_persistent<backward_staged<T, A, hard_c(), false, gap_tensor()>>(
              k, s, "backward_staged", staged_backward_smem_bytes<T, A>());
        }
      }
      launch_persistent<backward_wavefront<T, A, r(), hard_c(), gap_tensor()>>(
          k, s, "backward_wavefront");
    });
  });
}

}  // namespace softsw
