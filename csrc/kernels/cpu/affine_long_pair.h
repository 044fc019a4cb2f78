// A lone long affine-gap pair (T > 0, float accumulate, inside the range rule
// of probability.h) on column blocks, one per SIMD lane, forward and
// backward: a group of one pair would keep one lane of W busy.
//
// Forward (a wavefront, as the linear probability_long_pair): lane l holds
// columns l nb + 1 .. (l + 1) nb and computes row s - l at step s, taking
// from lane l - 1 its last column: B and L of the same row (computed the step
// before) and C of the row above (two steps before), with their exponents.
// nb is a multiple of the chunk width, so a block's chunks are the pair's, and
// each cell is computed from the same values as in a row of a group:
// bit for bit the group's forward (the row functions are the same code).
//
// State (a training forward). The pair's slice keeps the row checkpoints of
// checkpoints.h (each lane saves its block of a checkpoint row at the step it
// computes it), which every pass that runs the group forward again reads,
// and after them its own checkpoints: the wavefront's whole state (every
// lane's row, its exponents and hand-over values) every k steps.
//
// Backward. Its reverse pass is a wavefront too (reverse_linear_long_pair):
// block l runs row i at the step s = i + l the forward computed it, one step
// after block l + 1 (whose messages from its first column it takes), so the
// reverse visits the forward's steps last to first, and at step s reads the
// shares of steps s and s - 1 (the row above each lane's, and the left
// neighbour's column). It runs the forward again one block of k steps at a
// time from the wavefront's checkpoints (last block first) and keeps the
// block's shares, as AffineShareBlocks does for a group.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "../probability.h"
#include "checkpoints.h"
#include "forward_probability.h"
#include "reverse_affine_simd.h"
#include "setup.h"
#include "simd.h"

#if SOFTSW_CPU_VECTOR
namespace softsw::cpu::simd {

// The column blocks of a pair of n columns: up to W blocks of nb columns
// (a multiple of the chunk width), block l from column first[l] + 1.
struct ColumnBlocks {
  static constexpr int64_t C = ProbabilityRange<float>::kRenormSteps;
  int64_t nb = 0, lanes = 0;
  int64_t first[W] = {}, width[W] = {};
  explicit ColumnBlocks(int64_t n) {
    nb = ((n + W - 1) / W + C - 1) / C * C;
    lanes = (n + nb - 1) / nb;
    for (int l = 0; l < W; ++l) {
      first[l] = l * nb;
      width[l] = l < lanes ? std::min(nb, n - first[l]) : 0;
    }
  }
  int64_t chunks() const { return nb / C; }  // of a block
};

// Each lane's block of its row rows[l] of a gap view (n[l] columns; 0: the
// lane is skipped) into `dst` at j * W + l, in kernel units.
template <typename T>
void gather_gap_blocks(const GapView<T>& g, const ColumnBlocks& cb, const int64_t* rows,
                       const int64_t* n, float* dst) {
  gather_gap_rows<T>([&](int) -> const GapView<T>& { return g; }, rows, cb.first, n,
                     static_cast<int>(cb.lanes), dst);
}

// Where the wavefront's own checkpoints lie in the pair's slice, after the
// row checkpoints: one every k steps (after step t k - 1, t >= 1), k from a
// block of k steps' shares in about AffineCheckpoints::kBlockFloats.
struct WavefrontCheckpoints {
  int64_t k = 0, record = 0, base = 0;
  // `stride`, `chunks`: floats of a lane-interleaved row and chunk exponents
  // of a row of the wavefront; m: the pair's rows.
  WavefrontCheckpoints(const AffineCheckpoints& rows, int64_t stride, int64_t chunks, int64_t m)
      : k(std::clamp<int64_t>(AffineCheckpoints::kBlockFloats / (5 * stride), 4, 64)),
        record(3 * stride + chunks * W + kHandOver * W),
        base(rows.rows_end(m)) {}
  // The hand-over rows of the wavefront's state (AffineWavefront).
  static constexpr int64_t kHandOver = 6;

