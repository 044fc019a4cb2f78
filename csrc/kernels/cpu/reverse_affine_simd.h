// The SIMD reverse pass of the affine-gap backward (soft, a pair inside the
// range rule of probability.h), templated on the accumulate type A as the
// linear one (reverse_simd.h): one SIMD lane per pair, groups of W = 16 pairs,
// one row of the group at a time from the last row up.
//
// The weights are probability.h's AffineProbabilityWeights: per cell the
// shares of its nodes relative to its C node, every weight a ratio of them.
// A float pair's shares come from its forward, run again block by block from
// its checkpoints (checkpoints.h: ratios of its scaled nodes); a float64
// pair's from the log-domain nodes C, U, L its forward kept (4 exp2 a cell). A row's pass takes the shares of the
// row above, masked to the lanes' regions (the U node's weights read them,
// and the next row's pass reuses them), while it carries the adjoints of its
// own row: the messages
// to C, A and U from the row below, to B and L from the right neighbour (the
// node order of reverse.h's reverse_affine), those to A and B divided by the
// node's share (3 divisions a cell, probability.h).
//
// A lane only counts the cells of its own region (rows 1..mr, cols 1..nr):
// outside it a cell gets the shares of a boundary cell (all its weights 0)
// and no seed, so its adjoints stay 0 and no message leaves it. So does a
// cell whose C the forward flushed to zero.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "../probability.h"
#include "checkpoints.h"
#include "forward_probability.h"
#include "reverse_simd.h"
#include "setup.h"
#include "simd.h"

