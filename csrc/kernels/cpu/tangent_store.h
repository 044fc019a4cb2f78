// Where the SIMD double backward of a group keeps the rows its tangent pass
// computes until its reverse pass reads them, last row first (affine gaps:
// the five node tangents of a row, affine_double_backward_simd.h). P planes a
// row of the accumulate type A (float or double lanes), lane-interleaved as
// the passes read them: col j of lane l at
// j * lanes + l (lanes: the row kernels' lane stride, W or W / 2 for narrow
// rows), col 0 the boundary (0); row 0 is the boundary row (0).
//
// Two layouts behind the same calls, chosen per group:
//   in place: every row of the group as the passes use it. The tangent pass
//     writes its rows there and the reverse pass reads them there: nothing is
//     copied. (mg + 1) (ng + 1) lanes elements a plane; for a group of alike
//     pairs about its pairs' cells. Taken when that is at most twice the
//     blocks' elements.
//   blocks: each pair's rows in its own (mr, nr) block, so that a group's
//     memory is its pairs' cells, not `lanes` times its largest pair's (a
//     lone pair, a ragged group). A row goes to the blocks once the tangent
//     pass wrote it, and comes back through one of two staging rows before
//     the reverse pass reads it.
// Either way the memory is handed in uninitialised (bind): every entry the
// passes read is written first (by the tangent pass, or here: boundaries).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "reverse_simd.h"
#include "simd.h"

#if SOFTSW_CPU_VECTOR
namespace softsw::cpu::simd {

template <typename A, int P>
class TangentRowStore {
 public:
  using Row = std::array<A*, P>;

  TangentRowStore(const ReversePairOf<A>* pairs, int count, int64_t mg, int64_t ng, int lanes)
      : pairs_(pairs), count_(count), mg_(mg), lanes_(lanes), stride_((ng + 1) * lanes) {
    for (int l = 0; l < count; ++l) {
      at_[l] = cells_;
      lane_nr_[l] = pairs[l].nr;
      cells_ += pairs[l].mr * pairs[l].nr;
    }
    in_place_ = (mg + 1) * stride_ <= 2 * cells_;
  }

  bool in_place() const { return in_place_; }
  // The elements bind() takes.
  size_t elements() const {
    return static_cast<size_t>(P * (in_place_ ? (mg_ + 1) * stride_ : cells_ + 2 * stride_));
  }
  void bind(A* mem) {
    mem_ = mem;
    if (in_place_) {
      std::fill(mem, mem + P * stride_, A(0));  // row 0
      for (int64_t r = 1; r <= mg_; ++r)
        for (A* a : in_place_row(r)) std::fill(a, a + lanes_, A(0));  // col 0
    } else {
      staging_ = mem + P * cells_;
      std::fill(staging_, staging_ + 2 * P * stride_, A(0));
    }
  }

  // Tangent pass, rows 1, 2, ..., mg: row i to write (every column of it,
  // cols 1..ng), then kept(i); row i - 1, as written, is up(i).
  Row put(int64_t i) { return in_place_ ? in_place_row(i) : staged(i); }
  Row up(int64_t i) { return in_place_ ? in_place_row(i - 1) : staged(i - 1); }
  void kept(int64_t i) {
    if (in_place_) return;
    const Row src = staged(i);
    for (int k = 0; k < P; ++k) {
      A* dst[W] = {};
      block_rows(i, k, dst);
      deinterleave_rows(dst, src[k] + lanes_, lane_nr_, count_, lanes_);
    }
  }

  // Reverse pass, rows mg, mg - 1, ..., 0: row i to read, valid while row
  // i + 1 or i - 1 is the next asked for.
  Row get(int64_t i) {
    if (in_place_) return in_place_row(i);
    const Row dst = staged(i);
    for (int k = 0; k < P; ++k) {
      std::fill(dst[k] + lanes_, dst[k] + stride_, A(0));
      if (i == 0) continue;
      A* rows[W] = {};
      block_rows(i, k, rows);
      const A* src[W] = {};
      for (int l = 0; l < count_; ++l) src[l] = rows[l];
      interleave_rows(dst[k] + lanes_, src, lane_nr_, count_, A(1), lanes_);
    }
    return dst;
  }

  // Plane k at cell (i, j) of lane l (inside its region), once written.
  A at(int l, int k, int64_t i, int64_t j) const {
    if (in_place_) return mem_[(i * P + k) * stride_ + j * lanes_ + l];
    const int64_t mr = pairs_[l].mr, nr = lane_nr_[l];
    return mem_[P * at_[l] + k * mr * nr + (i - 1) * nr + (j - 1)];
  }

 private:
  Row in_place_row(int64_t r) const {
    Row row;
    for (int k = 0; k < P; ++k) row[k] = mem_ + (r * P + k) * stride_;
    return row;
  }
  Row staged(int64_t r) const {
    Row row;
    for (int k = 0; k < P; ++k) row[k] = staging_ + ((r & 1) * P + k) * stride_;
    return row;
  }
  // Row r of plane k in each lane's block (nullptr: the lane has no row r).
  void block_rows(int64_t r, int k, A** rows) const {
    for (int l = 0; l < count_; ++l) {
      const int64_t mr = pairs_[l].mr, nr = lane_nr_[l];
      rows[l] = r >= 1 && r <= mr ? mem_ + P * at_[l] + k * mr * nr + (r - 1) * nr : nullptr;
    }
  }

  const ReversePairOf<A>* pairs_;
  int count_;
  int64_t mg_, lanes_, stride_;
  int64_t at_[W] = {}, lane_nr_[W] = {};
  int64_t cells_ = 0;
  bool in_place_ = false;
  A* mem_ = nullptr;
  A* staging_ = nullptr;
};

}  // namespace softsw::cpu::simd
#endif  // SOFTSW_CPU_VECTOR
