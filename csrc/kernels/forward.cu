// Forward pass on CUDA, for linear and affine gaps: the recurrence over a band
// wavefront (wavefront.cuh), the max/argmax or soft total reduced in registers
// and with warp shuffles, and optionally the per-cell state the backward
// passes read.
//
// One skeleton, two row types. What a gap model changes is what a row keeps
// from its last cell, what it hands the row below, and what it saves:
//  * LinearRow: H; hands H down; saves H (one plane).
//  * AffineRow (docs/semantics.md, the nodes of recurrence.h's AffineCell): C, A, U,
//    B, L; hands C, A, U down (the row below reads C on the diagonal one step
//    later, A and U above); keeps B and L for its own next cell; saves the
//    planes C, U, L, from which the affine backward recomputes D, A and B.
// Between bands the same values travel as tagged words, column by column.
//
// A band runs in three phases: the fill (lanes starting one after another),
// the middle (every cell of the step inside the pair) and the drain. The fill
// and drain check every cell; the middle runs unchecked, and when rows are
// 16-byte aligned and R = 4 its whole groups of 4 steps run as the bulk, where
// each row's scores arrive as one 16-byte load per group (the position of each
// element inside its vector is a compile-time constant) and each step's saved
// state leaves as one 16-byte store per lane and plane. Scores are loaded a
// step (a group) ahead and kept raw until used (load_raw in wavefront.cuh).
#include "tangent.cuh"
#include "wavefront.cuh"