#if SOFTSW_CPU_VECTOR
namespace softsw::cpu::simd {

// The shares of one row (AffineShares, probability.h) and its seeds, lane-
// interleaved: col j at j * W, col 0 the boundary.
template <typename A>
struct AffineShareRowsOf {
  A *start, *d, *u, *l, *e0;
};
using AffineShareRows = AffineShareRowsOf<float>;
// What a forward row that keeps its cells' shares writes into `s` (h: C,
// for the "soft" seeds).
template <typename A>
KeptRowsOf<A> kept_shares(const AffineShareRowsOf<A>& s) {
  KeptRowsOf<A> keep;
  keep.h = s.e0;
  keep.share_start = s.start;
  keep.share_d = s.d;
  keep.share_u = s.u;
  keep.share_l = s.l;
  return keep;
}

// One row i of a group. Row i - 1's shares, as the forward run again gave
// them, are masked to the lanes' regions (`derive`; at i = 1 they are the
// boundary's); row i's adjoints are carried when `sweep`. Shares and nodes at
// j * W, gap scores and gradients of a row at (j - 1) * W.
template <typename A>
struct AffineReverseRowsOf {
  AffineShareRowsOf<A> given;     // row i - 1 from the forward (e0: C, "soft" only)
  AffineShareRowsOf<A> here, up;  // row i (read), row i - 1 (written)
  const A* open;   // per-cell gap scores of row i (kernel units), GAP_TENSOR only
  const A* extend;
  // Messages into row i from row i + 1 (to A: divided by a, probability.h)
  const A *in_c, *in_a, *in_u;
  A *out_c, *out_a, *out_u;  // ... and out of row i into row i - 1
  A *grad_s, *grad_o, *grad_e;  // grad_o, grad_e: nullptr when not wanted
  bool derive, sweep;
  RowPrefetcher* prefetch;  // the next row's inputs and outputs, one step per column
  // A lone pair on column blocks (affine_long_pair.h): per lane, the messages
  // from the block to the right, into B and L of the row's last column and
  // the one pending into C of the row above it; and the lane's own messages
  // into B and L of the column left of its first. nullptr: none (the row's
  // right border).
  const A *right_b_in = nullptr, *right_l_in = nullptr, *pend_c_in = nullptr;
  A *right_b_out = nullptr, *right_l_out = nullptr;
};
using AffineReverseRows = AffineReverseRowsOf<float>;

// Constant gaps: their weights 2^open, 2^extend (kernel units).
template <typename A>
struct AffineGapWeightsOf {
  A open, extend;
};
using AffineGapWeights = AffineGapWeightsOf<float>;
// 2^gap of a problem's constant gaps (0 with gap tensors: read per cell).
template <typename T>
AffineGapWeightsOf<Acc<T>> affine_gap_weights(const Setup<T>& su) {
  using A = Acc<T>;
  if (su.p.has_gap_tensor()) return {A(0), A(0)};
  const ProbabilityGapsOf<A> g = constant_gaps<A>(su);
  return {CpuMath::exp2(g.open), CpuMath::exp2(g.extend)};
}

template <typename A, int VL>
SOFTSW_VINLINE AffineShares<Packed<A, VL>> load_shares(const AffineShareRowsOf<A>& s, int64_t c) {
  using X = Vec<A, VL>;
  return {X::load(s.start + c), X::load(s.d + c), X::load(s.u + c), X::load(s.l + c)};
}

template <typename A, int VL, bool SOFT, bool GAP_TENSOR, int LANES = W>
SOFTSW_VINLINE void reverse_affine_row_body(const AffineReverseRowsOf<A>& rows,
                                            AffineGapWeightsOf<A> gap, int32_t n, int32_t i,
                                            const ReverseLanesOf<A>& ln) {
  // A local copy: the stores (memcpy) could alias `rows`, whose pointers
  // would then be reloaded at every column.
  const AffineReverseRowsOf<A> r = rows;
  using X = Vec<A, VL>;
  using F = typename X::F;
  using I = typename X::I;
  using Fl = Packed<A, VL>;
  using P = AffineProbabilityWeights<Fl, PackedMath<A, VL>>;
  constexpr int K = LANES / VL;  // (LANES = W / 2: the narrow rows, forward_probability.h)
  const F zero = X::splat(A(0)), one = X::splat(A(1));
  const I up_row = X::splati(i - 1);
  I up_ok[K], up_corner[K], nr[K];
  F total[K], scale[K], gs[K], right_b[K], right_l[K], pend_c[K];
  for (int k = 0; k < K; ++k) {
    const I mr = X::loadi(ln.mr + k * VL);
    up_ok[k] = up_row <= mr;
    up_corner[k] = up_row == mr;
    nr[k] = X::loadi(ln.nr + k * VL);
    total[k] = X::load(ln.total + k * VL);
    scale[k] = X::load(ln.scale + k * VL);
    gs[k] = X::load(ln.grad + k * VL);
    right_b[k] = right_l[k] = pend_c[k] = zero;
    if (r.right_b_in) {
      right_b[k] = X::load(r.right_b_in + k * VL);
      right_l[k] = X::load(r.right_l_in + k * VL);
      pend_c[k] = X::load(r.pend_c_in + k * VL);
    }
  }
  const Fl open_w = gap.open, extend_w = gap.extend;
  const AffineShares<Fl> border = AffineShares<Fl>::boundary();
  for (int32_t j = n; j >= 1; --j) {
    const I jv = X::splati(j);
    r.prefetch->step();
    for (int k = 0; k < K; ++k) {
      const int64_t c = int64_t(j) * W + k * VL, c1 = c - W;
      AffineShares<Fl> up = border;
      if (r.derive) {
        // (A C the forward flushed to zero, negligible next to its row's
        // chunk, came with a boundary's shares: it carries nothing.)
        const AffineShares<Fl> sh = load_shares<A, VL>(r.given, c);
        const I active = up_ok[k] & (jv <= nr[k]);
        up = {X::sel(active, sh.start.v, one), X::sel(active, sh.d.v, zero),
              X::sel(active, sh.u.v, zero), X::sel(active, sh.l.v, zero)};
        X::store(r.up.start + c, up.start.v);
        X::store(r.up.d + c, up.d.v);
        X::store(r.up.u + c, up.u.v);
        X::store(r.up.l + c, up.l.v);
        F e0;
        if constexpr (SOFT)
          e0 = X::sel(active, X::exp2(X::load(r.given.e0 + c) - total[k]) * scale[k], zero);
        else e0 = X::sel(up_corner[k] & (jv == nr[k]), one, zero);
        X::store(r.up.e0 + c, e0);
      }
      if (!r.sweep) continue;
      const AffineShares<Fl> here = load_shares<A, VL>(r.here, c);
      const AffineShares<Fl> left = load_shares<A, VL>(r.here, c1);
      Fl o = open_w, e = extend_w;
      if constexpr (GAP_TENSOR) {
        o = X::exp2(X::load(r.open + c1));
        e = X::exp2(X::load(r.extend + c1));
      }
      // ea, eb: the A and B nodes' adjoints divided by a and b (probability.h).
      const Weights<Fl> wc = P::c(here);
      const GapWeights<Fl> wu = P::u_per_a(up, o, e), wl = P::l_per_b(left, o, e);
      const Fl ec = Fl(X::load(r.here.e0 + c)) + X::load(r.in_c + c);
      const Fl ea = X::load(r.in_a + c), eb = right_b[k];
      const Fl eu = Fl(X::load(r.in_u + c)) + ec * wc.p2 + eb * here.u;
      const Fl el = Fl(right_l[k]) + ec * wc.p3 + ea * here.l;
      const Fl ed = ec * wc.p1 + (ea + eb) * here.d;
      const Fl m_ua = eu * wu.open, m_ue = eu * wu.extend;
      const Fl m_lb = el * wl.open, m_le = el * wl.extend;
      X::store(r.grad_s + c1, gs[k] * ed.v);
      if (r.grad_o) X::store(r.grad_o + c1, gs[k] * (m_ua * up.a() + m_lb * left.b()).v);
      if (r.grad_e) X::store(r.grad_e + c1, gs[k] * (m_ue + m_le).v);
      // To row i - 1: C[i-1, j] from D[i, j+1] (pending), A and U from U[i, j].
      X::store(r.out_c + c, pend_c[k]);
      X::store(r.out_a + c, m_ua.v);
      X::store(r.out_u + c, m_ue.v);
      pend_c[k] = ed.v;
      right_b[k] = m_lb.v;
      right_l[k] = m_le.v;
    }
  }
  if (r.sweep)
    for (int k = 0; k < K; ++k) {
      X::store(r.out_c + k * VL, pend_c[k]);
      if (r.right_b_out) {
        X::store(r.right_b_out + k * VL, right_b[k]);
        X::store(r.right_l_out + k * VL, right_l[k]);
      }
    }
}

template <typename A>
using AffineReverseRowFnOf = void (*)(const AffineReverseRowsOf<A>&, AffineGapWeightsOf<A>,
                                      int32_t, int32_t, const ReverseLanesOf<A>&);
using AffineReverseRowFn = AffineReverseRowFnOf<float>;

// A row of VBYTES-byte vectors (16: the baseline, 32: AVX2 and AVX-512VL).
template <typename A, int VBYTES, bool SOFT, bool GAP_TENSOR, int LANES>
SOFTSW_VINLINE void reverse_affine_row_of(const AffineReverseRowsOf<A>& r,
                                          AffineGapWeightsOf<A> gap, int32_t n, int32_t i,
                                          const ReverseLanesOf<A>& ln) {
  reverse_affine_row_body<A, VBYTES / static_cast<int>(sizeof(A)), SOFT, GAP_TENSOR, LANES>(
      r, gap, n, i, ln);
}

template <typename A, bool SOFT, bool GAP_TENSOR, int LANES>
void reverse_affine_row_baseline(const AffineReverseRowsOf<A>& r, AffineGapWeightsOf<A> gap,
                                 int32_t n, int32_t i, const ReverseLanesOf<A>& ln) {
  reverse_affine_row_of<A, 16, SOFT, GAP_TENSOR, LANES>(r, gap, n, i, ln);
}
#if defined(__x86_64__)
template <typename A, bool SOFT, bool GAP_TENSOR, int LANES>
SOFTSW_TARGET_AVX2 void reverse_affine_row_avx2(const AffineReverseRowsOf<A>& r,
                                                AffineGapWeightsOf<A> gap, int32_t n, int32_t i,
                                                const ReverseLanesOf<A>& ln) {
  reverse_affine_row_of<A, 32, SOFT, GAP_TENSOR, LANES>(r, gap, n, i, ln);
}
template <typename A, bool SOFT, bool GAP_TENSOR, int LANES>
SOFTSW_TARGET_AVX512 void reverse_affine_row_avx512(const AffineReverseRowsOf<A>& r,
                                                    AffineGapWeightsOf<A> gap, int32_t n,
                                                    int32_t i, const ReverseLanesOf<A>& ln) {
  reverse_affine_row_of<A, 32, SOFT, GAP_TENSOR, LANES>(r, gap, n, i, ln);
}
#endif

template <typename A, bool SOFT, bool GAP_TENSOR, int LANES>
AffineReverseRowFnOf<A> pick_reverse_affine_row() {
#if defined(__x86_64__)
  switch (isa_level()) {
    case 2: return &reverse_affine_row_avx512<A, SOFT, GAP_TENSOR, LANES>;
    case 1: return &reverse_affine_row_avx2<A, SOFT, GAP_TENSOR, LANES>;
    default: break;
  }
#endif
  return &reverse_affine_row_baseline<A, SOFT, GAP_TENSOR, LANES>;
}

// The row functions for groups of more than W / 2 pairs and for the others.
template <typename A>
struct AffineReverseRowFnsOf {
  AffineReverseRowFnOf<A> wide, narrow;
  AffineReverseRowFnOf<A> of(int count) const { return count <= W / 2 ? narrow : wide; }
};
using AffineReverseRowFns = AffineReverseRowFnsOf<float>;
template <typename A, bool SOFT, bool GAP_TENSOR>
AffineReverseRowFnsOf<A> pick_reverse_affine_rows() {
  return {pick_reverse_affine_row<A, SOFT, GAP_TENSOR, W>(),
          pick_reverse_affine_row<A, SOFT, GAP_TENSOR, W / 2>()};
}
template <typename A = float>
AffineReverseRowFnsOf<A> pick_reverse_affine_rows(bool soft, bool gap_tensor) {
  if (soft)
    return gap_tensor ? pick_reverse_affine_rows<A, true, true>()
                      : pick_reverse_affine_rows<A, true, false>();
  return gap_tensor ? pick_reverse_affine_rows<A, false, true>()
                    : pick_reverse_affine_rows<A, false, false>();
}

// The lane-interleaved rows of an affine reverse pass, `stride` elements
// each: two sets of shares (row i and the row above, swapped after every
// row), gap scores, messages into row i and out of it (swapped likewise), and
// the gradients of row i.
template <typename A>
struct AffineReverseBuffersOf {
  static constexpr int kRows = 2 * 5 + 2 + 6 + 3;
  AffineShareRowsOf<A> here{}, up{};
  A *open = nullptr, *extend = nullptr;
  A *in_c = nullptr, *in_a = nullptr, *in_u = nullptr;
  A *out_c = nullptr, *out_a = nullptr, *out_u = nullptr;
  A *os = nullptr, *oo = nullptr, *oe = nullptr;

