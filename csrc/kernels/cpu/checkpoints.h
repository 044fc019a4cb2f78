// What the training forward keeps of an affine-gap pair it ran in the
// probability domain on SIMD lanes (forward_probability.h), and how the
// backward (reverse_affine_simd.h) gets the rows back.
//
// The C, U, L planes of every cell are 12 bytes a cell: 50 MB at 64 x 256 x
// 256, above glibc's largest mmap threshold, so fresh zeroed pages on every
// call, and writing them (three log2 a cell and a transpose) cost the
// training forward four times its inference. Instead the forward keeps, every
// k rows, its own state of one row (scaled C, A, U and the chunk exponents:
// everything the next row reads), and the backward runs the forward again from
// there over one block of k rows at a time, keeping in cache the shares of
// the block's cells that its reverse pass reads (no log2 or exp2 between).
// The pair's slice of `hidden` (3 M N floats) holds
//   [0]                        the "soft" seeds' scale, 1 / sum 2^(C - total)
//   [1]                        the column blocks of a lone long pair's forward
//                              (affine_long_pair.h), whose own checkpoints
//                              follow the rows' (from rows_end(m)); 0: none
//   [2 + (t - 1) * record ...] checkpoint t >= 1: row t k - 1 (z, A, U: N
//                              floats each, then its chunk exponents)
// and nothing else: the rest of the slice is not written (its pages are not
// touched) unless the whole state is small, when it is zero, so that the
// op's outputs repeat. The row checkpoints are there however the forward ran
// the pair (in a group or on column blocks), so every backward pass can read
// them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "../probability.h"
#include "simd.h"

namespace softsw::cpu {

struct AffineCheckpoints {
  static constexpr int64_t C = ProbabilityRange<float>::kRenormSteps;
  // A block's rows (k + 1 of them: its own and the one above) of shares and
  // C, lane-interleaved, in about this many floats (1 MiB).
  static constexpr int64_t kBlockFloats = int64_t(1) << 18;
  // A whole state at most this large is written in full (zeros after the
  // checkpoints): reused memory, a few microseconds.
  static constexpr int64_t kClearFloats = int64_t(1) << 18;

  int64_t N;       // the problem's columns
  int64_t k;       // rows of a block, >= 4
  int64_t chunks;  // chunk exponents of a row of N columns
  int64_t record;  // floats of one checkpoint

  explicit AffineCheckpoints(int64_t cols)
      : N(cols),
        k(std::clamp<int64_t>(kBlockFloats / (5 * (cols + 1) * simd::W) - 1, 4, 64)),
        chunks((cols + C - 1) / C),
        record(3 * cols + chunks) {}

  // Block t covers rows t k + 1 .. (t + 1) k; its reverse reads rows from
  // t k on (its first row's pass reads the row above), which the forward
  // computes again from row t k - 1.
  int64_t restart_row(int64_t t) const { return t * k - 1; }

  // Whether the forward of a pair of m rows keeps row r: the restart row of a
  // block that reads rows of the pair (a pair that ends on the row above a
  // block needs the block too).
  bool saves(int64_t r, int64_t m) const { return r >= 1 && (r + 1) % k == 0 && r + 1 <= m; }

  static constexpr int64_t kHeader = 2;
  float* row(float* slice, int64_t r) const { return slice + kHeader + ((r + 1) / k - 1) * record; }
  const float* row(const float* slice, int64_t r) const {
    return slice + kHeader + ((r + 1) / k - 1) * record;
  }
  // Where the row checkpoints of a pair of m rows end.
  int64_t rows_end(int64_t m) const { return kHeader + (m / k) * record; }

  // Zeros the slice (`floats` of them) when the whole state (`total` floats)
  // is small; else leaves it.
  void clear(float* slice, int64_t floats, int64_t total) const {
    if (total <= kClearFloats) std::fill(slice, slice + floats, 0.0f);
  }
  void set_seed_scale(float* slice, float scale) const { slice[0] = scale; }
  static float seed_scale(const float* slice) { return slice[0]; }
  // The column blocks of the forward on column blocks (0: it ran in a group).
  static void set_column_blocks(float* slice, int64_t blocks) { slice[1] = float(blocks); }
  static int64_t column_blocks(const float* slice) { return static_cast<int64_t>(slice[1]); }

  // Lane l's row r (n columns) from the group's interleaved rows (col j at
  // j * W + l, chunk q's exponent at q * W + l) into its slice, at column
  // col0 (a multiple of C: a column block's, affine_long_pair.h) ...
  void save(const float* z, const float* a, const float* u, const int32_t* e, int l, int64_t n,
            int64_t r, float* slice, int64_t col0 = 0) const {
    float* rec = row(slice, r);
    for (int64_t j = 0; j < n; ++j) {
      rec[col0 + j] = z[(j + 1) * simd::W + l];
      rec[N + col0 + j] = a[(j + 1) * simd::W + l];
      rec[2 * N + col0 + j] = u[(j + 1) * simd::W + l];
    }
    for (int64_t q = 0; q < (n + C - 1) / C; ++q)
      std::memcpy(rec + 3 * N + col0 / C + q, e + q * simd::W + l, sizeof(int32_t));
  }

  // ... and back: lane l's row r into the interleaved rows (the caller has
  // cleared the columns past n and the exponents past its chunks).
  void restore(const float* slice, int l, int64_t n, int64_t r, float* z, float* a, float* u,
               int32_t* e) const {
    const float* src = row(slice, r);
    for (int64_t j = 0; j < n; ++j) {
      z[(j + 1) * simd::W + l] = src[j];
      a[(j + 1) * simd::W + l] = src[N + j];
      u[(j + 1) * simd::W + l] = src[2 * N + j];
    }
    for (int64_t q = 0; q < (n + C - 1) / C; ++q)
      std::memcpy(e + q * simd::W + l, src + 3 * N + q, sizeof(int32_t));
  }
};

}  // namespace softsw::cpu
