// The CUDA that the kernels of csrc/kernels use, emulated on the CPU, so that
// their logic (indexing, the band hand-off protocols, the warp exchanges, the
// staging) can be checked on a machine without a GPU. Not their speed, and
// not the GPU's arithmetic: recurrence.h and probability.h take their host
// branches (std::exp2 where the GPU runs ex2.approx).
//
// Every thread of a block is a fiber (ucontext) of the one host thread; the
// scheduler (emulation.cpp) runs them in rounds, the warps in a random order
// and each sitting out half the rounds (seeded: EMULATE_SCHEDULE_SEED). A fiber gives way at every
// warp exchange (__shfl_*_sync, __syncwarp, __all_sync), at __syncthreads and
// at __nanosleep (the protocols' polls), so every access to memory is atomic
// and the memory model is sequential: the emulation shows logic errors, not
// missing fences. Blocks run one after another (a persistent grid's first
// block then does all the work, which its ticket order allows), so shared
// memory is one buffer.
//
// Built with -DSOFTSW_WARP_EMULATION and dev/emulate/include ahead of the
// CUDA toolkit on the include path (see dev/emulate/run.sh).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

#include "kernels/cpu/element.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))

struct uint3 {
  unsigned x, y, z;
};
struct uint2 {
  unsigned x, y;
};
struct float2 {
  float x, y;
};
struct float4 {
  float x, y, z, w;
};
struct double2 {
  double x, y;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline double2 make_double2(double x, double y) { return {x, y}; }

namespace softsw_emulation {

// The running fiber's thread and block index.
uint3 thread_index();
uint3 block_index();
// Runs `body` as the kernel of a grid of `blocks` blocks of `threads`.
void launch(unsigned blocks, unsigned threads, size_t smem, const std::function<void()>& body);
// Warp exchange: every lane of the running fiber's warp gives `value`; each
// gets back the value of lane `source(lane)` (its own where that is out of
// range). Also the rendezvous of __syncwarp.
uint64_t exchange(uint64_t value, int source);
// Every thread of the block.
void sync_block();
// Gives way to the other fibers (a poll's wait).
void yield();
// The block's dynamic shared memory.
unsigned char* dynamic_shared();

template <typename T>
T shuffle(T value, int source) {
  static_assert(sizeof(T) <= 8, "a warp exchange carries at most 8 bytes");
  uint64_t raw = 0;
  std::memcpy(&raw, &value, sizeof(T));
  raw = exchange(raw, source);
  T out;
  std::memcpy(&out, &raw, sizeof(T));
  return out;
}

}  // namespace softsw_emulation

#define threadIdx (::softsw_emulation::thread_index())
#define blockIdx (::softsw_emulation::block_index())

// --------------------------------------------------------------------------
// Half types: bits, with the CPU kernels' conversions (cpu/element.h).
// --------------------------------------------------------------------------
struct __half {
  uint16_t bits;
};
struct __nv_bfloat16 {
  uint16_t bits;
};
inline float __half2float(__half h) { return softsw::cpu::half_to_float(h.bits); }
inline __half __float2half_rn(float x) { return {softsw::cpu::float_to_half(x)}; }
inline float __bfloat162float(__nv_bfloat16 h) { return softsw::cpu::bf16_to_float(h.bits); }
inline __nv_bfloat16 __float2bfloat16_rn(float x) { return {softsw::cpu::float_to_bf16(x)}; }

// --------------------------------------------------------------------------
// Device intrinsics
// --------------------------------------------------------------------------
template <typename T> inline T __ldg(const T* p) { return *p; }
template <typename T> inline T __ldcg(const T* p) { return *p; }
template <typename T> inline void __stcg(T* p, T v) { *p = v; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline unsigned __float_as_uint(float x) {
  unsigned u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
inline long long __double_as_longlong(double x) {
  long long u;
  std::memcpy(&u, &x, 8);
  return u;
}
inline double __longlong_as_double(long long u) {
  double x;
  std::memcpy(&x, &u, 8);
  return x;
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  const unsigned long long old = *p;
  *p = old + v;
  return old;
}
inline void __nanosleep(unsigned) { softsw_emulation::yield(); }
inline void __syncthreads() { softsw_emulation::sync_block(); }

constexpr unsigned kEmulatedFullMask = 0xffffffffu;
inline void check_full_mask(unsigned mask) {
  if (mask != kEmulatedFullMask) std::abort();  // the kernels exchange over whole warps only
}
inline int emulated_lane() { return static_cast<int>(softsw_emulation::thread_index().x & 31); }
inline void __syncwarp(unsigned mask = kEmulatedFullMask) {
  check_full_mask(mask);
  softsw_emulation::exchange(0, 0);
}
template <typename T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  check_full_mask(mask);
  (void)width;
  return softsw_emulation::shuffle(v, src & 31);
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  check_full_mask(mask);
  (void)width;
  const int lane = emulated_lane();
  return softsw_emulation::shuffle(v, lane >= static_cast<int>(delta) ? lane - static_cast<int>(delta) : lane);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  check_full_mask(mask);
  (void)width;
  const int lane = emulated_lane();
  return softsw_emulation::shuffle(v, lane + static_cast<int>(delta) < 32 ? lane + static_cast<int>(delta) : lane);
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  check_full_mask(mask);
  (void)width;
  return softsw_emulation::shuffle(v, emulated_lane() ^ lane_mask);
}
inline int __all_sync(unsigned mask, int predicate) {
  check_full_mask(mask);
  // Each lane reads every lane's predicate: 32 exchanges (rare in the kernels).
  int all = 1;
  for (int l = 0; l < 32; ++l) all &= softsw_emulation::shuffle(predicate != 0 ? 1 : 0, l);
  return all;
}

// CUDA's device min / max overloads.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }

// --------------------------------------------------------------------------
// Runtime
// --------------------------------------------------------------------------
typedef struct CUstream_st* cudaStream_t;
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
typedef cudaError_t cudaError;
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t = nullptr) {
  std::memset(p, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
// One multiprocessor, one block a multiprocessor: a persistent grid is one
// block of kWarpsPerBlock warps.
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr, int) {
  *v = 1;
  return cudaSuccess;
}
template <typename K>
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, K, int, size_t) {
  *n = 1;
  return cudaSuccess;
}
template <typename K>
inline cudaError_t cudaFuncSetAttribute(K, cudaFuncAttribute, int) {
  return cudaSuccess;
}
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return "no error"; }