  // Lays the rows out from `base` (kRows * stride elements, zero), col 0 of
  // the shares the boundary's; returns where they end.
  A* bind(A* base, int64_t stride) {
    A* next = base;
    auto take = [&]() {
      A* a = next;
      next += stride;
      return a;
    };
    for (AffineShareRowsOf<A>* s : {&here, &up}) {
      *s = AffineShareRowsOf<A>{take(), take(), take(), take(), take()};
      std::fill(s->start, s->start + W, A(1));
    }
    open = take();
    extend = take();
    in_c = take();
    in_a = take();
    in_u = take();
    out_c = take();
    out_a = take();
    out_u = take();
    os = take();
    oo = take();
    oe = take();
    return next;
  }

  // One call of the row function: row i - 1's shares `given` (derive), row
  // i's pass (sweep); the gradients of the gaps when wanted.
  AffineReverseRowsOf<A> rows(const AffineShareRowsOf<A>& given, bool derive, bool sweep,
                              RowPrefetcher* prefetch, bool grad_o, bool grad_e) const {
    AffineReverseRowsOf<A> r{};
    r.given = given;
    r.here = here;
    r.up = up;
    r.open = open;
    r.extend = extend;
    r.in_c = in_c;
    r.in_a = in_a;
    r.in_u = in_u;
    r.out_c = out_c;
    r.out_a = out_a;
    r.out_u = out_u;
    r.grad_s = os;
    r.grad_o = grad_o ? oo : nullptr;
    r.grad_e = grad_e ? oe : nullptr;
    r.derive = derive;
    r.sweep = sweep;
    r.prefetch = prefetch;
    return r;
  }
  void next_shares() { std::swap(here, up); }
  void next_messages() {
    std::swap(in_c, out_c);
    std::swap(in_a, out_a);
    std::swap(in_u, out_u);
  }
};
using AffineReverseBuffers = AffineReverseBuffersOf<float>;

// The forward run again over the pairs of a reverse group (their regions'
// rows, whole chunks of their columns: bit for bit the training forward's),
// keeping each cell's shares and C (kKeepShares): from row 0 one row at a
// time (`step`), or one block of rows at a time from the checkpoints the
// training forward kept in `hidden` (`row`, last block first).
template <typename T>
class AffineShareBlocks {
 public:
  AffineShareBlocks(const Setup<T>& su, const ReversePair* pairs, int count, int64_t mg,
                    int64_t ng, const float* hidden)
      : su_(su), ck_(su.N), count_(count), mg_(mg), hidden_(hidden),
        fwd_(su, lanes(pairs, count), count, mg, cols(su, pairs, count, ng)) {
    fn_ = pick_affine_share_rows(su.p).of(count, su.soft_reduction, fwd_.masked);
    slots_ = ck_.k + 1;
  }

