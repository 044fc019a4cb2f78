// Scores staged through shared memory for the wavefront passes that read them
// a chunk ahead (forward_probability.cu, backward.cu).
//
// A band (wavefront.cuh) takes its steps 32 at a time (a chunk). Chunk q
// needs, of band row r, the 32 columns 32q - r .. 32q - r + 31: a
// parallelogram. It is copied with cp.async (no registers held, each
// warp-wide copy one row's consecutive scores) into one of a warp's two
// shared-memory slots, so that a whole chunk of steps hides the copy. A slot
// keeps row lR + k at [k][l] (lane l's row k, R rows per lane), element x of
// that row at x (plus, for 2-byte types, the row's offset in its 4-byte
// word), rows padded to 33 elements (34 for 2-byte types, copied as 4-byte
// words): at a step every lane reads element x of its row k, 32 different
// banks.
//
// A reverse pass writes its per-cell results (d score / d S) back into the
// slot over the score the step read, and flush_parallelogram stores the
// finished chunk with one coalesced warp-wide store per row.
#pragma once

#include <cstdint>

#include "wavefront.cuh"

namespace softsw {
namespace cuda {

constexpr int kChunkSteps = kWarp;
// Row pitch of a staging slot, in elements: 32 + padding (see the header).
template <typename T> constexpr int kStagePitch = sizeof(T) == 2 ? 34 : 33;
// Elements of a warp's two staging slots.
template <typename T, int R> constexpr int kStageElements = 2 * R * kWarp * kStagePitch<T>;

// Dynamic shared memory of a block of staging warps.
template <typename T, int R>
constexpr size_t staging_smem_bytes() {
  return size_t(kWarpsPerBlock) * kStageElements<T, R> * sizeof(T);
}

// cp.async of BYTES (4 or 8) from global to shared memory; zeros when !ok.
template <int BYTES>
__device__ __forceinline__ void copy_async(void* shared, const void* global, bool ok) {
#if defined(SOFTSW_WARP_EMULATION)  // the copy lands at once
  // cp.async needs both addresses aligned to its size: a misaligned copy
  // would fault on the GPU, so it stops the emulation.
  if (ok && ((reinterpret_cast<uintptr_t>(shared) | reinterpret_cast<uintptr_t>(global)) & (BYTES - 1)))
    __builtin_trap();
  if (ok) memcpy(shared, global, BYTES);
  else memset(shared, 0, BYTES);
#else
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(dst), "l"(global),
               "n"(BYTES), "r"(ok ? BYTES : 0)
               : "memory");
#endif
}
__device__ __forceinline__ void copy_async_commit() {
#if !defined(SOFTSW_WARP_EMULATION)
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void copy_async_wait() {
#if !defined(SOFTSW_WARP_EMULATION)
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// Where band row r's elements start in a slot row: 0, or for 2-byte types the
// offset (0 or 1) of the row's parallelogram in its 4-byte word (the same for
// every chunk: chunks start 32 elements apart). `band` is row 0, column 0.
template <typename T>
__device__ __forceinline__ int parallelogram_offset(const T* band, int64_t cols, int r) {
  if constexpr (sizeof(T) == 2)
    return static_cast<int>((reinterpret_cast<uintptr_t>(band + int64_t(r) * (cols - 1)) >> 1) & 1);
  else
    return 0;
}

// Issues the copy of chunk q of a band (rows 0 .. rows - 1 of `band`, a pair
// of n columns, `cols` apart, 0 for one row broadcast to all) into `slot`. The caller commits the group (one
// for all the inputs of a chunk, so that a wait counts chunks, not inputs).
// [begin, end) is the whole tensor: 2-byte copies never read past it.
template <typename T, int R>
__device__ __forceinline__ void stage_parallelogram(T* slot, const T* band, int64_t cols, int q,
                                                    int rows, int n, const T* begin,
                                                    const T* end, int lane) {
  constexpr int kPitch = kStagePitch<T>;
  const T* src = band + kChunkSteps * q;  // row r, column 32q - r (walked)
  int col = kChunkSteps * q + lane;      // this lane's column in row r
  if constexpr (sizeof(T) >= 4) {
#pragma unroll 4
    for (int r = 0; r < rows; ++r, src += cols - 1, --col) {
      T* const dst = slot + ((r % R) * kWarp + r / R) * kPitch;
      const bool ok = static_cast<unsigned>(col) < static_cast<unsigned>(n);
      copy_async<sizeof(T)>(dst + lane, ok ? src + lane : begin, ok);
    }
  } else {
    // 4-byte words covering the 32 elements: word j of row r holds columns
    // c - off + 2j and +1 (c = 32q - r; off: its place in its word). 17 words
    // cover a row. The chunk's words are numbered row by row and dealt to the
    // 32 lanes in turn, so a warp-wide copy moves 32 words, not one row's 17
    // (ncu: a copy a row left lanes 17..31 idle and ran the bfloat16 forward
    // at twice the float one's instructions; dealt to all lanes, bfloat16
    // inference ran 30-39 % faster, H200). A word may reach one element
    // past the tensor only in a chunk whose last row's words reach its end:
    // only such a chunk checks.
    constexpr int kWords = kWarp / 2 + 1;
    const int64_t last_row = cols >= 1 ? int64_t(rows - 1) * (cols - 1) : 0;  // the farthest row's start
    const bool near_end = src + last_row + 2 * (kWords - 1) + 2 > end;
    // This lane's first word: row lane / 17, word lane % 17; each turn moves
    // it 32 words on: 15 words along, or 2 back on the row after next.
    int r = lane / kWords, j = lane % kWords;
    src += int64_t(r) * (cols - 1);
    col -= lane + r;  // 32q - r
#pragma unroll 2
    while (r < rows) {
      T* const dst = slot + ((r % R) * kWarp + r / R) * kPitch;
      const int off = static_cast<int>((reinterpret_cast<uintptr_t>(src) >> 1) & 1);
      const T* const word = src - off + 2 * j;
      const int c = col - off + 2 * j;
      const bool ok = c + 1 >= 0 && c < n;
      if (near_end && ok && word + 2 > end) dst[2 * j] = *word;  // the tensor's very last element, alone
      else copy_async<4>(dst + 2 * j, ok ? word : begin, ok);
      const int rows_on = j + (kWarp - kWords) >= kWords ? 2 : 1;
      j += kWarp - kWords * rows_on;
      r += rows_on;
      src += rows_on * (cols - 1);
      col -= rows_on;
    }
  }
}

// Stores chunk q of a slot of R rows a lane (row lR + k at [k][l], as
// stage_parallelogram<T, R> filled it) to `out` (row 0, column 0 of the band;
// rows `cols` apart): row r's elements at columns 32q - r + l in [0, n), one
// warp-wide store per row. `offset_of(r)` is the row's parallelogram_offset
// in the slot (of the scores that were staged there).
template <typename T, int R, typename Offset>
__device__ __forceinline__ void flush_parallelogram(const T* slot, T* out, int64_t cols, int q,
                                                    int rows, int n, Offset offset_of, int lane) {
  constexpr int kPitch = kStagePitch<T>;
  int col = kChunkSteps * q + lane;
  T* dst = out + col;
#pragma unroll 4
  for (int r = 0; r < rows; ++r, --col, dst += cols - 1)
    if (static_cast<unsigned>(col) < static_cast<unsigned>(n))
      *dst = slot[((r % R) * kWarp + r / R) * kPitch + offset_of(r) + lane];
}

}  // namespace cuda
}  // namespace softsw
