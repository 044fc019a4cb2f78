// The floating-point mode the CPU passes run in. Subnormal numbers (below
// 2^-126 in float, 2^-1022 in double) are 10-100x slower than normal ones on
// x86 (each operation takes a microcode assist), and the soft passes make
// them all the time: weights and adjoints far from the alignment's mass, the
// seeds of a "soft" reduction, Z far below its chunk. At that size they are
// below anything the result can show (the polynomial exp2 of simd.h already
// returns 0 there), so the soft passes (T > 0) run with subnormals flushed to
// zero (inputs and results: x86 MXCSR DAZ + FTZ, Arm FPCR.FZ); measured, a
// float32 training step of 64 x 256 x 256 on two x86 cores took 16 -> 12 ms
// (linear gaps) and 57 -> 28 ms (affine gaps). Hard mode (T = 0) is max-plus
// on the caller's scores and keeps the caller's mode: a subnormal score is a
// score.
//
// The mode is a thread's: FlushSubnormals sets it on the calling thread for a
// scope, and parallel_for (thread_pool.h) runs its workers in the mode of the
// thread that called it.
#pragma once

#include <cstdint>

#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
#endif

namespace softsw::cpu {

// A thread's floating-point control word (x86 MXCSR, Arm FPCR); 0 where
// neither is known.
struct FloatMode {
  uint64_t bits = 0;

  static FloatMode current() {
#if defined(__x86_64__) || defined(_M_X64)
    return {_mm_getcsr()};
#elif defined(__aarch64__)
    uint64_t v;
    __asm__ volatile("mrs %0, fpcr" : "=r"(v));
    return {v};
#else
    return {};
#endif
  }
  void apply() const {
#if defined(__x86_64__) || defined(_M_X64)
    _mm_setcsr(static_cast<unsigned>(bits));
#elif defined(__aarch64__)
    __asm__ volatile("msr fpcr, %0" : : "r"(bits));
#endif
  }
  FloatMode with_subnormals_flushed() const {
#if defined(__x86_64__) || defined(_M_X64)
    return {bits | 0x8040u};  // FTZ (bit 15) | DAZ (bit 6)
#elif defined(__aarch64__)
    return {bits | (uint64_t(1) << 24)};  // FZ
#else
    return *this;
#endif
  }
  bool operator==(const FloatMode& o) const { return bits == o.bits; }
};

// Runs a scope in `mode` on this thread, then restores the thread's own.
class FloatModeScope {
 public:
  explicit FloatModeScope(FloatMode mode) : saved_(FloatMode::current()) {
    if (!(mode == saved_)) mode.apply();
    changed_ = !(mode == saved_);
  }
  ~FloatModeScope() {
    if (changed_) saved_.apply();
  }
  FloatModeScope(const FloatModeScope&) = delete;
  FloatModeScope& operator=(const FloatModeScope&) = delete;

 private:
  FloatMode saved_;
  bool changed_ = false;
};

// The soft passes' mode for a scope when `soft` (see above), else the
// caller's.
class FlushSubnormals {
 public:
  explicit FlushSubnormals(bool soft)
      : scope_(soft ? FloatMode::current().with_subnormals_flushed() : FloatMode::current()) {}

 private:
  FloatModeScope scope_;
};

}  // namespace softsw::cpu