  bool saves(int64_t s, int64_t steps) const { return s >= 1 && (s + 1) % k == 0 && s + 1 <= steps; }
  int64_t restart_step(int64_t t) const { return t * k - 1; }
  float* at(float* slice, int64_t s) const { return slice + base + ((s + 1) / k - 1) * record; }
  const float* at(const float* slice, int64_t s) const {
    return slice + base + ((s + 1) / k - 1) * record;
  }
  // The floats a state of `steps` steps takes, from the slice's start.
  int64_t end(int64_t steps) const { return base + (steps / k) * record; }
};

// "soft": the chunks' sums of a pair on column blocks folded as a group's
// row kernel folds its lane's (fold_chunk: row by row, chunks left to right),
// so that its score and seeds are the same bits as in a group. Row i is
// whole at step i + lanes - 1, when the last lane has computed it; until
// then its chunks wait in a ring of `lanes` rows.
class SoftSumsInOrder {
 public:
  using X = V<4>;
  SoftSumsInOrder(const ColumnBlocks& cb, int64_t m, int64_t n)
      : cb_(cb), m_(m), row_chunks_((n + cb.C - 1) / cb.C) {
    for (std::vector<float>* v : {&z_, &h_, &sum_, &sum_h_})
      v->assign(static_cast<size_t>(cb.lanes * row_chunks_ + cb.chunks() * W), 0.0f);
    o_.assign(static_cast<size_t>(cb.lanes * row_chunks_), 0);
  }
  // Where the row kernel writes a step's chunk sums (ProbabilityRows).
  float* step_sums() { return sum_.data() + cb_.lanes * row_chunks_; }
  float* step_sums_h() { return sum_h_.data() + cb_.lanes * row_chunks_; }

  // After step s (exponents `e` of each lane's chunks): its lanes' chunks
  // into their rows, and the row it completed folded.
  void add(int64_t s, const int32_t* e) {
    const float *sz = step_sums(), *sh = step_sums_h();
    for (int l = 0; l < cb_.lanes; ++l) {
      const int64_t i = s - l;
      if (i < 1 || i > m_) continue;
      const int64_t at = (i % cb_.lanes) * row_chunks_ + cb_.first[l] / cb_.C;
      for (int64_t q = 0; q < (cb_.width[l] + cb_.C - 1) / cb_.C; ++q) {
        z_[at + q] = sz[q * W + l];
        h_[at + q] = sh[q * W + l];
        o_[at + q] = e[q * W + l];
      }
    }
    const int64_t done = s - (cb_.lanes - 1);
    if (done < 1 || done > m_) return;
    const int64_t at = (done % cb_.lanes) * row_chunks_;
    for (int64_t g = 0; g < row_chunks_; ++g) {
      const typename X::I o = X::splati(o_[at + g]);
      fold_chunk<4, true>(X::splat(z_[at + g]), o, z.mant, z.expo);
      fold_chunk<4, true>(X::splat(h_[at + g]), o, h.mant, h.expo);
    }
  }

  // The sums so far, as mant 2^expo (lane 0 of each vector; mant 0: none).
  struct Sum {
    typename X::F mant = X::splat(0.0f);
    typename X::I expo = X::splati(0);
  } z, h;

 private:
  const ColumnBlocks& cb_;
  int64_t m_, row_chunks_;
  // The ring's rows (chunk g of row i at (i % lanes) * row_chunks + g), then
  // the row kernel's output of a step (chunk q of lane l at q * W + l).
  std::vector<float> z_, h_, sum_, sum_h_;
  std::vector<int32_t> o_;
};

// The rows of the wavefront of one pair b (valid, non-empty, in range, affine
// gaps): each lane's row of its block (scaled C, A, U and chunk exponents),
// its inputs at a step, and the values handed from lane to lane. Built by the
// forward (from step 0) and by the backward (from a checkpoint).
template <typename T>
class AffineWavefront {
 public:
  static constexpr int64_t C = ColumnBlocks::C;

