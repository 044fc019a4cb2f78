// The entry points of the backward and the double backward (problem.h): per
// pair, the region and the seeds, then the passes of reverse.h, or of
// reverse_simd.h / reverse_affine_simd.h / double_backward_simd.h /
// affine_double_backward_simd.h for groups of pairs where they apply.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "../problem.h"
#include "affine_double_backward_simd.h"
#include "affine_long_pair.h"
#include "checkpoints.h"
#include "double_backward_simd.h"
#include "float_mode.h"
#include "forward_probability.h"
#include "reverse.h"
#include "reverse_affine_simd.h"
#include "reverse_simd.h"
#include "setup.h"
#include "thread_pool.h"

namespace softsw {
namespace cpu {
namespace {

// One pair on the scalar passes of reverse.h, every gradient entry of the
// pair written.
template <typename T>
void backward_one(const Setup<T>& su, const BackwardArgs& args, int64_t b, Scratch<Acc<T>>& sc) {
  using A = Acc<T>;
  const Problem& p = su.p;
  T* oS = static_cast<T*>(args.grad_scores) + b * su.MN;
  T* oO = args.grad_gap_open ? static_cast<T*>(args.grad_gap_open) + b * su.MN : nullptr;
  T* oE = p.affine && args.grad_gap_extend ? static_cast<T*>(args.grad_gap_extend) + b * su.MN
                                           : nullptr;
  int64_t m = 0, n = 0, mr = 0, nr = 0;
  const A* hid = static_cast<const A*>(args.state.hidden) + b * su.planes * su.MN;
  if (!su.extents(b, m, n) || !region_of(su, args.state, b, m, n, hid, mr, nr)) {
    for (T* o : {oS, oO, oE}) fill_outside(o, su.M, su.N, 0, 0, quiet_nan<A>());
    return;
  }
  for (T* o : {oS, oO, oE}) fill_outside(o, su.M, su.N, mr, nr, A(0));
  if (mr == 0 || nr == 0) return;
  const PairView<T> pv = su.pair(b);
  Seed<A> seed;
  seed.soft = su.soft_reduction;
  seed.total = PairTotal<A>::load(static_cast<const A*>(args.state.total), b).value();
  if (seed.soft) seed.scale = seed_scale(hid, su.N, m, n, seed.total);
  const A gs = ld(static_cast<const T*>(args.grad_score), b * args.grad_score_stride);
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
      reverse_affine<T, false, false>(pv, hv, mr, nr, none, nullptr, nullptr, nullptr, seed, gs, oS, oO, oE, sc,
                                      in_probability_range(su, b, m, n));
  }
}

#if SOFTSW_CPU_VECTOR
// The pairs of a batch for the SIMD groups of a reverse pass: those with a
// non-empty region (affine: inside the range rule of probability.h for their
// accumulate type, fits_probability_range) in
// `pairs`, sorted by region so that a group's lanes are alike, the others
// (empty, invalid, out of range) in `singles` for the scalar passes. `work`:
// the cells the groups will visit.
template <typename T>
void group_pairs(const Setup<T>& su, const ForwardState& state, const T* grad_score,
                 int64_t grad_score_stride,
                 std::vector<simd::ReversePairOf<Acc<T>>>& pairs, std::vector<int64_t>& singles,
                 double& work) {
  using A = Acc<T>;
  const Problem& p = su.p;
  const A* hidden = static_cast<const A*>(state.hidden);
  const A* total = static_cast<const A*>(state.total);
  work = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t m = 0, n = 0, mr = 0, nr = 0;
    const A* hid = hidden + b * su.planes * su.MN;
    if (!su.extents(b, m, n) || !region_of(su, state, b, m, n, hid, mr, nr) || mr == 0 ||
        nr == 0) {
      singles.push_back(b);
      continue;
    }
    pairs.push_back(simd::ReversePairOf<A>{b, mr, nr, PairTotal<A>::load(total, b).value(), A(1),
                                           ld(grad_score, b * grad_score_stride)});
    work += double(mr) * nr * su.planes;
  }
  if (p.affine && !pairs.empty()) {
    std::vector<char> in_range(pairs.size(), 0);
    parallel_for<char>(static_cast<int64_t>(pairs.size()), work, [&](int64_t k, char&) {
      int64_t m = 0, n = 0;
      su.extents(pairs[k].b, m, n);
      in_range[k] = fits_probability_range(su, pairs[k].b, m, n);
    });
    std::vector<simd::ReversePairOf<A>> kept;
    for (size_t k = 0; k < pairs.size(); ++k) {
      if (in_range[k]) kept.push_back(pairs[k]);
      else singles.push_back(pairs[k].b);
    }
    pairs.swap(kept);
  }
  std::stable_sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.nr, a.mr) > std::make_pair(b.nr, b.mr);
  });
}