  // Row stride of the rows it writes ((columns + 1) * W floats), and the
  // floats bind() takes.
  int64_t stride() const { return fwd_.stride; }
  int64_t floats() const { return fwd_.floats() + 5 * slots_ * fwd_.stride + 16; }
  void bind(float* base) {
    fwd_.bind(base);
    block_ = base + fwd_.floats();
    while (reinterpret_cast<uintptr_t>(block_) % 64 != 0) ++block_;
  }

  // From row 0: restart, then row r = 1, 2, ... into `out` (at j * W).
  void start() { fwd_.start(); }
  void step(int64_t r, const AffineShareRows& out) {
    fwd_.gather(r);
    fwd_.step(fn_, r, kept_shares(out), nullptr);
  }

  // Row r's shares (1 <= r <= mg; e0: C), valid until the next call for a
  // row of another block; rows in decreasing order compute each block once.
  AffineShareRows row(int64_t r) {
    const int64_t t = (r - 1) / ck_.k;
    if (t != block_t_) recompute(t);
    return slot(r);
  }

 private:
  // Row r's place in the block (rows lo - 1 .. hi, a plane per share and C).
  AffineShareRows slot(int64_t r) const {
    float* s = block_ + (r - (lo_ - 1)) * fwd_.stride;
    const int64_t plane = slots_ * fwd_.stride;
    return AffineShareRows{s, s + plane, s + 2 * plane, s + 3 * plane, s + 4 * plane};
  }
  const int64_t* lanes(const ReversePair* pairs, int count) {
    for (int l = 0; l < count; ++l) b_of_[l] = pairs[l].b;
    return b_of_;
  }
  // The regions' columns rounded up to whole chunks, at most the widest pair's.
  static int64_t cols(const Setup<T>& su, const ReversePair* pairs, int count, int64_t ng) {
    int64_t widest = 0;
    for (int l = 0; l < count; ++l) {
      int64_t m = 0, n = 0;
      su.extents(pairs[l].b, m, n);
      widest = std::max(widest, n);
    }
    constexpr int64_t C = AffineCheckpoints::C;
    return std::min((ng + C - 1) / C * C, widest);
  }
  // Block t: rows lo .. hi and the row above, from the block's checkpoint.
  void recompute(int64_t t) {
    block_t_ = t;
    lo_ = t * ck_.k + 1;
    const int64_t hi = std::min(lo_ + ck_.k - 1, mg_);
    int64_t r0 = 0;
    if (t == 0) {
      fwd_.start();
    } else {
      r0 = ck_.restart_row(t);
      fwd_.clear();
      for (int l = 0; l < count_; ++l)
        if (ck_.saves(r0, fwd_.ln.m[l]))
          ck_.restore(hidden_ + b_of_[l] * su_.planes * su_.MN, l, fwd_.ln.n[l], r0, fwd_.z_up,
                      fwd_.a_up, fwd_.u_up, fwd_.e_up);
    }
    for (int64_t r = r0 + 1; r <= hi; ++r) step(r, slot(r));
  }