  AffineWavefront(const Setup<T>& su, int64_t b) : cb(extent(su, b, 1)), su_(su) {
    const Problem& p = su.p;
    m = extent(su, b, 0);
    steps = m + cb.lanes - 1;
    stride = (cb.nb + 1) * W;
    chunks = cb.nb / C;
    S_ = static_cast<const T*>(p.scores) + b * su.MN;
    go_ = su.gap(p.gap_open, b);
    ge_ = su.gap(p.gap_extend, b);
    gap_tensor_ = p.has_gap_tensor();
    gaps_ = constant_gaps<float>(su);
    for (int l = 0; l < W; ++l) ln.reset(l);
  }

  // Floats bind() takes: six rows of state (this step's and the one before),
  // scores and two gap rows, two rows of exponents, the hand-over values.
  int64_t floats() const { return 9 * stride + 2 * chunks * W + (kHandOver + 2) * W; }

  // Lays the rows out from `base` (floats() floats, 64-byte aligned) and
  // starts at step 0.
  void bind(float* base) {
    float* next = base;
    auto take = [&](int64_t n) {
      float* a = next;
      next += n;
      return a;
    };
    z_up = take(stride);
    z_ = take(stride);
    a_up = take(stride);
    a_ = take(stride);
    u_up = take(stride);
    u_ = take(stride);
    s_ = take(stride);
    g_ = take(stride);
    g_ext_ = take(stride);
    e_up = reinterpret_cast<int32_t*>(take(chunks * W));
    e_ = reinterpret_cast<int32_t*>(take(chunks * W));
    float* h = take(kHandOver * W);
    left_b_ = h;
    left_l_ = h + W;
    left_c_ = h + 2 * W;
    diag_c_ = h + 3 * W;
    left_e_ = reinterpret_cast<int32_t*>(h + 4 * W);
    diag_e_ = reinterpret_cast<int32_t*>(h + 5 * W);
    last_b_ = take(W);
    last_l_ = take(W);
    std::fill(s_, s_ + stride, -kInf<float>);
    std::fill(g_, g_ + stride, -kInf<float>);
    std::fill(g_ext_, g_ext_ + stride, -kInf<float>);
    start();
  }

  // Step 0: every lane on the boundary row 0 (C = A = 1, U = 0), and its left
  // neighbour the boundary column (B = C = 1, L = 0).
  void start() {
    std::fill(z_up, z_up + stride, 1.0f);
    std::fill(a_up, a_up + stride, 1.0f);
    std::fill(u_up, u_up + stride, 0.0f);
    std::fill(e_up, e_up + chunks * W, 0);
    for (int l = 0; l < W; ++l) {
      left_b_[l] = left_c_[l] = diag_c_[l] = 1.0f;
      left_l_[l] = 0.0f;
      left_e_[l] = diag_e_[l] = 0;
    }
  }

  // Step s (lane l on row s - l): its inputs, the row function, and what the
  // next step reads. `keep`: the rows it writes besides (h: log2 C for a
  // training forward; the shares for the backward).
  void step(ProbabilityRowFn row, int64_t s, const KeptRows& keep,
            SoftSumsInOrder* sums = nullptr) {
    gather(s);
    ProbabilityRows r{};
    if (sums) {
      r.chunk_sum = sums->step_sums();
      r.chunk_sum_h = sums->step_sums_h();
    }
    r.s = s_;
    r.g = gap_tensor_ ? g_ : nullptr;
    r.g_ext = gap_tensor_ ? g_ext_ : nullptr;
    r.z_up = z_up;
    r.e_up = e_up;
    r.z = z_;
    r.e = e_;
    r.a_up = a_up;
    r.u_up = u_up;
    r.a = a_;
    r.u = u_;
    r.h = keep.h;
    r.share_start = keep.share_start;
    r.share_d = keep.share_d;
    r.share_u = keep.share_u;
    r.share_l = keep.share_l;
    r.left_b = left_b_;
    r.left_l = left_l_;
    r.left_e = left_e_;
    r.diag_z = diag_c_;
    r.diag_e = diag_e_;
    r.last_b = last_b_;
    r.last_l = last_l_;
    row(r, gaps_, static_cast<int32_t>(cb.nb), static_cast<int32_t>(s), ln);
    // Each lane's last column to the next lane: its B and L now, its C of
    // the step before as the diagonal (lane 0 keeps the boundary).
    for (int64_t l = cb.lanes - 1; l >= 1; --l) {
      diag_c_[l] = left_c_[l];
      diag_e_[l] = left_e_[l];
      left_b_[l] = last_b_[l - 1];
      left_l_[l] = last_l_[l - 1];
      left_c_[l] = z_[cb.nb * W + l - 1];
      left_e_[l] = e_[(chunks - 1) * W + l - 1];
    }
    if (sums) sums->add(s, e_);
    std::swap(z_up, z_);
    std::swap(a_up, a_);
    std::swap(u_up, u_);
    std::swap(e_up, e_);
  }