// How many groups `pairs` go in: full groups of W, or more (and smaller) when
// there are more threads than full groups.
inline int64_t group_count(int64_t pairs, double work) {
  return pairs == 0 ? 0
                    : std::max<int64_t>((pairs + simd::W - 1) / simd::W,
                                        std::min<int64_t>(pairs, thread_count(pairs, work)));
}

// The soft seeds' normalisation of the pairs lo..hi (seed_scale of reverse.h;
// an affine float pair's comes with its checkpoints).
template <typename T>
void set_seed_scales(const Setup<T>& su, const Acc<T>* hidden, simd::ReversePairOf<Acc<T>>* pairs,
                     int64_t lo, int64_t hi, bool checkpoints) {
  using A = Acc<T>;
  for (int64_t k = lo; k < hi; ++k) {
    simd::ReversePairOf<A>& q = pairs[k];
    const A* slice = hidden + q.b * su.planes * su.MN;
    if constexpr (std::is_same_v<A, float>) {
      if (checkpoints) {
        q.scale = AffineCheckpoints::seed_scale(slice);
        continue;
      }
    }
    const A z = simd::sum_exp2(slice, su.N, q.mr, q.nr, q.total);
    q.scale = z > A(0) ? A(1) / z : A(1);
  }
}
#endif

// The SIMD passes' work as items of one parallel_for: `groups` groups of the
// P grouped pairs (group g: pairs [g P / groups, (g + 1) P / groups), given to
// `group` as lo, hi) and the pairs left to the scalar passes (`single`).
template <typename A, typename Single, typename Group>
void for_groups_and_singles(int64_t P, int64_t groups, const std::vector<int64_t>& singles,
                            double work, Single&& single, Group&& group) {
  const int64_t items = groups + static_cast<int64_t>(singles.size());
  parallel_for<Scratch<A>>(items, work, [&](int64_t g, Scratch<A>& sc) {
    if (g >= groups) single(singles[g - groups], sc);
    else group(g * P / groups, (g + 1) * P / groups, sc);
  });
}

