// Inference forward on CUDA in the probability domain (probability.h): linear
// gaps with a constant gap score, T > 0, both reductions, every dtype.
//
// The cell is Z = 1 + w Z[i-1,j-1] + c (Z[i-1,j] + Z[i,j-1]) with w = 2^s, one
// exp2 and three adds/FMAs, where the log domain needs a softmax of four terms.
// With a cell that cheap the scores' memory path decides the speed, so the
// scores are staged through shared memory:
//
// Work split. One warp per band of 32 rows (wavefront.cuh's geometry with one
// row per lane): lane l owns band row l and at step t computes column t - l.
//
// Staging. The steps are taken 32 at a time (a chunk). Chunk q needs, for band
// row r, the 32 columns 32q - r .. 32q - r + 31: a parallelogram. Lane x loads
// element x of every row of it (32 loads, each warp-wide load one row's 32
// consecutive scores: coalesced) a whole chunk before it is used, keeps it in
// registers while the current chunk runs, and then stores it into the other of
// two shared-memory slots. In a slot, row r is padded to 33 (34 for 2-byte
// types) elements so that step x, where lane l reads slot[l][x], hits 32
// different banks, as do the stores of one row.
//
// Scaling. Each lane keeps its row as z = Z 2^-o with its own exponent o and
// brings z back to [1, 2) every kRenormSteps steps; a value from the lane above
// is multiplied by f = 2^(o_above - o), recomputed at each renormalisation.
// The reductions fold into log2 units (SoftTotal, the running max) at the same
// time, before o changes.
//
// Range. When a chunk is staged, the warp checks that every score of it is
// within ProbabilityRange (NaN and inf are not). The first chunk that is not
// switches the band to the log domain for the rest of its steps: the state is
// converted (H = log2 z + o) before any cell of that chunk is computed, so
// every cell is exact either way. Bands decide alone: the band edges travel as
// a mantissa and an exponent (Z = m 2^e) whichever domain wrote them.
//
// Argmax: an inference forward does not keep the state the argmax serves, so
// this pass leaves it -1 (problem.h).
#include "probability.h"
#include "wavefront.cuh"

