"""The naive CUDA baseline: one block per pair, one thread per DP row.

The design that simple soft Smith-Waterman CUDA code ships (and that softsw
sets out to beat): for pair ``b`` a block of ``M`` threads (rounded up to a
warp) walks the ``M + N - 1`` anti-diagonals; thread ``t`` owns row
``i = t + 1`` and computes cell ``(i, d - i)`` of diagonal ``d``. The last
three diagonals of ``H`` live in shared memory (``3 (M + 1)`` floats), one
``__syncthreads()`` per diagonal, and ``S`` is read straight from global
memory (one scattered 4-byte load per cell, rows ``N`` floats apart). The
softmax is the textbook ``m + log(sum exp(x - m))`` with ``expf``/``logf``.
Forward only, float32, float gap (linear), both reductions, ``T >= 0``;
``M <= 1024`` (the block size).

Compiled at run time with ``torch.utils.cpp_extension.load_inline`` (ninja,
nvcc; honours ``TORCH_CUDA_ARCH_LIST``); if that fails, through CuPy's NVRTC
(``cupy.RawKernel``) when CuPy is installed. ``python naive_cuda.py
--emit-source x.cu`` writes the CUDA source alone, which compiles standalone
(``nvcc -c -arch=sm_90 x.cu``); ``--build`` compiles the extension ahead of
time (into ``TORCH_EXTENSIONS_DIR``) so that the benchmark finds it cached.
"""
from __future__ import annotations

import argparse
import sys

MAX_ROWS = 1024

# Device code only (no includes), so that NVRTC can compile it too.
KERNEL_SOURCE = r"""
extern "C" __global__ void naive_sw_forward(const float* __restrict__ scores,
                                            float* __restrict__ out,
                                            int M, int N, float gap, float temperature,
                                            int soft_reduction) {
  extern __shared__ float smem[];           // three diagonals of H, indexed by row 0..M
  __shared__ float red_a[32], red_b[32];    // one slot per warp for the final reduction
  const float NEG_INF = __int_as_float(0xff800000);
  const int b = blockIdx.x;
  const float* S = scores + (size_t)b * M * N;
  const int i = threadIdx.x + 1;            // this thread's DP row
  const bool hard = temperature == 0.0f;
  const bool soft = soft_reduction != 0 && !hard;
  const float inv_t = hard ? 1.0f : 1.0f / temperature;
  const float g = gap * inv_t;

  for (int k = threadIdx.x; k < 3 * (M + 1); k += blockDim.x) smem[k] = 0.0f;  // boundary H = 0
  __syncthreads();
  float* h2 = smem;                 // diagonal d - 2
  float* h1 = smem + (M + 1);       // diagonal d - 1
  float* h0 = smem + 2 * (M + 1);   // diagonal d (overwrites d - 3)

  float best = 0.0f;                        // "max": boundary zeros count
  float run_max = NEG_INF, run_sum = 0.0f;  // "soft": online log-sum-exp
  for (int d = 2; d <= M + N; ++d) {
    const int j = d - i;
    if (i <= M) {
      float h = 0.0f;                       // j == 0: boundary; outside the grid: unused
      if (j >= 1 && j <= N) {
        const float v1 = h2[i - 1] + S[(size_t)(i - 1) * N + (j - 1)] * inv_t;
        const float v2 = h1[i - 1] + g;
        const float v3 = h1[i] + g;
        const float m = fmaxf(fmaxf(0.0f, v1), fmaxf(v2, v3));
        if (hard) {
          h = m;
        } else {
          h = m + logf(expf(-m) + expf(v1 - m) + expf(v2 - m) + expf(v3 - m));
        }
        if (soft) {
          if (h > run_max) {
            run_sum = run_sum * expf(run_max - h) + 1.0f;
            run_max = h;
          } else {
            run_sum += expf(h - run_max);
          }
        } else {
          best = fmaxf(best, h);
        }
      }
      h0[i] = h;
    }
    __syncthreads();
    float* t = h2; h2 = h1; h1 = h0; h0 = t;
  }

  // Block reduction: shuffles within each warp, then warp 0 over the warps.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_down_sync(0xffffffffu, soft ? run_max : best, o);
    const float os = __shfl_down_sync(0xffffffffu, run_sum, o);
    if (soft) {
      if (om > run_max) { run_sum = run_sum * expf(run_max - om) + os; run_max = om; }
      else if (om > NEG_INF) { run_sum += os * expf(om - run_max); }
    } else {
      best = fmaxf(best, om);
    }
  }
  if (lane == 0) { red_a[warp] = soft ? run_max : best; red_b[warp] = run_sum; }
  __syncthreads();
  if (warp == 0) {
    float m = lane < warps ? red_a[lane] : (soft ? NEG_INF : 0.0f);
    float s = lane < warps ? red_b[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) {
      const float om = __shfl_down_sync(0xffffffffu, m, o);
      const float os = __shfl_down_sync(0xffffffffu, s, o);
      if (soft) {
        if (om > m) { s = s * expf(m - om) + os; m = om; }
        else if (om > NEG_INF) { s += os * expf(om - m); }
      } else {
        m = fmaxf(m, om);
      }
    }
    if (lane == 0) {
      const float r = soft ? m + logf(s) : m;
      out[b] = hard ? r : r * temperature;
    }
  }
}
"""