  const Setup<T>& su_;
  AffineCheckpoints ck_;
  int count_;
  int64_t mg_;
  const float* hidden_;
  int64_t b_of_[W] = {};
  ProbabilityGroup<T> fwd_;
  ProbabilityRowFn fn_ = nullptr;
  int64_t slots_ = 0, lo_ = 0, block_t_ = -1;
  float* block_ = nullptr;
};

// The inputs of one row r's shares, lane-interleaved (col j at j * W, col 0
// the boundary): the nodes C, U, L of row r and C of row r - 1 as the
// forward kept them (kernel units), and the scores of row r at (j - 1) * W.
template <typename A>
struct AffineNodeRowsOf {
  const A *c, *u, *l, *c_up, *s;
};

// Row r's shares from its nodes, AffineProbabilityWeights::shares of C and of
// D = C[r-1, j-1] + s, U, L (4 exp2 a cell), into `out` at j * W, j = 1..n,
// every lane (what lies past a lane's region is masked by the reverse row);
// e0: C, for the "soft" seeds. A C the probability-domain forward flushed to
// -inf (far below its chunk) gets a boundary's shares and carries nothing, as
// in the float share rows (forward_probability.h).
template <typename A, int VL>
SOFTSW_VINLINE void shares_of_nodes_body(const AffineNodeRowsOf<A>& in, int32_t n,
                                         const AffineShareRowsOf<A>& out) {
  using X = Vec<A, VL>;
  using F = typename X::F;
  using P = AffineProbabilityWeights<Packed<A, VL>, PackedMath<A, VL>>;
  const F zero = X::splat(A(0)), one = X::splat(A(1)), flushed = X::splat(-kInf<A>);
  for (int64_t c = W; c < int64_t(n + 1) * W; c += VL) {
    const F node_c = X::load(in.c + c);
    const AffineShares<Packed<A, VL>> sh =
        P::shares(node_c, X::load(in.c_up + c - W) + X::load(in.s + c - W), X::load(in.u + c),
                  X::load(in.l + c));
    const typename X::I live = node_c > flushed;
    X::store(out.start + c, X::sel(live, sh.start.v, one));
    X::store(out.d + c, X::sel(live, sh.d.v, zero));
    X::store(out.u + c, X::sel(live, sh.u.v, zero));
    X::store(out.l + c, X::sel(live, sh.l.v, zero));
    X::store(out.e0 + c, node_c);
  }
}

template <typename A>
using SharesOfNodesFnOf = void (*)(const AffineNodeRowsOf<A>&, int32_t, const AffineShareRowsOf<A>&);

template <typename A>
void shares_of_nodes_baseline(const AffineNodeRowsOf<A>& in, int32_t n,
                              const AffineShareRowsOf<A>& out) {
  shares_of_nodes_body<A, 16 / static_cast<int>(sizeof(A))>(in, n, out);
}
#if defined(__x86_64__)
template <typename A>
SOFTSW_TARGET_AVX2 void shares_of_nodes_avx2(const AffineNodeRowsOf<A>& in, int32_t n,
                                             const AffineShareRowsOf<A>& out) {
  shares_of_nodes_body<A, 32 / static_cast<int>(sizeof(A))>(in, n, out);
}
template <typename A>
SOFTSW_TARGET_AVX512 void shares_of_nodes_avx512(const AffineNodeRowsOf<A>& in, int32_t n,
                                                 const AffineShareRowsOf<A>& out) {
  shares_of_nodes_body<A, 32 / static_cast<int>(sizeof(A))>(in, n, out);
}
#endif

// Double lanes on AVX-512VL where the CPU has it, as the double rows of the
// passes (its double <-> int64 conversions in exp2 are single instructions).
template <typename A>
SharesOfNodesFnOf<A> pick_shares_of_nodes() {
#if defined(__x86_64__)
  if (std::is_same_v<A, double> && isa_level() >= 2) return &shares_of_nodes_avx512<A>;
  if (isa_level() >= 1) return &shares_of_nodes_avx2<A>;
#endif
  return &shares_of_nodes_baseline<A>;
}

// The shares of a reverse group's rows from the log-domain nodes C, U, L that
// the float64 forward keeps for every cell (`hidden`, the planes of setup.h),
// one row at a time: AffineShareBlocks' counterpart for a state of planes.
template <typename T>
class AffineNodeShares {
 public:
  using A = Acc<T>;