namespace softsw {
namespace cuda {

template <typename T, typename A>
struct ProbabilityForwardArgs {
  int64_t batch, rows, cols, nbands;
  const T* scores;
  const int64_t* lengths;
  A scale;        // kernel units per caller unit
  A unscale;      // caller units per kernel unit
  A gap;          // the gap in kernel units (log domain)
  A gap_weight;   // 2^gap (probability domain)
  A score_limit;  // the largest |score| (caller units) the probability domain holds
  bool soft_reduction;
  T* score;
  int64_t* argmax;
  A* total;
  Workspace ws;
};

constexpr int kChunkSteps = kWarp;
// Row pitch of a staging slot, in elements: 32 + padding (see the header).
template <typename T> constexpr int kStagePitch = sizeof(T) == 2 ? 34 : 33;
// Elements of a warp's two staging slots.
template <typename T> constexpr int kStageElements = 2 * kWarp * kStagePitch<T>;

template <typename T>
constexpr size_t probability_forward_smem() {
  return size_t(kWarpsPerBlock) * kStageElements<T> * sizeof(T);
}

// A band edge value Z = m 2^e, as tagged words: the mantissa m in [1, 2),
// then the exponent e (an integer, or a non-finite m with e = 0 for an
// infinite or NaN H). e is kept as an A: in the log domain it may exceed int.
template <typename A>
struct ScaledEdge {
  static constexpr int kWords = 2 * TaggedEdge<A>::kWords;
  __device__ static void put(unsigned long long* column, A m, A e, int col) {
    TaggedEdge<A>::put(column, m, col);
    TaggedEdge<A>::put(column + TaggedEdge<A>::kWords, e, col);
  }
  __device__ static void get(const unsigned long long* column, int col, A& m, A& e) {
    m = TaggedEdge<A>::get(column, col);
    e = TaggedEdge<A>::get(column + TaggedEdge<A>::kWords, col);
  }
};

// The largest edge exponent the probability domain takes (an int, exact in A).
template <typename A> constexpr A kMaxEdgeExponent = A(1 << 23);

template <typename T, typename A>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock)
    probability_forward(const ProbabilityForwardArgs<T, A> a) {
  constexpr int kRenorm = ProbabilityRange<A>::kRenormSteps;
  static_assert(kChunkSteps % kRenorm == 0, "a chunk holds whole renormalisation periods");
  constexpr int kPitch = kStagePitch<T>;
  extern __shared__ __align__(16) unsigned char stage_bytes[];
  T* const stage = reinterpret_cast<T*>(stage_bytes) + (threadIdx.x / kWarp) * kStageElements<T>;
  const int lane = threadIdx.x & (kWarp - 1);
  using Edge = ScaledEdge<A>;
  unsigned long long* const edges = static_cast<unsigned long long*>(a.ws.edges);
  const int64_t plane = a.rows * a.cols;
  const A c = a.gap_weight;

  for (;;) {
    const long long unit = next_unit(a.ws.ticket);
    if (unit >= a.batch * a.nbands) return;
    const int64_t b = unit / a.nbands;
    const int64_t band = unit % a.nbands;
    const PairLengths len = pair_lengths(a.lengths, b, a.rows, a.cols);
    const int m = static_cast<int>(len.m), n = static_cast<int>(len.n);
    if (m == 0 || n == 0) {
      if (band == 0 && lane == 0) {
        const A value = len.valid ? A(0) : quiet_nan<A>();
        a.score[b] = store_as<T>(value);
        PairTotal<A>::of(value).store(a.total, b);
        a.argmax[b] = -1;
      }
      continue;
    }
    const int top = static_cast<int>(band) * kWarp;
    if (top >= m) continue;  // padding rows: no work
    const int rows_here = m - top < kWarp ? m - top : kWarp;
    const bool has_above = band > 0;
    const bool has_below = top + kWarp < m;
    const bool row_ok = lane < rows_here;
    const int64_t unit_id = b * a.nbands + band;
    const unsigned long long* edge_above = edges + (unit_id - 1) * a.cols * Edge::kWords;
    unsigned long long* edge_below = edges + unit_id * a.cols * Edge::kWords;
    const int steps = n + rows_here - 1;
    const int chunks = (steps + kChunkSteps - 1) / kChunkSteps;

    // ---- staging: lane x holds element x of every row of the next chunk
    const T* const band_scores = a.scores + b * plane + int64_t(top) * a.cols;
    T held[kWarp];
    auto load_chunk = [&](int q) {
      const T* p = band_scores + kChunkSteps * q + lane;
#pragma unroll
      for (int r = 0; r < kWarp; ++r) {
        const int col = kChunkSteps * q + lane - r;
        held[r] = r < rows_here && col >= 0 && col < n ? load_raw(p) : raw_zero<T>();
        p += a.cols - 1;
      }
    };
    // Stores the held chunk q into its slot; true when all its scores are in range.
    auto stage_chunk = [&](int q) {
      T* slot = stage + (q & 1) * kWarp * kPitch + lane;
      bool in_range = true;
      __syncwarp();  // every lane is done reading chunk q - 2 from this slot
#pragma unroll
      for (int r = 0; r < kWarp; ++r) {
        slot[r * kPitch] = held[r];
        in_range &= fabs(to_acc<A>(held[r])) <= a.score_limit;  // false for NaN
      }
      __syncwarp();
      return __all_sync(kFullMask, in_range);
    };

    // ---- state (probability domain): this row as z = Z 2^-o
    A z = A(1), diag = A(1);  // the last cell, and Z[i-1, j-1] for the next (both border 1)
    int o = 0;
    A start = A(1);           // 2^-o: the start term (and the border)
    A from_above = A(1);      // 2^(o_above - o)
    int o_first = 0, o_last = 0;  // lane 0's and lane 31's exponents
    A best_z = A(0), sum_z = A(0);  // the reductions since the last fold, in this scale
    // ---- state (log domain, after a switch): H = log2 Z
    A h = A(0), hdiag = A(0);
    // ---- reductions, log2 units
    A best = A(0);
    SoftTotal<A> soft;
    // ---- band edges: column 32k + lane of the band above (Z = edge_m 2^edge_e,
    // edge_up the same in lane 0's scale, edge_h its log2) and of this band's
    // last row for the band below (low_z 2^low_o, or low_h)
    A edge_m = A(1), edge_e = A(0), edge_up = A(1), edge_h = A(0);
    A low_z = A(1), low_h = A(0);
    int low_o = 0;

    auto fold = [&]() {
      if (a.soft_reduction) {
        if (sum_z > A(0)) soft.add(log2_acc(sum_z) + A(o));
        sum_z = A(0);
      } else {
        if (best_z > A(0)) best = max_of(best, log2_acc(best_z) + A(o));
        best_z = A(0);
      }
    };
    auto renormalise = [&]() {
      const int e = exponent_of(z);
      const A down = pow2<A>(-e);
      z *= down;
      diag *= down;
      fold();
      o += e;
      start = pow2<A>(-o);
      from_above = pow2<A>(__shfl_up_sync(kFullMask, o, 1) - o);
      o_first = __shfl_sync(kFullMask, o, 0);
      o_last = __shfl_sync(kFullMask, o, kWarp - 1);
      edge_up = edge_m * pow2<A>(static_cast<int>(edge_e) - o_first);
    };
    // Columns t0 .. t0 + 31 of the band above (lane l: column t0 + l); true
    // when the probability domain can take them all.
    auto load_edge = [&](int t0) {
      const int col = t0 + lane;
      edge_m = A(1);
      edge_e = A(0);
      if (col < n) Edge::get(edge_above + int64_t(col) * Edge::kWords, col, edge_m, edge_e);
      return __all_sync(kFullMask, edge_m <= A(2) && fabs(edge_e) <= kMaxEdgeExponent<A>);
    };
    // The band's last row, columns first..last of one aligned group of 32, to
    // the band below.
    auto store_edge = [&](int first, int last, bool log_domain) {
      const int col = (first & ~(kWarp - 1)) + lane;
      if (col < first || col > last) return;
      A mant, e;
      if (!log_domain) {
        const int k = exponent_of(low_z);
        mant = low_z * pow2<A>(-k);
        e = A(k + low_o);
      } else if (is_nan(low_h) || low_h == std::numeric_limits<A>::infinity()) {
        mant = low_h;
        e = A(0);
      } else {
        e = floor(low_h);
        mant = exp2_acc(low_h - e);
      }
      Edge::put(edge_below + int64_t(col) * Edge::kWords, mant, e, col);
    };
    auto to_log_domain = [&]() {
      fold();
      h = log2_acc(z) + A(o);
      hdiag = log2_acc(diag) + A(o);  // -inf if it flushed to 0: it was negligible
      edge_h = log2_acc(edge_m) + edge_e;
      low_h = log2_acc(low_z) + A(low_o);
    };

    // One chunk of steps t0 .. t0 + 31 reading `s` (this lane's row of the
    // slot). Steps past the band's last are no-ops. CHECKED: whether some
    // cell of the chunk may lie outside the pair.
    auto probability_chunk = [&](const int t0, const T* s, auto checked) {
      constexpr bool kChecked = decltype(checked)::value;
#pragma unroll
      for (int x = 0; x < kChunkSteps; ++x) {
        const int t = t0 + x;
        const A up_lane = __shfl_up_sync(kFullMask, z, 1) * from_above;
        const A up_edge = __shfl_sync(kFullMask, edge_up, x);
        const A up = lane != 0 ? up_lane : has_above ? up_edge : start;
        const A w = exp2_acc(scaled(to_acc<A>(s[x]), a.scale));
        const A zn = probability_cell(start, w, diag, c, up, z);
        diag = up;
        if (kChecked) {
          const bool inside = row_ok && static_cast<unsigned>(t - lane) < static_cast<unsigned>(n);
          z = inside ? zn : z;
          if (a.soft_reduction) sum_z += inside ? zn : A(0);
          else best_z = max_of(best_z, inside ? zn : A(0));
        } else {
          z = zn;
          if (a.soft_reduction) sum_z += zn;
          else best_z = max_of(best_z, zn);
        }
        if (has_below) {
          const int col = t - (kWarp - 1);  // the column lane 31 just finished
          const A v = __shfl_sync(kFullMask, z, kWarp - 1);
          if (lane == ((x + 1) & (kWarp - 1))) {
            low_z = v;
            low_o = o_last;
          }
          if (col >= 0 && col < n && (x == kWarp - 2 || col == n - 1))
            store_edge(col & ~(kWarp - 1), col, false);
        }
        if (x % kRenorm == kRenorm - 1) renormalise();
      }
    };
    auto log_chunk = [&](const int t0, const T* s) {
      using Cell = LinearCell<A, false>;
#pragma unroll 4
      for (int x = 0; x < kChunkSteps; ++x) {
        const int t = t0 + x;
        const A up_lane = __shfl_up_sync(kFullMask, h, 1);
        const A up_edge = __shfl_sync(kFullMask, edge_h, x);
        const A up = lane != 0 ? up_lane : has_above ? up_edge : A(0);
        const A sk = scaled(to_acc<A>(s[x]), a.scale);
        const A hn = Cell::value(hdiag + sk, up + a.gap, h + a.gap);
        hdiag = up;
        const bool inside = row_ok && static_cast<unsigned>(t - lane) < static_cast<unsigned>(n);
        if (inside) {
          h = hn;
          if (a.soft_reduction) soft.add(hn);
          else if (!is_nan(best)) best = is_nan(hn) ? hn : max_of(best, hn);  // NaN sticks
        }
        if (has_below) {
          const int col = t - (kWarp - 1);
          const A v = __shfl_sync(kFullMask, h, kWarp - 1);
          if (lane == ((x + 1) & (kWarp - 1))) low_h = v;
          if (col >= 0 && col < n && ((col & (kWarp - 1)) == kWarp - 1 || col == n - 1))
            store_edge(col & ~(kWarp - 1), col, true);
        }
      }
    };

    load_chunk(0);
    bool next_in_range = stage_chunk(0);
    if (chunks > 1) load_chunk(1);
    bool log_domain = false;
    for (int q = 0; q < chunks; ++q) {
      const int t0 = q * kChunkSteps;
      const bool edge_in_range = has_above && t0 < n ? load_edge(t0) : true;
      if (!log_domain && !(next_in_range && edge_in_range)) {
        to_log_domain();
        log_domain = true;
      }
      if (has_above && t0 < n) {
        if (log_domain) edge_h = log2_acc(edge_m) + edge_e;
        else edge_up = edge_m * pow2<A>(static_cast<int>(edge_e) - o_first);
      }
      const T* s = stage + (q & 1) * kWarp * kPitch + lane * kPitch;
      if (log_domain) {
        log_chunk(t0, s);
      } else if (rows_here == kWarp && t0 >= kWarp - 1 && t0 + kChunkSteps <= n) {
        probability_chunk(t0, s, std::false_type{});
      } else {
        probability_chunk(t0, s, std::true_type{});
      }
      if (q + 1 < chunks) {
        next_in_range = stage_chunk(q + 1);
        if (q + 2 < chunks) load_chunk(q + 2);
      }
    }
    if (!log_domain) fold();

    SoftTotal<A> band_soft;
    MaxArg<A> band_best;
    if (a.soft_reduction) band_soft = soft;
    else band_best.best = best;  // index -1: no argmax at inference
    publish_band_reduction<T, A>(a.ws, unit_id, band, !has_below, a.soft_reduction, band_soft,
                                 band_best, b, a.unscale, a.score, a.total, a.argmax);
  }
}

}  // namespace cuda

