"""Per-call time of small softsw calls: where the host path goes.

On a small problem (16x32x32) the kernels take a few microseconds; the rest of
a call is host work (argument checks, dispatch, allocation, autograd), during
which the GPU idles. This prints, per call:

* CPU tensors: the mean wall time over many back-to-back calls
  (time.perf_counter), at 0x1x1 (no pairs: the host path alone, no kernel
  work), 1x1x1 and the shape given.
* CUDA tensors (when a GPU is present): the median CUDA-event time of one call
  on an idle GPU (events around the call, as ``softsw.bench``'s latency rows),
  the median host time of the call alone (returned, not synchronised), the mean
  back-to-back time per call, and from torch.profiler the GPU time of the
  call's kernels and memsets and, per call, each kernel launched and the count
  of CUDA runtime calls (launches, memsets, allocations, synchronisations).
  The no-grad forward and the training step also replayed from a CUDA graph:
  the GPU's own time for the call, with no host path.

Rows: the raw ops (``torch.ops.softsw.forward`` without and with the saved
state, ``torch.ops.softsw.backward``), ``softsw.align`` under no_grad, a
training step (``align`` + ``torch.autograd.grad``, and with ``.backward()``),
and floors: ``torch.add`` for one eager op, and the same step through a
native op (``x * 1.0``) or a one-clone Python ``autograd.Function`` in place of
``align`` (what PyTorch's own autograd costs around any op).

    python dev/host_overhead.py [--shape 16x32x32] [--calls 20000] [--device cpu,cuda]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import softsw


class _Clone(torch.autograd.Function):
    """The least a Python autograd.Function costs in a step: one clone."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad


def cases(shape, device):
    """(name, zero-argument function) pairs for tensors of `shape` on `device`."""
    s = torch.randn(shape, device=device)
    sg = s.clone().requires_grad_(True)
    fwd = torch.ops.softsw.forward
    bwd = torch.ops.softsw.backward
    args = (s, None, None, -1.0, 0.0, False, 1.0, None, 0)
    _, hidden, argmax, total = fwd(*args, True)
    ones = torch.ones(shape[0], device=device)

    def step_grad():
        return torch.autograd.grad(softsw.align(sg, -1.0, 1.0).sum(), sg)

    def step_backward():
        sg.grad = None
        softsw.align(sg, -1.0, 1.0).sum().backward()

    def align_no_grad():
        with torch.no_grad():
            return softsw.align(s, -1.0, 1.0)

    def floor_native_step():
        return torch.autograd.grad((sg * 1.0).sum(), sg)

    def floor_function_step():
        return torch.autograd.grad(_Clone.apply(sg).sum(), sg)

    return [
        ("torch.add (floor)", lambda: torch.add(s, 1.0)),
        ("step floor: native mul", floor_native_step),
        ("step floor: Function clone", floor_function_step),
        ("op forward", lambda: fwd(*args, False)),
        ("op forward keep_hidden", lambda: fwd(*args, True)),
        ("op backward", lambda: bwd(ones, *args, hidden, argmax, total)),
        ("align no_grad", align_no_grad),
        ("align forward (grad)", lambda: softsw.align(sg, -1.0, 1.0)),
        ("step align+autograd.grad", step_grad),
        ("step align+.backward()", step_backward),
    ]