namespace softsw {
namespace cuda {

template <typename T, typename A>
struct ForwardArgs : WavefrontArgs<T, A> {
  A unscale;  // caller units per kernel unit
  bool vector_ok;
  T* score = nullptr;
  A* hidden = nullptr;  // the saved planes (Row::kPlanes per pair), or nullptr
  int64_t* argmax = nullptr;
  A* total = nullptr;
  // The tangent pass of the double backward (LinearTangentRow,
  // AffineTangentRow): the direction on scores, gap_open, gap_extend,
  // (B, M, N) contiguous, each nullptr for zero. Other rows ignore them.
  const T* dir_scores = nullptr;
  const T* dir_open = nullptr;
  const T* dir_extend = nullptr;
  // Rows with kStatePlanes: the training forward's saved state (that many
  // planes a pair, the band layout of this pass's R).
  const A* state = nullptr;
};

// A row's values after its last cell, state[0] being the cell's total (H, C):
// the value reduced (kReduces). The first kDiag values are what the row below
// reads on the diagonal one step later, the first kDown what it reads above;
// plane p of the saved state holds state[saved(p)]. A row may read kInputs
// more (B, M, N) tensors per cell (input(a, i), nullptr for zeros), loaded a
// step ahead like the scores and passed to cell() as `in` (not rescaled), and
// (kStatePlanes) the training forward's saved planes of the cell, plane p as
// in[kInputs + p].
template <typename A, bool HARD, bool GAP_TENSOR>
struct LinearRow {
  static constexpr bool kHard = HARD, kReduces = true;
  static constexpr int kStatePlanes = 0;
  static constexpr int kState = 1, kDiag = 1, kDown = 1, kPlanes = 1, kInputs = 0;
  __device__ static constexpr int saved(int) { return 0; }
  // Row 0's view of the row above it, and a row's state left of column 1.
  __device__ static A top(int) { return A(0); }
  __device__ static A left(int) { return A(0); }
  template <typename Args>
  __device__ static void cell(const Args& a, int64_t b, int r, int c, const A* diag, A s,
                              const A* up, A (&st)[kState], const A* in) {
    const A g = a.open.template at<GAP_TENSOR>(b, r, c);
    st[0] = LinearCell<A, HARD>::value(diag[0] + s, up[0] + g, st[0] + g);
  }
};

template <typename A, bool HARD, bool GAP_TENSOR>
struct AffineRow {
  enum { kC, kA, kU, kB, kL };
  static constexpr bool kHard = HARD, kReduces = true;
  static constexpr int kStatePlanes = 0;
  static constexpr int kState = 5, kDiag = 1, kDown = 3, kPlanes = 3, kInputs = 0;
  __device__ static constexpr int saved(int p) { return p == 0 ? kC : p == 1 ? kU : kL; }
  __device__ static A top(int i) { return i == kU ? -std::numeric_limits<A>::infinity() : A(0); }
  __device__ static A left(int i) {
    return i == kU || i == kL ? -std::numeric_limits<A>::infinity() : A(0);
  }
  template <typename Args>
  __device__ static void cell(const Args& a, int64_t b, int r, int c, const A* diag, A s,
                              const A* up, A (&st)[kState], const A* in) {
    using Aff = AffineCell<A, HARD>;
    const A o = a.open.template at<GAP_TENSOR>(b, r, c);
    const A e = a.extend.template at<GAP_TENSOR>(b, r, c);
    const A D = diag[0] + s;
    const A U = Aff::gap(up[kA] + o, up[kU] + e);
    const A L = Aff::gap(st[kB] + o, st[kL] + e);
    st[kC] = LinearCell<A, HARD>::value(D, U, L);
    st[kA] = Aff::prime(D, L);
    st[kU] = U;
    st[kB] = Aff::prime(D, U);
    st[kL] = L;
  }
};

// The tangent pass of the affine double backward (docs/math.md: tangents node
// by node; the CPU's tangent_affine in cpu/reverse.h): the nodes C, U, L of
// the training forward's state (kStatePlanes; D, A, B recomputed from them
// with the forward's arithmetic, as the reverse pass does), their softmax
// weights, and the tangents along the direction (dir_*, caller units, as
// every tangent here). Weights are taken relative to each node in the log
// domain: a node far below C (A or B of a cell a gap dominates) still has an
// exact tangent, which the reverse pass reads. Saves the planes
// Cdot, Udot, Ldot, Adot, Bdot; reduces nothing. Soft only (at T = 0 the
// Hessian is zero and this pass does not run).
template <typename A, bool GAP_TENSOR>
struct AffineTangentRow {
  enum { kC, kCd, kA, kU, kAd, kUd, kB, kL, kBd, kLd };
  static constexpr bool kHard = false, kReduces = false;
  static constexpr int kStatePlanes = 3;  // C, U, L
  static constexpr int kState = 10, kDiag = 2, kDown = 6, kPlanes = 5, kInputs = 3;
  template <typename Args>
  __device__ static auto input(const Args& a, int i) {
    return i == 0 ? a.dir_scores : i == 1 ? a.dir_open : a.dir_extend;
  }
  __device__ static constexpr int saved(int p) {
    return p == 0 ? kCd : p == 1 ? kUd : p == 2 ? kLd : p == 3 ? kAd : kBd;
  }
  __device__ static A top(int i) { return i == kU ? -std::numeric_limits<A>::infinity() : A(0); }
  __device__ static A left(int i) {
    return i == kU || i == kL ? -std::numeric_limits<A>::infinity() : A(0);
  }
  template <typename Args>
  __device__ static void cell(const Args& a, int64_t b, int r, int c, const A* diag, A s,
                              const A* up, A (&st)[kState], const A* in) {
    using Cell = LinearCell<A, false>;
    using Aff = AffineCell<A, false>;
    const A o = a.open.template at<GAP_TENSOR>(b, r, c);
    const A e = a.extend.template at<GAP_TENSOR>(b, r, c);
    const A D = diag[kC] + s;
    const A vuo = up[kA] + o, vue = up[kU] + e, vlo = st[kB] + o, vle = st[kL] + e;
    const A C = in[kInputs], U = in[kInputs + 1], L = in[kInputs + 2];
    const A Ap = Aff::prime(D, L);
    const A Bp = Aff::prime(D, U);
    const Weights<A> wc = Cell::normalized_weights(C, D, U, L);
    const PrimeWeights<A> wa = Aff::normalized_prime_weights(Ap, D, L);
    const PrimeWeights<A> wb = Aff::normalized_prime_weights(Bp, D, U);
    const GapWeights<A> wu = Aff::normalized_gap_weights(U, vuo, vue);
    const GapWeights<A> wl = Aff::normalized_gap_weights(L, vlo, vle);
    const A dS = in[0], dO = in[1], dE = in[2];
    const A Dd = diag[kCd] + dS;
    const A Ud = wu.open * (up[kAd] + dO) + wu.extend * (up[kUd] + dE);
    const A Ld = wl.open * (st[kBd] + dO) + wl.extend * (st[kLd] + dE);
    st[kC] = C;
    st[kCd] = wc.p1 * Dd + wc.p2 * Ud + wc.p3 * Ld;
    st[kA] = Ap;
    st[kU] = U;
    st[kAd] = wa.p1 * Dd + wa.p2 * Ld;
    st[kUd] = Ud;
    st[kB] = Bp;
    st[kL] = L;
    st[kBd] = wb.p1 * Dd + wb.p2 * Ud;
    st[kLd] = Ld;
  }
};

// The tangent pass of the linear double backward (docs/math.md, step 1) where
// it does not run in the probability domain (gap tensors, gaps out of its
// range; probability_tangent_cuda takes the rest): the
// weights p of the training forward's H (read from its state, as the reverse
// pass does, not recomputed: then the only chain from cell to cell is Hdot's
// three FMAs, not a softmax's exp2s and log2), and
//   Hdot = p1 (Hdot[i-1,j-1] + W) + p2 (Hdot[i-1,j] + Wg) + p3 (Hdot[i,j-1] + Wg)
// in caller units. Saves Hdot; reduces nothing; soft only.
template <typename A, bool GAP_TENSOR>
struct LinearTangentRow {
  enum { kH, kHd };
  static constexpr bool kHard = false, kReduces = false;
  static constexpr int kStatePlanes = 1;  // H
  static constexpr int kState = 2, kDiag = 2, kDown = 2, kPlanes = 1, kInputs = 2;
  __device__ static constexpr int saved(int) { return kHd; }
  __device__ static A top(int) { return A(0); }
  __device__ static A left(int) { return A(0); }
  template <typename Args>
  __device__ static auto input(const Args& a, int i) {
    return i == 0 ? a.dir_scores : a.dir_open;
  }
  template <typename Args>
  __device__ static void cell(const Args& a, int64_t b, int r, int c, const A* diag, A s,
                              const A* up, A (&st)[kState], const A* in) {
    using Cell = LinearCell<A, false>;
    const A g = a.open.template at<GAP_TENSOR>(b, r, c);
    const A vd = diag[kH] + s, vu = up[kH] + g, vl = st[kH] + g;
    const A H = in[kInputs];
    const Weights<A> p = Cell::normalized_weights(H, vd, vu, vl);
    st[kHd] = p.p1 * (diag[kHd] + in[0]) + p.p2 * (up[kHd] + in[1]) + p.p3 * (st[kHd] + in[1]);
    st[kH] = H;
  }
};

// Steps ahead of use that forward_wavefront loads a row's scores and inputs.
// One where R = 4 (four independent cells a step hide the load) and for the
// rows that read nothing but the scores; the tangent rows at one row per lane
// read the scores and the direction (two or three tensors) lane by row, each
// load an L2 round trip, with one dependent cell a step to hide it: there,
// two. Measured (2026-12-06): two made the 64x256^2 tangent pass 326 -> 298
// us (H100); eight made it slower (345 us), and so did four rows per lane over
// the one-row state (339 us, H200): a step is bound by one warp's chain of
// dependent instructions, not by its loads. ptxas, sm_90: with two no float32
// tangent row spills; with four the linear one did.
template <typename Row, int R> constexpr int kLoadsAhead = R == 1 && Row::kInputs > 0 ? 2 : 1;

// STORES: whether the pass saves Row::kPlanes planes into a.hidden (a
// compile-time flag, so that an inference forward carries no store code).
template <typename T, typename A, typename Row, int R, bool STORES>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock)
    forward_wavefront(const ForwardArgs<T, A> a) {
  constexpr int kBandRows = kWarp * R;
  constexpr int kState = Row::kState, kDiag = Row::kDiag, kDown = Row::kDown;
  const int lane = threadIdx.x & (kWarp - 1);
  const bool soft_reduction = a.soft_reduction && !Row::kHard;
  constexpr bool kReduces = Row::kReduces;
  using Edge = TaggedEdge<A>;
  unsigned long long* const edges = static_cast<unsigned long long*>(a.ws.edges);
  const int64_t plane = a.rows * a.cols;  // one saved plane of a pair

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
    // A column's edge: the kDown values of the band's last row, each a tagged word (or two).
    constexpr int kEdgeWords = kDown * Edge::kWords;
    const unsigned long long* edge_above = edges + (unit_id - 1) * a.cols * kEdgeWords;
    unsigned long long* edge_below = edges + unit_id * a.cols * kEdgeWords;
    A* const hidden = STORES ? a.hidden + b * Row::kPlanes * plane + int64_t(top) * n : nullptr;

    const int r0 = lane * R;  // first row of this lane, within the band
    const T* srow[R];         // this lane's rows of scores
    bool row_ok[R];
#pragma unroll
    for (int k = 0; k < R; ++k) {
      row_ok[k] = top + r0 + k < m;
      srow[k] = a.scores + b * plane + int64_t(top + r0 + k) * a.cols;
    }

    A st[R][kState];  // each row's state after its last cell
    A hp[R][kDiag];   // each row's diagonal values before that (the row below's diagonal)
    A best[R];        // per-row running max, at step best_t
    int best_t[R];
    SoftTotal<A> soft[R];
#pragma unroll
    for (int k = 0; k < R; ++k) {
#pragma unroll
      for (int i = 0; i < kState; ++i) st[k][i] = Row::left(i);
#pragma unroll
      for (int i = 0; i < kDiag; ++i) hp[k][i] = Row::left(i);
      best[k] = A(0);
      best_t[k] = -1;
    }
    A up_prev[kDiag];  // what row 0 received last step: its diagonal now
#pragma unroll
    for (int i = 0; i < kDiag; ++i) up_prev[i] = Row::left(i);
    A edge_reg[kDown];
#pragma unroll
    for (int i = 0; i < kDown; ++i) edge_reg[i] = Row::top(i);
    int slot = 0;      // t mod n: where this step's anti-diagonal is stored
    EdgeChunk<A, kDown> to_below;  // the band's last row, for the band below

    // One wavefront step; `s[k]` is row k's score in kernel units, in[i][k]
    // its input i (rows with kInputs; then the forward's saved planes with
    // kStatePlanes).
    constexpr int kInputs = Row::kInputs + Row::kStatePlanes;
    constexpr int kIn = kInputs > 0 ? kInputs : 1;
    auto step = [&](const int t, const A (&s)[R], const A (&in)[kIn][R], const bool checked) {
      if (has_above && (t & (kWarp - 1)) == 0 && t < n) {
        const int c = t + lane;
#pragma unroll
        for (int i = 0; i < kDown; ++i)
          edge_reg[i] = c < n ? Edge::get(edge_above + (int64_t(c) * kDown + i) * Edge::kWords, c)
                              : Row::top(i);
      }
      A up0[kDown];
#pragma unroll
      for (int i = 0; i < kDown; ++i) {
        const A from_above = __shfl_sync(kFullMask, edge_reg[i], t & (kWarp - 1));
        const A from_lane = __shfl_up_sync(kFullMask, st[R - 1][i], 1);
        up0[i] = lane != 0 ? from_lane : has_above ? from_above : Row::top(i);
      }
      A diag0[kDiag];
#pragma unroll
      for (int i = 0; i < kDiag; ++i) {
        diag0[i] = up_prev[i];
        up_prev[i] = up0[i];
      }

      A ns[R][kState];
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int c = t - r0 - k;
        const A* up = k == 0 ? up0 : st[k - 1];
        const A* diag = k == 0 ? diag0 : hp[k - 1];
        const bool inside = !checked || (c >= 0 && c < n && row_ok[k]);
#pragma unroll
        for (int i = 0; i < kState; ++i) ns[k][i] = st[k][i];  // a row left of the pair keeps left()
        if (inside) {
          A in_k[kIn];
#pragma unroll
          for (int i = 0; i < kIn; ++i) in_k[i] = in[i][k];
          Row::cell(a, b, top + r0 + k, c, diag, s[k], up, ns[k], in_k);
          const A v = ns[k][0];
          if constexpr (kReduces) {
            if (soft_reduction) {
              soft[k].add(v);
            } else {  // selects, not a branch: this runs for every cell
              const bool better = v > best[k] || (is_nan(v) && !is_nan(best[k]));
              best[k] = better ? v : best[k];
              best_t[k] = better ? t : best_t[k];
            }
          }
        }
      }
      if constexpr (STORES) {
#pragma unroll
        for (int p = 0; p < Row::kPlanes; ++p) {
          A* at = hidden + p * plane + int64_t(slot) * rows_here + r0;
          if constexpr (R == 4) {
            if (!checked && a.vector_ok) {
              const A v[4] = {ns[0][Row::saved(p)], ns[1][Row::saved(p)], ns[2][Row::saved(p)],
                              ns[3][Row::saved(p)]};
              store4<A, A>(at, v);
              continue;
            }
          }
#pragma unroll
          for (int k = 0; k < R; ++k) {
            const int c = t - r0 - k;
            if (c >= 0 && c < n && row_ok[k]) at[k] = ns[k][Row::saved(p)];
          }
        }
      }
#pragma unroll
      for (int k = 0; k < R; ++k) {
#pragma unroll
        for (int i = 0; i < kDiag; ++i) hp[k][i] = st[k][i];
#pragma unroll
        for (int i = 0; i < kState; ++i) st[k][i] = ns[k][i];
      }
      // Hand the band's last row to the band below, 32 columns at a time.
      if (has_below) {
        const int c = t - (kBandRows - 1);  // the column lane 31's last row finished
#pragma unroll
        for (int i = 0; i < kDown; ++i) to_below.collect(i, st[R - 1][i], kWarp - 1, c, lane);
        if (c >= 0 && c < n && ((c & (kWarp - 1)) == kWarp - 1 || c == n - 1))
          to_below.store(edge_below, c & ~(kWarp - 1), c, lane);
      }
      if (++slot == n) slot = 0;
    };
    // Steps from..to-1, scores one step ahead so that the load's latency hides
    // behind a step. Unchecked (CHECKED false) only where every cell of every
    // lane is inside the pair.
    auto run_steps = [&](int from, int to, auto checked) {
      constexpr bool kChecked = decltype(checked)::value;
      // Row k's score of step t is at sp[k] (walked one column per step; it
      // may point outside the row where the checks say so, never read there).
      const T* sp[R];
#pragma unroll
      for (int k = 0; k < R; ++k) sp[k] = srow[k] + (from - r0 - k);
      // The same walk over the row's inputs (Row::kInputs of them; none are
      // read where the input is nullptr).
      constexpr int kTensors = Row::kInputs > 0 ? Row::kInputs : 1;
      const T* ip[kTensors][R];
      bool in_ok[kTensors];
#pragma unroll
      for (int i = 0; i < kTensors; ++i) {
        const T* base = nullptr;
        if constexpr (Row::kInputs > 0) base = Row::input(a, i);
        in_ok[i] = base != nullptr;
#pragma unroll
        for (int k = 0; k < R; ++k) ip[i][k] = base + (srow[k] - a.scores) + (from - r0 - k);
      }
      // kStatePlanes: step t's values at slot t mod n of each of the band's
      // saved planes (one coalesced run a step and plane, as the pass's own
      // planes are stored).
      constexpr int kStateIn = Row::kStatePlanes > 0 ? Row::kStatePlanes : 1;  // arrays' extent
      const A* const band_state = Row::kStatePlanes > 0
          ? a.state + b * Row::kStatePlanes * plane + int64_t(top) * n + r0 : nullptr;
      int state_slot = from % n;
      auto load = [&](int t, T (&raw)[R], T (&in_raw)[kTensors][R],
                      A (&state_in)[kStateIn][R]) {
#pragma unroll
        for (int k = 0; k < R; ++k) {
          const int c = t - r0 - k;
          const bool inside = kChecked ? (c >= 0 && c < n && row_ok[k]) : true;
          raw[k] = (t < to && inside) ? load_raw(sp[k]) : raw_zero<T>();
          ++sp[k];
#pragma unroll
          for (int i = 0; i < Row::kInputs; ++i) {
            in_raw[i][k] = (t < to && inside && in_ok[i]) ? load_raw(ip[i][k]) : raw_zero<T>();
            ++ip[i][k];
          }
#pragma unroll
          for (int p = 0; p < Row::kStatePlanes; ++p)
            state_in[p][k] = t < to && inside
                ? band_state[p * plane + int64_t(state_slot) * rows_here + k] : A(0);
        }
        if (Row::kStatePlanes > 0 && ++state_slot == n) state_slot = 0;
      };
      // Loads kAhead steps ahead (a ring of kAhead steps' raw values, its
      // slot a constant of the unrolled loop).
      constexpr int kAhead = kLoadsAhead<Row, R>;
      T s_next[kAhead][R], in_next[kAhead][kTensors][R];
      A state_next[kAhead][kStateIn][R];
#pragma unroll
      for (int j = 0; j < kAhead; ++j) load(from + j, s_next[j], in_next[j], state_next[j]);
      for (int t0 = from; t0 < to; t0 += kAhead) {
#pragma unroll
        for (int j = 0; j < kAhead; ++j) {
          const int t = t0 + j;
          if (kAhead > 1 && t >= to) break;
          A s[R], in[kIn][R];
#pragma unroll
          for (int k = 0; k < R; ++k) {
            s[k] = scaled(to_acc<A>(s_next[j][k]), a.scale);
#pragma unroll
            for (int i = 0; i < Row::kInputs; ++i) in[i][k] = to_acc<A>(in_next[j][i][k]);
#pragma unroll
            for (int p = 0; p < Row::kStatePlanes; ++p) in[Row::kInputs + p][k] = state_next[j][p][k];
          }
          load(t + kAhead, s_next[j], in_next[j], state_next[j]);
          step(t, s, in, kChecked);
        }
      }
    };