# Host-side launcher, compiled by nvcc with the kernel above.
LAUNCHER_SOURCE = r"""
#include <cuda_runtime.h>

extern "C" int naive_sw_launch(const float* scores, float* out, int B, int M, int N,
                               float gap, float temperature, int soft_reduction,
                               void* stream) {
  if (B == 0) return 0;
  if (M < 1 || M > 1024 || N < 1) return -1;
  const int threads = ((M + 31) / 32) * 32;
  const size_t smem = 3 * (size_t)(M + 1) * sizeof(float);
  naive_sw_forward<<<B, threads, smem, (cudaStream_t)stream>>>(scores, out, M, N, gap,
                                                               temperature, soft_reduction);
  return (int)cudaGetLastError();
}
"""

CPP_SOURCE = r"""
extern "C" int naive_sw_launch(const float* scores, float* out, int B, int M, int N,
                               float gap, float temperature, int soft_reduction,
                               void* stream);

torch::Tensor naive_forward(torch::Tensor scores, double gap, double temperature,
                            bool soft_reduction, int64_t stream) {
  TORCH_CHECK(scores.is_cuda(), "naive_forward: scores must be a CUDA tensor");
  TORCH_CHECK(scores.scalar_type() == torch::kFloat, "naive_forward: float32 scores only");
  TORCH_CHECK(scores.dim() == 3, "naive_forward: scores must be (B, M, N)");
  TORCH_CHECK(scores.size(1) >= 1 && scores.size(1) <= 1024 && scores.size(2) >= 1,
              "naive_forward: needs 1 <= M <= 1024 and N >= 1");
  auto s = scores.contiguous();
  auto out = torch::empty({s.size(0)}, s.options());
  const int rc = naive_sw_launch(s.data_ptr<float>(), out.data_ptr<float>(),
                                 (int)s.size(0), (int)s.size(1), (int)s.size(2),
                                 (float)gap, (float)temperature, soft_reduction ? 1 : 0,
                                 reinterpret_cast<void*>(stream));
  TORCH_CHECK(rc == 0, "naive_forward: kernel launch failed with CUDA error ", rc);
  return out;
}
"""

_MODULE = None
BACKEND = None  # "load_inline" or "cupy" once loaded


def cuda_source() -> str:
    return KERNEL_SOURCE + LAUNCHER_SOURCE