// The SIMD backward, soft (T > 0), float and double accumulate: linear gaps
// (reverse_simd.h) every pair, affine gaps (reverse_affine_simd.h) the pairs
// inside the range rule of probability.h (their state: float, checkpoints;
// float64, the C, U, L planes; alone in a group or not); the other pairs on
// the scalar passes. False when it does not apply (then the scalar passes
// run).
template <typename T>
bool backward_vector(const Setup<T>& su, const BackwardArgs& args) {
#if SOFTSW_CPU_VECTOR
  using A = Acc<T>;
  constexpr bool kFloat = std::is_same_v<A, float>;
  const Problem& p = su.p;
  if (su.hard || su.M >= (int64_t(1) << 30) || su.N >= (int64_t(1) << 30) ||
      simd::isa_level() < 0)
    return false;
  const A* hidden = static_cast<const A*>(args.state.hidden);
  T* gS = static_cast<T*>(args.grad_scores);
  T* gO = static_cast<T*>(args.grad_gap_open);
  T* gE = p.affine ? static_cast<T*>(args.grad_gap_extend) : nullptr;
  std::vector<simd::ReversePairOf<A>> pairs;
  std::vector<int64_t> singles;
  double work = 0;
  group_pairs(su, args.state, static_cast<const T*>(args.grad_score), args.grad_score_stride,
              pairs, singles, work);
  const int64_t P = static_cast<int64_t>(pairs.size());
  const int64_t groups = group_count(P, work);
  const bool soft = su.soft_reduction;
  const simd::ReverseRowFnOf<A> row =
      soft ? simd::pick_reverse_row<A, true>() : simd::pick_reverse_row<A, false>();
  const simd::AffineReverseRowFnsOf<A> affine_rows =
      simd::pick_reverse_affine_rows<A>(soft, p.has_gap_tensor());
  auto single = [&](int64_t b, Scratch<A>& sc) { backward_one<T>(su, args, b, sc); };
  for_groups_and_singles<A>(P, groups, singles, work, single, [&](int64_t lo, int64_t hi,
                                                                  Scratch<A>& sc) {
    const int count = static_cast<int>(hi - lo);
    if (soft) set_seed_scales(su, hidden, pairs.data(), lo, hi, /*checkpoints=*/kFloat && p.affine);
    const simd::ReversePairOf<A>& q = pairs[lo];
    if (p.affine) {
      if constexpr (kFloat) {
        if (count == 1 && q.nr >= 4 * simd::W &&
            AffineCheckpoints::column_blocks(hidden + q.b * su.planes * su.MN) > 0) {
          // A lone long pair whose forward ran on column blocks: on them again.
          simd::reverse_affine_long_pair<T>(su, q, affine_rows, hidden, gS, gO, gE, sc.lanes);
          return;
        }
      }
      simd::reverse_affine_group<T>(su, pairs.data() + lo, count, affine_rows, hidden, gS, gO, gE,
                                    group_rows(sc));
      return;
    }
    if (count == 1 && q.nr >= 4 * simd::W) {  // a lone long pair: its column blocks on the lanes
      simd::reverse_linear_long_pair<T>(su, q, row, hidden, gS, gO, group_rows(sc));
      return;
    }
    // A lone short float pair: one busy lane of W is slower than the scalar
    // loop. A float64 one runs as a group of one, and so gets the bits it
    // gets inside any group (the scalar loop's exp2 is libm's, not the lanes'
    // polynomial).
    if (count > 1 || !kFloat) {
      simd::reverse_linear_group<T>(su, pairs.data() + lo, count, row, hidden, gS, gO,
                                    group_rows(sc));
      return;
    }
    T* oS = gS + q.b * su.MN;
    T* oO = gO ? gO + q.b * su.MN : nullptr;
    for (T* o : {oS, oO}) fill_outside(o, su.M, su.N, q.mr, q.nr, A(0));
    Seed<A> seed;
    seed.soft = soft;
    seed.total = q.total;
    seed.scale = q.scale;
    reverse_linear<T, false, false>(su.pair(q.b), q.mr, q.nr, hidden + q.b * su.MN, nullptr,
                                    nullptr, nullptr, seed, q.grad, oS, oO, sc);
  });
  return true;
#else
  (void)su;
  (void)args;
  return false;
#endif
}

template <typename T>
void backward_impl(const Problem& p, const BackwardArgs& args) {
  const Setup<T> su(p);
  const FlushSubnormals mode(!su.hard);
  if (backward_vector<T>(su, args)) return;
  parallel_for<Scratch<Acc<T>>>(p.batch, double(p.batch) * su.MN * su.planes,
                                [&](int64_t b, Scratch<Acc<T>>& sc) { backward_one<T>(su, args, b, sc); });
}