    const int lanes_active = (rows_here + R - 1) / R;
    const int steps = n + lanes_active * R - 1;
    // A full band has every cell of steps kBandRows - 1 .. n - 1 inside: those
    // run unchecked, and with R = 4 and aligned rows the whole groups of 4
    // among them run as the vector bulk.
    const bool full = rows_here == kBandRows && n > kBandRows - 1;
    const int plain_begin = full ? kBandRows - 1 : steps;
    const int plain_end = full ? n : steps;
    int bulk_begin = plain_end, bulk_end = plain_end;
    if constexpr (R == 4 && Row::kInputs == 0) {
      if (a.vector_ok && full) {
        const int first = (kBandRows - 1 + 3) & ~3;  // first multiple of 4 >= 127
        const int last = n & ~3;                      // steps t < last have c <= n - 1
        if (last > first) {
          bulk_begin = first;
          bulk_end = last;
        }
      }
    }
    run_steps(0, plain_begin, std::true_type{});
    run_steps(plain_begin, bulk_begin, std::false_type{});
    if constexpr (R == 4 && Row::kInputs == 0) {
      if (bulk_end > bulk_begin) {
        // Row k's group g reads columns 4(g-l) - k .. 4(g-l) + 3 - k: the tail
        // of vector q-1 and the head of vector q, q = g - l.
        const A kNoInputs[kIn][R] = {};
        A vp[R][4], vc[R][4];
        Raw4<T> vn[R];  // the next group's vectors, converted when they are used
        auto load_vec = [&](int k, int q) {
          return q >= 0 && 4 * q + 3 < a.cols ? load_raw4(srow[k] + 4 * q) : raw4_zero<T>();
        };
        const int q0 = bulk_begin / 4 - lane;
#pragma unroll
        for (int k = 0; k < R; ++k) {
          convert4(load_vec(k, q0 - 1), a.scale, vp[k]);
          convert4(load_vec(k, q0), a.scale, vc[k]);
        }
        for (int t = bulk_begin; t < bulk_end; t += 4) {
          const int q = t / 4 - lane;
#pragma unroll
          for (int k = 0; k < R; ++k) vn[k] = load_vec(k, q + 1);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            A s[R];
#pragma unroll
            for (int k = 0; k < R; ++k) s[k] = j >= k ? vc[k][j - k] : vp[k][4 + j - k];
            step(t + j, s, kNoInputs, false);
          }
#pragma unroll
          for (int k = 0; k < R; ++k) {
#pragma unroll
            for (int i = 0; i < 4; ++i) vp[k][i] = vc[k][i];
            convert4(vn[k], a.scale, vc[k]);
          }
        }
      }
    }
    run_steps(bulk_end, plain_end, std::false_type{});
    run_steps(plain_end, steps, std::true_type{});

    if constexpr (!kReduces) continue;
    // This band's share of the reduction.
    SoftTotal<A> band_soft;
    MaxArg<A> band_best;