bool probability_forward_cuda(const Problem& p, const ForwardOutputs& out,
                              const cuda::Workspace& ws, cudaStream_t s) {
  using namespace cuda;
  if (p.keeps_state || p.affine || p.gap_open.data || runs_hard(p)) return false;
  bool launched = false;
  dispatch_dtype(p.dtype, [&](auto* tag, auto acc) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using A = decltype(acc);
    using Range = ProbabilityRange<A>;
    // The gap in kernel units exactly as the log-domain kernels compute it
    // (gap_reader), so that a band that switches continues the same recurrence.
    const A scale = A(kernel_scale(p));
    const double gap = double(A(p.gap_open.value * double(scale)));
    if (!Range::gap_ok(gap)) return;
    ProbabilityForwardArgs<T, A> args;
    args.batch = p.batch;
    args.rows = p.rows;
    args.cols = p.cols;
    args.nbands = band_count(p);
    args.scores = static_cast<const T*>(p.scores);
    args.lengths = p.lengths;
    args.scale = scale;
    args.unscale = A(p.temperature * kLn2);
    args.gap = A(gap);
    args.gap_weight = A(std::exp2(gap));
    args.score_limit = A(Range::score_limit(scale));
    args.soft_reduction = p.reduction == Reduction::Soft;
    args.score = static_cast<T*>(out.score);
    args.argmax = out.argmax;
    args.total = static_cast<A*>(out.total);
    args.ws = ws;
    launch_persistent<probability_forward<T, A>>(args, s, "probability_forward",
                                                 probability_forward_smem<T>());
    launched = true;
  });
  return launched;
}

}  // namespace softsw