  // The state after a step (the `_up` rows and the hand-over values), to and
  // from a checkpoint of WavefrontCheckpoints::record floats.
  void save(float* rec) const {
    for (const float* a : {z_up, a_up, u_up}) rec = copy_to(rec, a, stride);
    rec = copy_to(rec, reinterpret_cast<const float*>(e_up), chunks * W);
    copy_to(rec, left_b_, kHandOver * W);
  }
  void restore(const float* rec) {
    for (float* a : {z_up, a_up, u_up}) rec = copy_from(rec, a, stride);
    rec = copy_from(rec, reinterpret_cast<float*>(e_up), chunks * W);
    copy_from(rec, left_b_, kHandOver * W);
  }

  // The row checkpoints (checkpoints.h) that step s reached: each lane's
  // block of its row, if that row is one.
  void save_rows(const AffineCheckpoints& ck, float* slice, int64_t s) const {
    for (int l = 0; l < cb.lanes; ++l) {
      const int64_t i = s - l;
      if (i >= 1 && i <= m && ck.saves(i, m))
        ck.save(z_up, a_up, u_up, e_up, l, cb.width[l], i, slice, cb.first[l]);
    }
  }

  static constexpr int64_t kHandOver = WavefrontCheckpoints::kHandOver;
  ProbabilityLanes ln;
  ColumnBlocks cb;
  int64_t m = 0, steps = 0, stride = 0, chunks = 0;
  // After step s: each lane's row s - l (scaled C, A, U at j * W, col 0
  // unused; chunk q's exponent at q * W).
  float *z_up = nullptr, *a_up = nullptr, *u_up = nullptr;
  int32_t* e_up = nullptr;

 private:
  static int64_t extent(const Setup<T>& su, int64_t b, int which) {
    int64_t m = 0, n = 0;
    su.extents(b, m, n);
    return which ? n : m;
  }
  static float* copy_to(float* dst, const float* src, int64_t n) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return dst + n;
  }
  static const float* copy_from(const float* src, float* dst, int64_t n) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return src + n;
  }

  // Step s's scores and gap scores (kernel units) of each lane in its rows;
  // a lane outside them gets -inf (weights 0: it holds the boundary row 0,
  // which is where it starts) and no extents.
  void gather(int64_t s) {
    const int64_t N = su_.N;
    const T* src[W] = {};
    int64_t n_now[W] = {};
    for (int l = 0; l < W; ++l) {
      const int64_t i = s - l;
      const bool active = l < cb.lanes && i >= 1 && i <= m;
      ln.m[l] = active ? static_cast<int32_t>(s) : 0;
      ln.n[l] = static_cast<int32_t>(active ? cb.width[l] : 0);
      n_now[l] = active ? cb.width[l] : 0;
      if (active) {
        src[l] = S_ + (i - 1) * N + cb.first[l];
      } else {  // no weight (-inf), so the lane's vector slots stay finite
        for (int64_t j = 0; j < cb.nb; ++j) s_[j * W + l] = -kInf<float>;
        if (gap_tensor_)  // (the rows read the gap rows only then)
          for (float* a : {g_, g_ext_})
            for (int64_t j = 0; j < cb.nb; ++j) a[j * W + l] = -kInf<float>;
      }
    }
    interleave_rows_of(s_, src, n_now, W, su_.beta);
    if (!gap_tensor_) return;
    int64_t rows[W];
    for (int l = 0; l < W; ++l) rows[l] = s - l;
    gather_gap_blocks(go_, cb, rows, n_now, g_);
    gather_gap_blocks(ge_, cb, rows, n_now, g_ext_);
  }

  const Setup<T>& su_;
  const T* S_ = nullptr;
  GapView<T> go_, ge_;
  bool gap_tensor_ = false;
  ProbabilityGaps gaps_{};
  float *z_ = nullptr, *a_ = nullptr, *u_ = nullptr, *s_ = nullptr, *g_ = nullptr,
        *g_ext_ = nullptr;
  int32_t* e_ = nullptr;
  // The hand-over rows, in this order in a checkpoint: left B, L, C of each
  // lane's row, diagonal C, and the left and diagonal exponents.
  float *left_b_ = nullptr, *left_l_ = nullptr, *left_c_ = nullptr, *diag_c_ = nullptr;
  int32_t *left_e_ = nullptr, *diag_e_ = nullptr;
  float *last_b_ = nullptr, *last_l_ = nullptr;
};