// One pair's double backward on the scalar passes of reverse.h.
template <typename T>
void double_backward_one(const Setup<T>& su, const DoubleBackwardArgs& args, int64_t b,
                         Scratch<Acc<T>>& sc) {
  using A = Acc<T>;
  const Problem& p = su.p;
  const T* dS = static_cast<const T*>(args.dir_scores);
  const T* dO = static_cast<const T*>(args.dir_gap_open);
  const T* dE = p.affine ? static_cast<const T*>(args.dir_gap_extend) : nullptr;
  T* ggs = static_cast<T*>(args.grad_grad_score);
  T* hS = static_cast<T*>(args.hvp_scores);
  T* hO = static_cast<T*>(args.hvp_gap_open);
  T* hE = p.affine ? static_cast<T*>(args.hvp_gap_extend) : nullptr;
  T* oS = hS + b * su.MN;
  T* oO = hO ? hO + b * su.MN : nullptr;
  T* oE = hE ? hE + b * su.MN : nullptr;
  const T* ws = dS ? dS + b * su.MN : nullptr;
  const T* wo = dO ? dO + b * su.MN : nullptr;
  const T* we = dE ? dE + b * su.MN : nullptr;
  int64_t m = 0, n = 0, mr = 0, nr = 0;
  const A* hid = static_cast<const A*>(args.state.hidden) + b * su.planes * su.MN;
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
  const A gs = ld(static_cast<const T*>(args.grad_score), b * args.grad_score_stride);
  Seed<A> seed;
  seed.soft = su.soft_reduction;
  seed.total = PairTotal<A>::load(static_cast<const A*>(args.state.total), b).value();
  if (seed.soft) seed.scale = seed_scale(hid, su.N, m, n, seed.total);
  seed.inv_t = su.inv_t;
  const int64_t cells = mr * nr;
  A sdot = A(0);
  if (!p.affine) {
    A* hdot = sc.tangents.get(cells);
    if (su.hard) tangent_linear<T, true>(pv, mr, nr, hid, ws, wo, hdot, sc);
    else tangent_linear<T, false>(pv, mr, nr, hid, ws, wo, hdot, sc);
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
    AffineTangents<A> td{sc.tangents.get(5 * cells), nr, cells};
    const bool in_range = in_probability_range(su, b, m, n);
    if (su.hard) tangent_affine<T, true>(pv, hv, mr, nr, ws, wo, we, td, sc);
    else tangent_affine<T, false>(pv, hv, mr, nr, ws, wo, we, td, sc, in_range);
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
      reverse_affine<T, false, true>(pv, hv, mr, nr, td, ws, wo, we, seed, gs, oS, oO, oE, sc,
                                     in_range);
  }
  st(ggs, b, sdot);
}