#pragma unroll
    for (int k = 0; k < R; ++k) {
      if (soft_reduction) {
        band_soft.merge(soft[k]);
      } else if (best_t[k] >= 0) {
        MaxArg<A> o;
        o.best = best[k];
        o.index = int64_t(top + r0 + k) * a.cols + (best_t[k] - r0 - k);
        band_best.merge(o);
      }
    }
    publish_band_reduction<T, A>(a.ws, unit_id, band, !has_below, soft_reduction, band_soft,
                                 band_best, b, a.unscale, a.score, a.total, a.argmax);
  }
}

// A forward that saves its state, or (R = 1 only: inference runs one row per
// lane, rows_per_thread) one that does not.
template <typename T, typename A, typename Row, int R>
void launch_forward(const ForwardArgs<T, A>& args, cudaStream_t s, const char* name) {
  if constexpr (R == 1) {
    if (!args.hidden) return launch_persistent<forward_wavefront<T, A, Row, 1, false>>(args, s, name);
  }
  launch_persistent<forward_wavefront<T, A, Row, R, true>>(args, s, name);
}

// The arguments of a forward-skeleton pass over problem `p` (outputs and
// directions left unset).
template <typename T, typename A>
ForwardArgs<T, A> forward_args(const Problem& p, const Workspace& ws) {
  ForwardArgs<T, A> args;
  static_cast<WavefrontArgs<T, A>&>(args) = wavefront_args<T, A>(p, ws);
  args.unscale = A(runs_hard(p) ? 1.0 : p.temperature * kLn2);
  args.vector_ok = vector_access_ok(p, p.scores);
  return args;
}

}  // namespace cuda