// Whether the training state of pair b on column blocks (the row checkpoints
// and the wavefront's) fits in its slice of `hidden`.
template <typename T>
bool affine_long_pair_state_fits(const Setup<T>& su, int64_t b) {
  int64_t m = 0, n = 0;
  su.extents(b, m, n);
  const ColumnBlocks cb(n);
  const WavefrontCheckpoints wk(AffineCheckpoints(su.N), (cb.nb + 1) * W, cb.nb / cb.C, m);
  return wk.end(m + cb.lanes - 1) <= su.planes * su.MN;
}

// The forward of a lone long pair b on column blocks: score, total, argmax,
// and with `hidden` its state (above; the caller has checked that it fits).
// rows_fn: the probability-domain affine rows (with state: kKeepLogs).
template <typename T>
void probability_affine_long_pair(const Setup<T>& su, int64_t b, const ProbabilityRowFns& rows_fn,
                                  const ForwardOutputs& out, std::vector<float>& mem) {
  AffineWavefront<T> wf(su, b);
  const ProbabilityRowFn row = rows_fn.of(static_cast<int>(wf.cb.lanes), su.soft_reduction, true);
  float* slice = out.hidden ? static_cast<float*>(out.hidden) + b * su.planes * su.MN : nullptr;
  mem.resize(static_cast<size_t>(wf.floats() + wf.stride + 16));
  float* base = mem.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  wf.bind(base);
  const AffineCheckpoints ck(su.N);
  const WavefrontCheckpoints wk(ck, wf.stride, wf.chunks, wf.m);
  KeptRows keep;
  if (slice) {
    ck.clear(slice, su.planes * su.MN, su.p.batch * su.planes * su.MN);
    keep.h = base + wf.floats();  // log2 C of a step (the lanes' "max" and "soft" seeds)
  }
  int64_t m = 0, n = 0;
  su.extents(b, m, n);
  std::optional<SoftSumsInOrder> sums;
  if (su.soft_reduction) sums.emplace(wf.cb, m, n);
  for (int64_t s = 1; s <= wf.steps; ++s) {
    wf.step(row, s, keep, sums ? &*sums : nullptr);
    if (!slice) continue;
    wf.save_rows(ck, slice, s);
    if (wk.saves(s, wf.steps)) wf.save(wk.at(slice, s));
  }
  ProbabilityLanes& ln = wf.ln;
  int64_t lanes = wf.cb.lanes;
  if (sums) {  // the reduction is lane 0's
    lanes = 1;
    ln.mant[0] = sums->z.mant[0];
    ln.expo[0] = sums->z.expo[0];
  }
  store_long_pair_result(su, b, ln, lanes, wf.cb.nb, slice != nullptr, out);
  if (!slice) return;
  ck.set_seed_scale(slice, sums ? soft_seed_scale(sums->z.mant[0], sums->z.expo[0],
                                                  sums->h.mant[0], sums->h.expo[0])
                                : 1.0f);
  ck.set_column_blocks(slice, wf.cb.lanes);
}