  AffineNodeShares(const Setup<T>& su, const ReversePairOf<A>* pairs, int count, int64_t /*mg*/,
                   int64_t ng, const A* hidden)
      : su_(su), count_(count), stride_((ng + 1) * W), fn_(pick_shares_of_nodes<A>()) {
    const Problem& p = su.p;
    for (int l = 0; l < count; ++l) {
      hid_[l] = hidden + pairs[l].b * su.planes * su.MN;
      S_[l] = static_cast<const T*>(p.scores) + pairs[l].b * su.MN;
      mr_[l] = pairs[l].mr;
      nr_[l] = pairs[l].nr;
    }
  }

  // Row stride of the rows it writes ((columns + 1) * W elements), and the
  // elements bind() takes: the node rows (C, U, L, the C above, scores) and
  // the shares (start, d, u, l, e0).
  int64_t stride() const { return stride_; }
  int64_t floats() const { return 10 * stride_ + 64 / sizeof(A); }
  void bind(A* base) {
    while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
    A* rows[10];
    for (int k = 0; k < 10; ++k) rows[k] = base + k * stride_;
    c_ = rows[0];
    u_ = rows[1];
    l_ = rows[2];
    c_up_ = rows[3];
    s_ = rows[4];
    out_ = AffineShareRowsOf<A>{rows[5], rows[6], rows[7], rows[8], rows[9]};
  }