int64_t cuda_workspace_bytes(const Problem& problem) { return cuda::workspace_bytes(problem); }

void forward_cuda(const Problem& p, const ForwardOutputs& out, void* workspace, void* stream) {
  using namespace cuda;
  if (p.batch == 0) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const Workspace ws = carve_workspace(p, workspace);
  clear_workspace(p, ws, s);
  clear_hidden_past_short_pairs(p, out.hidden, s);
  if (probability_forward_cuda(p, out, ws, s)) return;
  dispatch_dtype(p.dtype, [&](auto* tag, auto acc) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using A = decltype(acc);
    ForwardArgs<T, A> args = forward_args<T, A>(p, ws);
    args.score = static_cast<T*>(out.score);
    args.hidden = static_cast<A*>(out.hidden);
    args.argmax = out.argmax;
    args.total = static_cast<A*>(out.total);
    const bool hard = runs_hard(p);
    if (p.affine) {
      dispatch_variant<A, true>(p, hard, [&](auto r, auto hard_c, auto gap_tensor) {
        launch_forward<T, A, AffineRow<A, hard_c(), gap_tensor()>, r()>(args, s, "forward_wavefront (affine)");
      });
    } else {
      dispatch_variant<A, false>(p, hard, [&](auto r, auto hard_c, auto gap_tensor) {
        launch_forward<T, A, LinearRow<A, hard_c(), gap_tensor()>, r()>(args, s, "forward_wavefront");
      });
    }
  });
}