// The backward of a lone pair whose forward ran on column blocks (its slice
// says so, affine_long_pair_state_fits held): every entry of its gradients
// (zero outside its region).
template <typename T>
void reverse_affine_long_pair(const Setup<T>& su, const ReversePair& q,
                              const AffineReverseRowFns& rows_fn, const float* hidden, T* grad_s,
                              T* grad_o, T* grad_e, std::vector<float>& mem) {
  const Problem& p = su.p;
  const int64_t N = su.N, MN = su.MN, mr = q.mr, nr = q.nr;
  const float* slice = hidden + q.b * su.planes * MN;
  AffineWavefront<T> wf(su, q.b);
  const ColumnBlocks& cb = wf.cb;
  const WavefrontCheckpoints wk(AffineCheckpoints(N), wf.stride, wf.chunks, wf.m);
  // The region's blocks and each one's columns in it.
  const int64_t lanes = (nr + cb.nb - 1) / cb.nb, last_step = mr + lanes - 1;
  int64_t width[W] = {};
  for (int l = 0; l < lanes; ++l) width[l] = std::min(cb.width[l], nr - cb.first[l]);
  for (T* g : {grad_s, grad_o, grad_e})
    if (g) fill_outside(g + q.b * MN, su.M, N, mr, nr, 0.0f);
  const AffineReverseRowFn row = rows_fn.of(static_cast<int>(lanes));
  const ProbabilityRowFn share_row =
      pick_affine_share_rows(p).of(static_cast<int>(lanes), su.soft_reduction, true);
  const bool gap_tensor = p.has_gap_tensor();
  const AffineGapWeights gaps = affine_gap_weights(su);
  const GapView<T> go = su.gap(p.gap_open, q.b), ge = su.gap(p.gap_extend, q.b);

  // The pass's rows (AffineReverseBuffers), the hand-over values (W each), a
  // block of k steps' shares (5 planes), the wavefront's rows.
  const int64_t stride = wf.stride, k = wk.k;
  mem.assign(static_cast<size_t>((AffineReverseBuffers::kRows + 5 * k) * stride + 5 * W +
                                 wf.floats() + 32),
             0.0f);
  float* base = mem.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  AffineReverseBuffers buf;
  float* next = buf.bind(base, stride);
  auto take = [&](int64_t n) {
    float* a = next;
    next += n;
    return a;
  };
  float *right_b_in = take(W), *right_l_in = take(W), *pend_c_in = take(W);
  float *right_b_out = take(W), *right_l_out = take(W);
  float* block = take(5 * k * stride);
  wf.bind(next);

  // The shares of step s (its slot in the block of steps holding it), and the
  // block's steps run again: from step 0 (whose slot is the boundary's) or
  // from the checkpoint after its first step's predecessor.
  int64_t block_t = -1;
  auto slot = [&](int64_t s) {
    float* a = block + (s % k) * stride;
    const int64_t plane = k * stride;
    return AffineShareRows{a, a + plane, a + 2 * plane, a + 3 * plane, a + 4 * plane};
  };
  auto shares_of = [&](int64_t s) {
    const int64_t t = s / k;
    if (t != block_t) {
      block_t = t;
      int64_t s0 = t * k;
      if (t == 0) {
        wf.start();
        const AffineShareRows b = slot(0);
        std::fill(b.start, b.start + stride, 1.0f);
        for (float* a : {b.d, b.u, b.l, b.e0}) std::fill(a, a + stride, 0.0f);
        s0 = 1;
      } else {
        wf.restore(wk.at(slice, wk.restart_step(t)));
      }
      for (int64_t r = s0; r < (t + 1) * k && r <= last_step; ++r) {
        wf.step(share_row, r, kept_shares(slot(r)));
      }
    }
    return slot(s);
  };

  // The lanes at reverse step s (lane l on row s - l): the row kernel sees
  // step s as row s and derives the row above each lane's (s - 1 - l), which
  // is in its region when 1 <= s - 1 - l <= mr; mr encodes that (and the
  // region's corner, where "max" seeds 1).
  ReverseLanes ln;
  for (int l = 0; l < W; ++l) {
    ln.nr[l] = static_cast<int32_t>(width[l]);
    ln.total[l] = q.total;
    ln.scale[l] = q.scale;
    ln.grad[l] = q.grad;
  }
  auto set_rows = [&](int64_t s) {
    for (int l = 0; l < W; ++l) {
      const int64_t above = s - 1 - l;
      const bool in = l < lanes && above >= 1 && above <= mr;
      const bool corner = in && above == mr && l == lanes - 1;
      ln.mr[l] = static_cast<int32_t>(in ? (corner ? s - 1 : s) : s - 2);
    }
  };
  auto rows_at = [&](int64_t s, bool sweep, RowPrefetcher* pf) {
    AffineReverseRows rows =
        buf.rows(shares_of(s - 1), true, sweep, pf, grad_o != nullptr, grad_e != nullptr);
    rows.right_b_in = right_b_in;
    rows.right_l_in = right_l_in;
    rows.pend_c_in = pend_c_in;
    rows.right_b_out = right_b_out;
    rows.right_l_out = right_l_out;
    return rows;
  };
  // Each busy lane's row of its block in an (M, N) array `a` of the pair.
  int64_t row_of[W] = {};
  auto block_rows = [&](auto* a, auto** ptr, int64_t* n) {
    for (int l = 0; l < lanes; ++l) {
      ptr[l] = row_of[l] > 0 ? a + (row_of[l] - 1) * N + cb.first[l] : nullptr;
      n[l] = row_of[l] > 0 ? width[l] : 0;
    }
  };

  // The shares of the last step's rows first (derived, not swept).
  RowPrefetcher none;
  set_rows(last_step + 1);
  row(rows_at(last_step + 1, false, &none), gaps, static_cast<int32_t>(cb.nb),
      static_cast<int32_t>(last_step + 1), ln);
  for (int64_t s = last_step; s >= 1; --s) {
    buf.next_shares();
    set_rows(s);
    for (int l = 0; l < W; ++l) {
      const int64_t i = s - l;
      row_of[l] = l < lanes && i >= 1 && i <= mr ? i : 0;
    }
    const AffineReverseRows rows = rows_at(s, true, &none);
    // Each lane's left neighbour (col 0): the last column of the block to
    // the left, which lane l - 1 computed at step s - 1 (the region's, or a
    // boundary's shares when the row is not).
    for (int l = 0; l < W; ++l) {
      const bool left = l >= 1 && row_of[l] > 0;
      const int64_t c = cb.nb * W + l - 1;
      const AffineShareRows& here = buf.here;
      here.start[l] = left ? rows.given.start[c] : 1.0f;
      here.d[l] = left ? rows.given.d[c] : 0.0f;
      here.u[l] = left ? rows.given.u[c] : 0.0f;
      here.l[l] = left ? rows.given.l[c] : 0.0f;
    }
    // From the block to the right, which ran this row the step before: its
    // messages into B and L of this block's last column, and its pending
    // message into C of the row above (`in_c`, col 0: that step's out_c).
    for (int l = 0; l < W; ++l) {
      const bool right = l + 1 < lanes;
      right_b_in[l] = right ? right_b_out[l + 1] : 0.0f;
      right_l_in[l] = right ? right_l_out[l + 1] : 0.0f;
      pend_c_in[l] = right ? buf.in_c[l + 1] : 0.0f;
    }
    if (gap_tensor) {
      int64_t n[W] = {};
      for (int l = 0; l < lanes; ++l) n[l] = row_of[l] > 0 ? width[l] : 0;
      gather_gap_blocks(go, cb, row_of, n, buf.open);
      gather_gap_blocks(ge, cb, row_of, n, buf.extend);
    }
    row(rows, gaps, static_cast<int32_t>(cb.nb), static_cast<int32_t>(s), ln);
    const std::pair<T*, const float*> outs[] = {{grad_s, buf.os}, {grad_o, buf.oo}, {grad_e, buf.oe}};
    for (const auto& [g, src] : outs) {
      if (!g) continue;
      T* dst[W] = {};
      int64_t n[W] = {};
      block_rows(g + q.b * MN, dst, n);
      deinterleave_rows_of(dst, src, n, static_cast<int>(lanes));
    }
    buf.next_messages();
  }
}

}  // namespace softsw::cpu::simd
#endif  // SOFTSW_CPU_VECTOR