def time_cpu(fn, calls):
    for _ in range(min(calls // 10, 1000)):
        fn()
    best = float("inf")
    for _ in range(3):  # best of three runs of calls/3 back-to-back calls
        n = max(1, calls // 3)
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def time_cuda(fn, calls):
    """(event median, host median, back-to-back mean) seconds per call."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    reps = max(50, min(calls, 2000))
    events, host = [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        t0 = time.perf_counter()
        fn()
        host.append(time.perf_counter() - t0)
        e1.record()
        e1.synchronize()
        events.append(e0.elapsed_time(e1) * 1e-3)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    b2b = (time.perf_counter() - t0) / reps
    return statistics.median(events), statistics.median(host), b2b


_RUNTIME_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel",
                  "cuLaunchKernelEx", "cudaMemsetAsync", "cudaMemcpyAsync", "cudaMalloc",
                  "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventRecord",
                  "cudaStreamWaitEvent", "cudaFuncSetAttribute")


def profile_cuda(fn, reps=20):
    """(GPU seconds per call, {kernel or memset: count per call},
    {CUDA runtime call: count per call}) from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    gpu, kernels, runtime = 0.0, {}, {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            gpu += e.time_range.elapsed_us() * 1e-6
            kernels[e.name] = kernels.get(e.name, 0) + 1
        elif e.name in _RUNTIME_CALLS:
            runtime[e.name] = runtime.get(e.name, 0) + 1
    per = {k: v / reps for k, v in kernels.items()}
    return gpu / reps, per, {k: v / reps for k, v in runtime.items()}


def captured(fn):
    """fn captured in a CUDA graph (after a warm-up on a side stream, as torch's
    documentation does it); returns the graph's replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="16x32x32", help="BxMxN (default 16x32x32)")
    p.add_argument("--calls", type=int, default=20000, help="calls per CPU row")
    p.add_argument("--device", default="cpu,cuda",
                   help="comma-separated; cuda is skipped without a GPU")
    a = p.parse_args()
    shape = tuple(int(x) for x in a.shape.split("x"))
    devices = [d for d in a.device.split(",") if d != "cuda" or torch.cuda.is_available()]
    print(f"torch {torch.__version__}, softsw {softsw.__version__}, "
          f"{torch.get_num_threads()} CPU threads")
    for device in devices:
        if device == "cpu":
            empty = dict(cases((0, 1, 1), device))
            small = dict(cases((1, 1, 1), device))
            big = dict(cases(shape, device))
            print(f"\nCPU, us per call (best of 3 runs, {a.calls} calls in all); "
                  "0x1x1 runs no kernel work: the host path alone")
            print(f"{'':28s} {'0x1x1':>9s} {'1x1x1':>9s} {a.shape:>9s}")
            for name in small:
                print(f"{name:28s} {time_cpu(empty[name], a.calls) * 1e6:9.1f} "
                      f"{time_cpu(small[name], a.calls) * 1e6:9.1f} "
                      f"{time_cpu(big[name], max(a.calls // 10, 300)) * 1e6:9.1f}", flush=True)
        else:
            print(f"\nCUDA ({torch.cuda.get_device_name()}), {a.shape}, us per call: "
                  "events (median), host (median, the call alone), back-to-back, "
                  "GPU busy (profiler)")
            print(f"{'':28s} {'events':>8s} {'host':>8s} {'b2b':>8s} {'GPU':>8s}")
            details = []
            for name, fn in cases(shape, device):
                ev, host, b2b = time_cuda(fn, a.calls)
                gpu, kernels, runtime = profile_cuda(fn)
                print(f"{name:28s} {ev * 1e6:8.1f} {host * 1e6:8.1f} {b2b * 1e6:8.1f} "
                      f"{gpu * 1e6:8.1f}", flush=True)
                details.append((name, kernels, runtime))
            # The same work replayed from a CUDA graph: no host path, what the
            # kernels and memsets take back to back on the GPU.
            graphed = [(n, fn) for n, fn in cases(shape, device)
                       if n in ("align no_grad", "step align+autograd.grad")]
            for name, fn in graphed:
                try:
                    ev, host, b2b = time_cuda(captured(fn), a.calls)
                    print(f"{'graph replay: ' + name:28s} {ev * 1e6:8.1f} {host * 1e6:8.1f} "
                          f"{b2b * 1e6:8.1f}", flush=True)
                except Exception as exc:  # noqa: BLE001  (a report line, not a crash)
                    print(f"graph replay: {name}: failed: {type(exc).__name__}: {exc}")
            print("\nper call: GPU work (kernels, memsets) and CUDA runtime calls")
            for name, kernels, runtime in details:
                print(f"{name}:")
                for k, v in sorted(kernels.items(), key=lambda kv: -kv[1]):
                    print(f"    {v:5.2f} x {k[:110]}")
                print("    runtime: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(runtime.items())))


if __name__ == "__main__":
    main()