void tangent_cuda(const Problem& p, const DoubleBackwardArgs& d, void* hdot,
                  const cuda::Workspace& ws, cudaStream_t s) {
  using namespace cuda;
  if (probability_tangent() && probability_tangent_cuda(p, d, hdot, ws, s)) return;
  dispatch_dtype(p.dtype, [&](auto* tag, auto acc) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using A = decltype(acc);
    ForwardArgs<T, A> args = forward_args<T, A>(p, ws);
    args.hidden = static_cast<A*>(hdot);
    args.vector_ok = args.vector_ok && reinterpret_cast<uintptr_t>(hdot) % 16 == 0;
    args.dir_scores = static_cast<const T*>(d.dir_scores);
    args.dir_open = static_cast<const T*>(d.dir_gap_open);
    args.dir_extend = static_cast<const T*>(d.dir_gap_extend);
    args.state = static_cast<const A*>(d.state.hidden);
    // Soft only: the hard variants of the dispatch are the same kernels.
    if (p.affine) {
      dispatch_variant<A, true>(p, false, [&](auto r, auto, auto gap_tensor) {
        using Row = AffineTangentRow<A, gap_tensor()>;
        launch_persistent<forward_wavefront<T, A, Row, r(), true>>(args, s, "forward_wavefront (affine tangent)");
      });
    } else {
      dispatch_variant<A, false>(p, false, [&](auto r, auto, auto gap_tensor) {
        using Row = LinearTangentRow<A, gap_tensor()>;
        launch_persistent<forward_wavefront<T, A, Row, r(), true>>(args, s, "forward_wavefront (tangent)");
      });
    }
  });
}

}  // namespace softsw