  // Row r's shares (1 <= r <= the group's rows; e0: C), valid until the next
  // call.
  AffineShareRowsOf<A> row(int64_t r) {
    row(r, out_);
    return out_;
  }
  // The same into `out` (cols 1..the group's columns, at j * W; what a lane
  // without row r holds there is left as it is).
  void row(int64_t r, const AffineShareRowsOf<A>& out) {
    const int64_t N = su_.N, MN = su_.MN;
    const A* src[W] = {};
    const T* scores[W] = {};
    int64_t n[W] = {};
    for (int l = 0; l < count_; ++l) {
      if (r > mr_[l]) continue;  // (past a lane's region: masked, left as it is)
      n[l] = nr_[l];
      scores[l] = S_[l] + (r - 1) * N;
    }
    A* const nodes[3] = {c_, u_, l_};  // the planes' order (setup.h)
    for (int plane = 0; plane < 3; ++plane) {
      for (int l = 0; l < count_; ++l) src[l] = n[l] ? hid_[l] + plane * MN + (r - 1) * N : nullptr;
      interleave_rows(nodes[plane] + W, src, n, count_, A(1));
    }
    if (r == 1) {
      std::fill(c_up_, c_up_ + stride_, A(0));
    } else {
      for (int l = 0; l < count_; ++l) src[l] = n[l] ? hid_[l] + (r - 2) * N : nullptr;
      interleave_rows(c_up_ + W, src, n, count_, A(1));
    }
    interleave_rows_of(s_, scores, n, count_, su_.beta);
    const AffineNodeRowsOf<A> in{c_, u_, l_, c_up_, s_};
    fn_(in, static_cast<int32_t>(stride_ / W - 1), out);
  }