def _load_inline(verbose: bool = False):
    from torch.utils.cpp_extension import load_inline
    return load_inline(
        name="softsw_naive_sw",
        cpp_sources=CPP_SOURCE,
        cuda_sources=cuda_source(),
        functions=["naive_forward"],
        extra_cuda_cflags=["-O3"],
        verbose=verbose,
    )


class _CupyModule:
    def __init__(self):
        import cupy
        self.cupy = cupy
        self.kernel = cupy.RawKernel(KERNEL_SOURCE, "naive_sw_forward")

    def naive_forward(self, scores, gap, temperature, soft_reduction, stream):
        import numpy as np
        import torch
        cp = self.cupy
        s = scores.contiguous()
        batch, rows, cols = s.shape
        if not (1 <= rows <= MAX_ROWS and cols >= 1):
            raise ValueError("naive_forward: needs 1 <= M <= 1024 and N >= 1")
        out = torch.empty((batch,), device=s.device, dtype=torch.float32)
        threads = ((rows + 31) // 32) * 32
        with cp.cuda.ExternalStream(stream):
            self.kernel((batch,), (threads,),
                        (cp.asarray(s), cp.asarray(out), np.int32(rows), np.int32(cols),
                         np.float32(gap), np.float32(temperature), np.int32(soft_reduction)),
                        shared_mem=3 * (rows + 1) * 4)
        return out


def load(verbose: bool = False):
    """Compile (or load the cached build of) the kernel; returns the module."""
    global _MODULE, BACKEND
    if _MODULE is not None:
        return _MODULE
    try:
        _MODULE, BACKEND = _load_inline(verbose), "load_inline"
    except Exception as first:  # noqa: BLE001 - fall back to NVRTC
        try:
            _MODULE, BACKEND = _CupyModule(), "cupy"
        except Exception:  # noqa: BLE001
            raise first
    return _MODULE


def supports(batch: int, rows: int, cols: int) -> bool:
    return 1 <= rows <= MAX_ROWS and cols >= 1


def align(scores, gap_open: float = -1.0, temperature: float = 1.0, *, reduction: str = "max"):
    """``(B,)`` float32 scores of ``scores`` (a CUDA float32 tensor ``(B, M, N)``)."""
    import torch
    module = load()
    if reduction not in ("max", "soft"):
        raise ValueError(f"reduction must be 'max' or 'soft', got {reduction!r}")
    stream = torch.cuda.current_stream(scores.device).cuda_stream
    return module.naive_forward(scores, float(gap_open), float(temperature),
                                reduction == "soft", stream)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--emit-source", metavar="FILE",
                        help="write the CUDA source (kernel + launcher) to FILE and exit")
    parser.add_argument("--build", action="store_true",
                        help="compile the extension now (cached for later runs)")
    parser.add_argument("--check", action="store_true",
                        help="compare with softsw.antidiagonal on a few shapes (needs a GPU)")
    args = parser.parse_args(argv)
    if args.emit_source:
        with open(args.emit_source, "w") as f:
            f.write(cuda_source())
        return 0
    if args.build:
        load(verbose=True)
        print(f"naive_cuda: built ({BACKEND})")
    if args.check:
        import torch
        import softsw.antidiagonal as ad
        worst = 0.0
        for shape in [(3, 1, 1), (5, 7, 3), (4, 33, 65), (2, 200, 37), (2, 1024, 256)]:
            for temperature in (0.0, 1.0, 0.5):
                for reduction in ("max", "soft"):
                    s = torch.randn(*shape, device="cuda")
                    got = align(s, -1.0, temperature, reduction=reduction)
                    ref = ad.align(s.double(), -1.0, temperature, reduction=reduction)
                    err = ((got.double() - ref).abs() / ref.abs().clamp_min(1)).max().item()
                    worst = max(worst, err)
        print(f"naive_cuda: max relative error vs anti-diagonal float64: {worst:.2e}")
        return 0 if worst < 1e-4 else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