// The SIMD double backward, soft (T > 0), float and double accumulate:
// linear gaps (double_backward_simd.h) every pair; affine gaps
// (affine_double_backward_simd.h) the pairs inside the range rule of
// probability.h (their shares: float, the forward run again from its
// checkpoints; float64, the kept C, U, L planes). In groups; a lone linear
// pair and the other pairs (empty, invalid, out of range) on the scalar
// passes. False when it does not apply (then the scalar passes run).
template <typename T>
bool double_backward_vector(const Setup<T>& su, const DoubleBackwardArgs& args) {
#if SOFTSW_CPU_VECTOR
  using A = Acc<T>;
  constexpr bool kFloat = std::is_same_v<A, float>;
  const Problem& p = su.p;
  if (su.hard || su.M >= (int64_t(1) << 30) || su.N >= (int64_t(1) << 30) ||
      simd::isa_level() < 0)
    return false;
  std::vector<simd::ReversePairOf<A>> pairs;
  std::vector<int64_t> singles;
  double work = 0;
  group_pairs(su, args.state, static_cast<const T*>(args.grad_score), args.grad_score_stride,
              pairs, singles, work);
  const A* hidden = static_cast<const A*>(args.state.hidden);
  work *= 2;  // a tangent and a reverse pass
  const int64_t P = static_cast<int64_t>(pairs.size());
  const int64_t groups = group_count(P, work);
  const bool soft = su.soft_reduction;
  const simd::TangentRowFnsOf<A> linear =
      soft ? simd::pick_tangent_rows<A, true>() : simd::pick_tangent_rows<A, false>();
  simd::AffineTangentRowFnsOf<A> affine[2];  // [narrow]
  if (p.affine)
    for (bool narrow : {false, true})
      affine[narrow] = soft ? simd::pick_affine_tangent_rows<A, true>(narrow)
                            : simd::pick_affine_tangent_rows<A, false>(narrow);
  const simd::TangentIO<T> io{
      static_cast<const T*>(args.dir_scores),
      static_cast<const T*>(args.dir_gap_open),
      p.affine ? static_cast<const T*>(args.dir_gap_extend) : nullptr,
      static_cast<T*>(args.hvp_scores),
      static_cast<T*>(args.hvp_gap_open),
      p.affine ? static_cast<T*>(args.hvp_gap_extend) : nullptr,
      static_cast<T*>(args.grad_grad_score)};
  auto single = [&](int64_t b, Scratch<A>& sc) { double_backward_one<T>(su, args, b, sc); };
  for_groups_and_singles<A>(P, groups, singles, work, single, [&](int64_t lo, int64_t hi,
                                                                  Scratch<A>& sc) {
    // One busy lane of W is slower than the scalar passes (float and
    // double: there is no column-block pass for a lone pair here), but a
    // lone affine pair runs as a group of one: a float pair's state is its
    // checkpoints, which the group passes read; a float64 pair gets the bits
    // it gets inside any group, as in the backward.
    if (hi - lo == 1 && !p.affine) {
      single(pairs[lo].b, sc);
      return;
    }
    if (soft) set_seed_scales(su, hidden, pairs.data(), lo, hi, /*checkpoints=*/kFloat && p.affine);
    const int count = static_cast<int>(hi - lo);
    if (p.affine) {
      simd::affine_double_backward_group<T>(su, pairs.data() + lo, count,
                                            affine[count <= simd::W / 2], hidden, io, sc);
      return;
    }
    simd::double_backward_linear_group<T>(su, pairs.data() + lo, count, linear, hidden, io, sc);
  });
  return true;
#else
  (void)su;
  (void)args;
  return false;
#endif
}

template <typename T>
void double_backward_impl(const Problem& p, const DoubleBackwardArgs& args) {
  const Setup<T> su(p);
  const FlushSubnormals mode(!su.hard);
  if (double_backward_vector<T>(su, args)) return;
  parallel_for<Scratch<Acc<T>>>(
      p.batch, 2.0 * p.batch * su.MN * su.planes,
      [&](int64_t b, Scratch<Acc<T>>& sc) { double_backward_one<T>(su, args, b, sc); });
}

}  // namespace
}  // namespace cpu

void backward_cpu(const Problem& problem, const BackwardArgs& args) {
  const cpu::ThreadLimit limit(problem.cpu_threads);
  switch (problem.dtype) {
    case Dtype::Float16: return cpu::backward_impl<cpu::Half>(problem, args);
    case Dtype::BFloat16: return cpu::backward_impl<cpu::BFloat16>(problem, args);
    case Dtype::Float32: return cpu::backward_impl<float>(problem, args);
    case Dtype::Float64: return cpu::backward_impl<double>(problem, args);
  }
}

void double_backward_cpu(const Problem& problem, const DoubleBackwardArgs& args) {
  const cpu::ThreadLimit limit(problem.cpu_threads);
  switch (problem.dtype) {
    case Dtype::Float16: return cpu::double_backward_impl<cpu::Half>(problem, args);
    case Dtype::BFloat16: return cpu::double_backward_impl<cpu::BFloat16>(problem, args);
    case Dtype::Float32: return cpu::double_backward_impl<float>(problem, args);
    case Dtype::Float64: return cpu::double_backward_impl<double>(problem, args);
  }
}

}  // namespace softsw