 private:
  const Setup<T>& su_;
  int count_;
  int64_t stride_;
  SharesOfNodesFnOf<A> fn_;
  const A* hid_[W] = {};
  const T* S_[W] = {};
  int64_t mr_[W] = {}, nr_[W] = {};
  A *c_ = nullptr, *u_ = nullptr, *l_ = nullptr, *c_up_ = nullptr, *s_ = nullptr;
  AffineShareRowsOf<A> out_{};
};

// Where a group's shares come from, as the training forward left its state:
// a float group's forward run again from its checkpoints, a float64 group's
// kept C, U, L planes.
template <typename T>
using AffineShareSource = std::conditional_t<std::is_same_v<Acc<T>, float>, AffineShareBlocks<T>,
                                             AffineNodeShares<T>>;

// One group of up to W pairs (regions non-empty, inside the range rule),
// start to finish: writes every entry of the pairs' gradients (zero outside
// the regions). The cells' shares come, for float pairs, from the forward run
// again over one block of rows at a time, last block first, from the
// checkpoints the training forward kept in `hidden` (AffineShareBlocks); for
// float64 pairs, from the C, U, L planes there (AffineNodeShares).
template <typename T>
void reverse_affine_group(const Setup<T>& su, const ReversePairOf<Acc<T>>* pairs, int count,
                          const AffineReverseRowFnsOf<Acc<T>>& rows_fn, const Acc<T>* hidden,
                          T* grad_s, T* grad_o, T* grad_e, std::vector<Acc<T>>& mem) {
  using A = Acc<T>;
  const AffineReverseRowFnOf<A> row = rows_fn.of(count);
  const Problem& p = su.p;
  const int64_t N = su.N, MN = su.MN;
  int64_t mg = 0, ng = 0;
  const ReverseLanesOf<A> ln = lanes_of(pairs, count, mg, ng);
  GapView<T> go[W], ge[W];
  for (int l = 0; l < count; ++l) {
    const ReversePairOf<A>& q = pairs[l];
    go[l] = su.gap(p.gap_open, q.b);
    ge[l] = su.gap(p.gap_extend, q.b);
    for (T* g : {grad_s, grad_o, grad_e})
      if (g) fill_outside(g + q.b * MN, su.M, N, q.mr, q.nr, A(0));
  }
  const bool gap_tensor = p.has_gap_tensor();
  const AffineGapWeightsOf<A> gaps = affine_gap_weights(su);
  AffineShareSource<T> blocks(su, pairs, count, mg, ng, hidden);
  // The pass's rows, then the shares' own.
  const int64_t stride = (ng + 1) * W;
  mem.assign(static_cast<size_t>(AffineReverseBuffersOf<A>::kRows * stride + blocks.floats() +
                                 128 / sizeof(A)),
             A(0));
  A* base = mem.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  AffineReverseBuffersOf<A> buf;
  A* next = buf.bind(base, stride);
  while (reinterpret_cast<uintptr_t>(next) % 64 != 0) ++next;
  blocks.bind(next);
  int64_t lane_nr[W];
  for (int l = 0; l < W; ++l) lane_nr[l] = ln.nr[l];
  // Row r - 1's shares, to mask and pass on.
  auto rows_for = [&](int64_t r, bool sweep, RowPrefetcher* next) {
    return buf.rows(r >= 2 ? blocks.row(r - 1) : AffineShareRowsOf<A>{}, r >= 2, sweep, next,
                    grad_o != nullptr, grad_e != nullptr);
  };
  // The shares of row mg first, then each row's pass from the last up.
  RowPrefetcher none;
  row(rows_for(mg + 1, false, &none), gaps, static_cast<int32_t>(ng), static_cast<int32_t>(mg + 1), ln);
  for (int64_t i = mg; i >= 1; --i) {
    buf.next_shares();
    if (gap_tensor)
      for (int l = 0; l < count; ++l) {
        if (i > pairs[l].mr) continue;
        for (int64_t j = 0; j < lane_nr[l]; ++j) {
          buf.open[j * W + l] = go[l].at(i, j + 1);
          buf.extend[j * W + l] = ge[l].at(i, j + 1);
        }
      }
    // The rows the next row's pass writes (row i - 1's gradients), spread
    // over this row's columns.
    RowPrefetcher next;
    for (int l = 0; l < count && i >= 2; ++l)
      if (std::is_same_v<T, A> && i - 1 <= pairs[l].mr)
        for (T* g : {grad_s, grad_o, grad_e})
          if (g) next.add(g + pairs[l].b * MN + (i - 2) * N);
    next.pace(ng, ng, sizeof(A));
    row(rows_for(i, true, &next), gaps, static_cast<int32_t>(ng), static_cast<int32_t>(i), ln);
    scatter_row(su, pairs, count, i, lane_nr, buf.os, grad_s);
    scatter_row(su, pairs, count, i, lane_nr, buf.oo, grad_o);
    scatter_row(su, pairs, count, i, lane_nr, buf.oe, grad_e);
    buf.next_messages();
  }
}

}  // namespace softsw::cpu::simd
#endif  // SOFTSW_CPU_VECTOR
