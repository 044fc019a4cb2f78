"""Benchmark softsw against its baselines: ``python -m softsw.bench`` (or ``softsw bench``).

For every shape ``BxMxN`` and mode, one row per method:

* median time per call: CUDA events around each call on the GPU (calls are
  queued back to back, so the time is the GPU's, launch gaps included where
  the host is slower than the GPU); ``perf_counter`` on the CPU and for JAX
  (which runs on its own streams; ``block_until_ready`` after every call);
* G cells/s = B*M*N / seconds / 1e9;
* peak memory: ``torch.cuda.max_memory_allocated`` during one call, minus what
  was allocated before it (for JAX, XLA's compiled memory figure);
* "softsw x": this baseline's time over softsw's, measured in the same run
  (how many times faster softsw is);
* check: the largest difference of the scores (and, in training, of the
  gradients; in hvp, of the Hessian-vector products) from the reference
  method of the group (the anti-diagonal version when it ran, else JAX),
  relative to max(1, |reference|);
* "x train" (hvp rows): this method's HVP step over its training step of the
  same shape, measured in the same run.

Methods: ``softsw`` (the kernels), ``antidiag`` (softsw.antidiagonal, the
package's anti-diagonal PyTorch version, autograd for training), ``jax``
(benchmarks/jax_baseline.py, ``lax.scan`` + ``jax.grad``, when JAX imports)
and ``naive`` (benchmarks/naive_cuda.py, one block per pair, forward only,
M <= 1024). Modes: ``inference`` (forward under ``no_grad``) and ``training``
(forward + ``score.sum().backward()``), and the eager-call latency rows
(``latency-fwd``, ``latency-step``) of one call at 16x32x32. ``--mode hvp``
runs the training step and the Hessian-vector-product step of a loss on the
expected alignment ``P = d score / d S``: forward, ``P`` by a backward with
``create_graph``, then the backward of ``<W, P>`` for a fixed random ``W``
(``S.grad`` is then the Hessian of the score times ``W``).

Inputs: scores ~ N(0, 1), linear gap -1, temperature 1, reduction "max"
unless told otherwise. Each call reads the next of several input buffers, so
that small inputs are not served from the L2 cache. A baseline whose call
would take longer than ``--max-baseline-s`` (estimated from the last smaller
shape it ran) is skipped with a note. A method that fails prints its error
in its row; the run goes on. The JSON (``--json``) is rewritten after every
row, so a crash keeps what was measured. The table comes last.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------

ISSUE_SHAPES = "16x32x32,1024x128x128,256x512x512,64x1024x1024,8x4096x4096,1x16384x16384"
# The CPU row first: the time limit stops baselines, and its comparison is a target.
DEFAULT_CUDA_SHAPES = "64x256x256@cpu," + ISSUE_SHAPES
QUICK_CUDA_SHAPES = "16x128x128@cpu,16x32x32,1024x128x128,64x1024x1024,8x4096x4096"
DEFAULT_CPU_SHAPES = "16x32x32,64x256x256"
QUICK_CPU_SHAPES = "16x32x32,64x128x128"
ALL_METHODS = ("softsw", "antidiag", "jax", "naive")
BASELINES = ("antidiag", "jax", "naive")

# Floors (docs/benchmarks.md): H200, 132 SMs x 16 MUFU/clk x 1.98 GHz.
SFU_OPS_PER_S = 132 * 16 * 1.98e9
FLOOR_INFERENCE_CELLS = SFU_OPS_PER_S / 4  # 3 ex2 + 1 lg2 per cell
HBM_BYTES_PER_S = 4.3e12                    # measured device-to-device copy, read + write
FLOOR_TRAINING_CELLS = HBM_BYTES_PER_S / 20  # S, H written; S, H read, dS written (4 B each)
# Affine gaps: 14 MUFU ops per cell (U, L: 2 each; A, B: 3 each; C: 4); a training step
# writes 3 states, reads them back with S twice, writes dS: 36 B per cell.
FLOOR_AFFINE_INFERENCE_CELLS = SFU_OPS_PER_S / 14
FLOOR_AFFINE_TRAINING_CELLS = HBM_BYTES_PER_S / 36


def floors(affine: bool):
    """(inference cells/s at the SFU floor, training cells/s at the memory floor,
    bytes per cell of that training step) on the H200, for fp32 scores and state."""
    if affine:
        return FLOOR_AFFINE_INFERENCE_CELLS, FLOOR_AFFINE_TRAINING_CELLS, 36
    return FLOOR_INFERENCE_CELLS, FLOOR_TRAINING_CELLS, 20

# Cost model of a baseline's call, t = a * diagonals + b * cells, fitted to the
# last (largest) shape it ran; `a` (launch overhead per anti-diagonal) is capped
# by these priors, seconds per anti-diagonal.
_PRIOR_PER_DIAGONAL = {"antidiag": (1e-4, 4e-4), "jax": (2e-5, 6e-5), "naive": (1e-6, 1e-6)}
# Before a baseline has run any shape: seconds per cell on the CPU.
_PRIOR_PER_CELL_CPU = {"antidiag": 1e-7, "jax": 1e-7}

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16,
           "fp16": torch.float16, "half": torch.float16, "bfloat16": torch.bfloat16,
           "bf16": torch.bfloat16, "float64": torch.float64, "fp64": torch.float64,
           "double": torch.float64}


@dataclass
class Case:
    batch: int
    rows: int
    cols: int
    device: str           # "cuda" or "cpu"
    dtype: str            # "float32", ...
    mode: str             # "inference", "training", "hvp", "latency-fwd", "latency-step"
    affine: bool
    gap_open: float
    gap_extend: Optional[float]
    temperature: float
    reduction: str
    gap_tensor: bool = False  # the gaps as (B, M, N) tensors of their value (softsw only)

    @property
    def cells(self) -> int:
        return self.batch * self.rows * self.cols

    @property
    def shape(self) -> str:
        return f"{self.batch}x{self.rows}x{self.cols}"

    @property
    def training(self) -> bool:
        """A backward runs (training step or HVP step): inputs need gradients."""
        return self.mode in ("training", "latency-step", "hvp")

    @property
    def hvp(self) -> bool:
        return self.mode == "hvp"

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]

    def group(self) -> Tuple:
        return (self.shape, self.device, self.dtype, self.mode, self.affine)


@dataclass
class Row:
    shape: str
    batch: int
    rows: int
    cols: int
    device: str
    dtype: str
    mode: str
    affine: bool
    reduction: str
    temperature: float
    method: str
    status: str = "ok"               # ok | error | skipped | unsupported
    timer: str = ""                  # cuda-events | wall
    median_s: Optional[float] = None
    min_s: Optional[float] = None
    reps: int = 0
    gcells: Optional[float] = None
    peak_bytes: Optional[int] = None
    peak_kind: str = ""              # "allocated" | "xla-estimate"
    speedup: Optional[float] = None  # this method's time / softsw's (baselines)
    speedups: Dict[str, float] = field(default_factory=dict)  # softsw row: per baseline
    over_training: Optional[float] = None  # hvp rows: this time / the same method's training step
    check_score: Optional[float] = None
    check_grad: Optional[float] = None
    check_ref: str = ""
    check_ok: Optional[bool] = None
    wall_s: Optional[float] = None   # latency rows: host-observed time with sync
    b2b_s: Optional[float] = None    # latency rows: back-to-back time per call
    note: str = ""
    error: str = ""


class Unsupported(Exception):
    pass


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def _parse_shapes(text: str, default_device: str) -> List[Tuple[int, int, int, str]]:
    shapes = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        device = default_device
        if "@" in item:
            item, device = item.split("@", 1)
        parts = item.lower().split("x")
        if len(parts) == 2:
            parts = ["1"] + parts
        if len(parts) != 3:
            raise SystemExit(f"bench: bad shape {item!r}: want BxMxN (e.g. 16x32x32[@cpu])")
        b, m, n = (int(p) for p in parts)
        shapes.append((b, m, n, device))
    return shapes


def _fmt_time(s: Optional[float]) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1.0:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def _fmt_num(x: Optional[float], spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _benchmarks_dir(explicit: Optional[str]) -> Optional[Path]:
    candidates = []
    if explicit:
        candidates.append(Path(explicit))
    if os.environ.get("SOFTSW_BENCHMARKS_DIR"):
        candidates.append(Path(os.environ["SOFTSW_BENCHMARKS_DIR"]))
    candidates.append(Path.cwd() / "benchmarks")
    candidates.append(Path(__file__).resolve().parents[2] / "benchmarks")
    for c in candidates:
        if (c / "jax_baseline.py").is_file() or (c / "naive_cuda.py").is_file():
            return c
    return None


def _import_file(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _git_commit() -> str:
    if os.environ.get("SOFTSW_COMMIT"):
        return os.environ["SOFTSW_COMMIT"]
    for where in (Path.cwd(), Path(__file__).resolve().parents[2]):
        try:
            out = subprocess.run(["git", "-C", str(where), "rev-parse", "--short=12", "HEAD"],
                                 capture_output=True, text=True, timeout=5)
            if out.returncode == 0 and out.stdout.strip():
                dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain",
                                        "--untracked-files=no"],
                                       capture_output=True, text=True, timeout=5)
                return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
        except Exception:  # noqa: BLE001
            pass
    return "unknown"


def _short_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().replace("\n", " ")
    return text[:300]


# --------------------------------------------------------------------------
# Methods. setup() returns a Runner or raises Unsupported.
# --------------------------------------------------------------------------


class Runner:
    timer = "cuda-events"
    peak_kind = "allocated"

    def __init__(self, step: Callable[[int], Any], nbuf: int, device: str):
        self.step = step
        self.nbuf = nbuf
        self.device = device
        if device != "cuda":
            self.timer = "wall"

    def scores(self, out) -> torch.Tensor:
        return out.detach().double().cpu()

    def grad(self, out, k: int) -> Optional[torch.Tensor]:
        return None

    def peak_begin(self) -> None:
        """Called before one call whose peak memory is measured."""

    def peak_end(self) -> Optional[int]:
        return None

    def cleanup(self) -> None:
        pass


class TorchRunner(Runner):
    """softsw, antidiag and naive: a function of a (B, M, N) tensor."""

    def __init__(self, fn, buffers: List[torch.Tensor], case: Case):
        self.buffers = buffers
        self.case = case
        if case.hvp:
            weight = _hvp_weight(case)

            def step(k):
                x = buffers[k]
                x.grad = None
                out = fn(x)
                (expected,) = torch.autograd.grad(out.sum(), [x], create_graph=True)
                (expected * weight).sum().backward()
                return out
        elif case.training:
            def step(k):
                x = buffers[k]
                x.grad = None
                out = fn(x)
                out.sum().backward()
                return out
        else:
            def step(k):
                with torch.no_grad():
                    return fn(buffers[k])
        super().__init__(step, len(buffers), case.device)

    def grad(self, out, k: int) -> Optional[torch.Tensor]:
        g = self.buffers[k].grad
        return None if g is None else g.detach().clone()

    def peak_begin(self) -> None:
        self._base = None
        if self.device != "cuda":
            return
        for b in self.buffers:  # no gradient of an earlier call is counted or freed
            b.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        self._base = torch.cuda.memory_allocated()

    def peak_end(self) -> Optional[int]:
        if self.device != "cuda" or self._base is None:
            return None
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated() - self._base)

    def cleanup(self) -> None:
        for b in self.buffers:
            b.grad = None


def _hvp_weight(case: Case) -> torch.Tensor:
    """The fixed W of the HVP step's loss <W, P>: N(0, 1), like the scores."""
    gen = torch.Generator(device=case.device)
    gen.manual_seed(12345)
    return torch.randn((case.batch, case.rows, case.cols), generator=gen, device=case.device,
                       dtype=torch.float32).to(case.torch_dtype)


class Method:
    name = ""

    def __init__(self, args):
        self.args = args

    def check(self, case: Case) -> None:
        """Raise Unsupported if this method cannot run the case."""

    def setup(self, case: Case, buffers: List[torch.Tensor]) -> Runner:
        raise NotImplementedError


class SoftswMethod(Method):
    name = "softsw"

    def setup(self, case, buffers):
        import softsw
        kw = dict(gap_extend=case.gap_extend, reduction=case.reduction)
        gap_open = case.gap_open
        if case.gap_tensor:  # read per cell, as position-specific gaps are
            shape = (case.batch, case.rows, case.cols)
            full = dict(device=case.device, dtype=case.torch_dtype)
            gap_open = torch.full(shape, case.gap_open, **full)
            if case.gap_extend is not None:
                kw["gap_extend"] = torch.full(shape, case.gap_extend, **full)

        def fn(x):
            return softsw.align(x, gap_open, case.temperature, **kw)
        return TorchRunner(fn, buffers, case)


class AntidiagMethod(Method):
    name = "antidiag"

    def setup(self, case, buffers):
        from softsw import antidiagonal
        kw = dict(gap_extend=case.gap_extend, reduction=case.reduction)

        def fn(x):
            return antidiagonal.align(x, case.gap_open, case.temperature, **kw)
        return TorchRunner(fn, buffers, case)


class NaiveMethod(Method):
    name = "naive"
    _module = None
    _error: Optional[str] = None

    def check(self, case):
        if case.device != "cuda":
            raise Unsupported("CUDA only")
        if case.training:
            raise Unsupported("forward only")
        if case.dtype != "float32":
            raise Unsupported("float32 only")
        if case.affine:
            raise Unsupported("linear gaps only")
        if not (1 <= case.rows <= 1024):
            raise Unsupported("M > 1024 (one thread per row)")

    def setup(self, case, buffers):
        self.check(case)
        if NaiveMethod._error:
            raise RuntimeError(NaiveMethod._error)
        if NaiveMethod._module is None:
            bdir = _benchmarks_dir(self.args.benchmarks_dir)
            if bdir is None or not (bdir / "naive_cuda.py").is_file():
                raise Unsupported("benchmarks/naive_cuda.py not found")
            try:
                mod = _import_file("softsw_bench_naive_cuda", bdir / "naive_cuda.py")
                t0 = time.perf_counter()
                mod.load()
                print(f"  [naive] kernel ready via {mod.BACKEND} in "
                      f"{time.perf_counter() - t0:.1f} s", flush=True)
            except Exception as exc:  # noqa: BLE001
                NaiveMethod._error = f"build failed: {_short_error(exc)}"
                raise RuntimeError(NaiveMethod._error) from exc
            NaiveMethod._module = mod
        mod = NaiveMethod._module

        def fn(x):
            return mod.align(x, case.gap_open, case.temperature, reduction=case.reduction)
        return TorchRunner(fn, buffers, case)


class JaxRunner(Runner):
    timer = "wall"
    peak_kind = "xla-estimate"

    def __init__(self, compiled, arrays, case: Case, peak: Optional[int]):
        import jax
        self.jax = jax
        self.arrays = arrays
        self.case = case
        self._peak = peak

        def step(k):
            out = compiled(arrays[k])
            jax.block_until_ready(out)
            return out
        super().__init__(step, len(arrays), case.device)
        self.timer = "wall"

    def _to_torch(self, x) -> torch.Tensor:
        import numpy as np
        try:
            return torch.from_dlpack(x)
        except Exception:  # noqa: BLE001
            return torch.from_numpy(np.asarray(x, dtype=np.float64))

    def scores(self, out) -> torch.Tensor:
        s = out[0] if self.case.training else out
        return self._to_torch(s).double().cpu()

    def grad(self, out, k: int) -> Optional[torch.Tensor]:
        if not self.case.training:
            return None
        return self._to_torch(out[1]).clone()

    def peak_end(self) -> Optional[int]:
        return self._peak


class JaxMethod(Method):
    name = "jax"
    _module = None
    _error: Optional[str] = None

    def _load(self):
        if JaxMethod._error:
            raise Unsupported(JaxMethod._error)
        if JaxMethod._module is None:
            bdir = _benchmarks_dir(self.args.benchmarks_dir)
            if bdir is None or not (bdir / "jax_baseline.py").is_file():
                JaxMethod._error = "benchmarks/jax_baseline.py not found"
                raise Unsupported(JaxMethod._error)
            try:
                JaxMethod._module = _import_file("softsw_bench_jax_baseline",
                                                 bdir / "jax_baseline.py")
            except ImportError as exc:
                JaxMethod._error = f"JAX not importable ({exc})"
                raise Unsupported(JaxMethod._error) from exc
        return JaxMethod._module

    def check(self, case):
        if case.hvp:
            raise Unsupported("no Hessian-vector product in the JAX baseline")
        if case.device == "cpu" and self.args.cpu_threads > 0:
            raise Unsupported(f"CPU rows limit torch to {self.args.cpu_threads} threads; "
                              "JAX's cannot be limited in-process (--cpu-threads 0 runs it)")
        self._load()

    def setup(self, case, buffers):
        jb = self._load()
        import jax
        import numpy as np
        if case.dtype == "float64":
            jax.config.update("jax_enable_x64", True)
        if case.device == "cuda":
            try:
                dev = jax.devices("gpu")[0]
            except RuntimeError as exc:
                raise Unsupported(f"JAX has no GPU backend ({exc})") from exc
        else:
            dev = jax.devices("cpu")[0]

        def to_jax(t: torch.Tensor):
            t = t.detach().contiguous()
            if t.is_cuda:
                try:
                    arr = jax.dlpack.from_dlpack(t)
                    if list(arr.devices())[0] == dev:
                        return arr
                except Exception:  # noqa: BLE001
                    pass
            host = t.cpu()
            if host.dtype == torch.bfloat16:
                import ml_dtypes  # ships with jax
                return jax.device_put(host.float().numpy().astype(ml_dtypes.bfloat16), dev)
            return jax.device_put(np.asarray(host.numpy()), dev)

        _sync(case.device)
        arrays = [to_jax(b) for b in buffers]
        jax.block_until_ready(arrays)
        inference, training = jb.make_functions(
            case.gap_open, case.temperature, gap_extend=case.gap_extend,
            reduction=case.reduction)
        fn = training if case.training else inference
        compiled = fn.lower(arrays[0]).compile()
        peak = None
        try:
            ma = compiled.memory_analysis()
            peak = int(getattr(ma, "peak_memory_in_bytes", 0) or 0) or int(
                ma.temp_size_in_bytes + ma.output_size_in_bytes)
        except Exception:  # noqa: BLE001
            pass
        return JaxRunner(compiled, arrays, case, peak)


METHOD_CLASSES = {"softsw": SoftswMethod, "antidiag": AntidiagMethod, "jax": JaxMethod,
                  "naive": NaiveMethod}


# --------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------


def _n_buffers(case: Case, args) -> int:
    nbytes = case.cells * torch.tensor([], dtype=case.torch_dtype).element_size()
    if case.mode.startswith("latency"):
        want = args.latency_buffers
    elif case.device == "cuda":
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or (60 << 20)
        want = math.ceil(args.l2_factor * l2 / max(nbytes, 1))
    else:
        want = 4
    cap = max(1, int(args.buffer_bytes // max(nbytes, 1)))
    return int(max(1, min(want, cap, args.max_buffers)))


def _make_buffers(case: Case, nbuf: int, seed: int) -> List[torch.Tensor]:
    gen = torch.Generator(device=case.device)
    gen.manual_seed(seed)
    full = torch.randn((nbuf, case.batch, case.rows, case.cols), generator=gen,
                       device=case.device, dtype=torch.float32).to(case.torch_dtype)
    bufs = []
    for k in range(nbuf):
        b = full[k].detach()
        if case.training:
            b.requires_grad_(True)
        bufs.append(b)
    return bufs


def _time_calls(runner: Runner, reps: int, first: int) -> List[float]:
    step, nbuf = runner.step, runner.nbuf
    if runner.timer == "cuda-events":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for r in range(reps):
            starts[r].record()
            step((first + r) % nbuf)
            ends[r].record()
        ends[-1].synchronize()
        return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]
    times = []
    for r in range(reps):
        t0 = time.perf_counter()
        out = step((first + r) % nbuf)
        _sync(runner.device)
        times.append(time.perf_counter() - t0)
        del out
    return times


def _time_latency(runner: Runner, reps: int) -> Tuple[List[float], List[float], float]:
    """Per call: (event or wall) time of one call on an idle GPU, host wall time,
    and the back-to-back time per call."""
    step, nbuf = runner.step, runner.nbuf
    ev_times, wall_times = [], []
    use_events = runner.timer == "cuda-events"
    for r in range(reps):
        _sync(runner.device)
        if use_events:
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        if use_events:
            e0.record()
        out = step(r % nbuf)
        if use_events:
            e1.record()
            e1.synchronize()
        else:
            _sync(runner.device)
        wall_times.append(time.perf_counter() - t0)
        if use_events:
            ev_times.append(e0.elapsed_time(e1) / 1e3)
        del out
    _sync(runner.device)
    t0 = time.perf_counter()
    for r in range(reps):
        step(r % nbuf)
    _sync(runner.device)
    b2b = (time.perf_counter() - t0) / reps
    return (ev_times if use_events else wall_times), wall_times, b2b


class Bench:
    def __init__(self, args):
        self.args = args
        self.rows: List[Row] = []
        self.methods = {name: METHOD_CLASSES[name](args) for name in args.methods}
        self.history: Dict[Tuple, List[Tuple[int, int, float]]] = {}
        self.t_start = time.perf_counter()
        self.meta = self._meta()

    # ---- bookkeeping -----------------------------------------------------

    def _meta(self) -> Dict[str, Any]:
        a = self.args
        meta = {
            "date": _dt.datetime.now().isoformat(timespec="seconds"),
            "command": " ".join(
                [Path(sys.executable).name]
                + (["-m", "softsw.bench"] if sys.argv[0].endswith(os.path.join("softsw", "bench.py"))
                   else [sys.argv[0]]) + sys.argv[1:]),
            "commit": _git_commit(),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "host": platform.node(),
            "cpu": platform.processor() or platform.machine(),
            "cpu_threads": torch.get_num_threads(),
            "gap_open": a.gap_open, "gap_extend": a.gap_extend, "gap_tensor": a.gap_tensor,
            "temperature": a.temperature,
            "reduction": a.reduction, "dtype": a.dtype,
            "floor_inference_gcells": floors(a.gap_extend is not None)[0] / 1e9,
            "floor_training_gcells": floors(a.gap_extend is not None)[1] / 1e9,
        }
        try:
            import softsw
            meta["softsw"] = getattr(softsw, "__version__", "?")
            meta["softsw_path"] = str(Path(softsw.__file__).parent)
            if hasattr(softsw, "build_info"):
                info = softsw.build_info()
                meta["softsw_build"] = {k: info.get(k) for k in (
                    "cuda_kernels", "cuda_version_built", "cuda_arch_list", "cuda_sass_archs",
                    "torch_version_built") if k in info}
        except Exception as exc:  # noqa: BLE001
            meta["softsw"] = f"import failed: {_short_error(exc)}"
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            meta.update(gpu=p.name, sms=p.multi_processor_count,
                        l2_bytes=getattr(p, "L2_cache_size", None),
                        gpu_memory_bytes=p.total_memory, cuda=torch.version.cuda)
        return meta

    def _save(self) -> None:
        if not self.args.json:
            return
        path = Path(self.args.json)
        tmp = path.with_suffix(path.suffix + ".tmp")
        data = {"meta": self.meta, "rows": [asdict(r) for r in self.rows]}
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t_start

    def _estimate(self, method: str, case: Case) -> Tuple[Optional[float], str]:
        """Estimated seconds per call of a baseline, and where it comes from."""
        key = (method, case.device, case.mode, case.dtype, case.affine)
        diagonals = case.rows + case.cols - 1
        prior = _PRIOR_PER_DIAGONAL.get(method, (1e-4, 4e-4))[1 if case.training else 0]
        if case.affine:
            prior *= 3
        if case.hvp:  # ~3 training steps' work: forward, backward, tangent and reverse passes
            prior *= 3
        hist = self.history.get(key)
        factor, where = 1.0, ""
        if not hist:  # another mode's history: a training step costs ~3 forwards
            if case.hvp:
                other, factor, where = "training", 3.0, " training x3"
            elif case.training:
                other, factor, where = "inference", 3.0, " inference x3"
            else:
                other, factor, where = "training", 1 / 3, " training/3"
            hist = self.history.get((method, case.device, other, case.dtype, case.affine))
        if hist:
            cells, diags, secs, shape = max(hist, key=lambda h: h[0])
            secs *= factor
            a = min(prior, secs / diags)
            b = (secs - a * diags) / cells
            return a * diagonals + b * case.cells, f"from {shape}{where}"
        if case.device == "cuda":
            return prior * diagonals, "prior"
        per = _PRIOR_PER_CELL_CPU.get(method)
        if per is None:
            return None, ""
        return per * case.cells * (9 if case.hvp else 3 if case.training else 1), "prior"

    # ---- one measurement -------------------------------------------------

    def measure(self, method: str, case: Case, buffers: List[torch.Tensor]) -> Tuple[Row, Any]:
        a = self.args
        row = Row(shape=case.shape, batch=case.batch, rows=case.rows, cols=case.cols,
                  device=case.device, dtype=case.dtype, mode=case.mode, affine=case.affine,
                  reduction=case.reduction, temperature=case.temperature, method=method)
        latency = case.mode.startswith("latency")
        try:
            if case.gap_tensor and method != "softsw":
                raise Unsupported("gap tensors: softsw only")
            self.methods[method].check(case)
        except Unsupported as exc:
            row.status, row.note = "unsupported", str(exc)
            return row, None
        if method != "softsw" and not latency:
            over = self.elapsed() > a.time_limit
            est, src = self._estimate(method, case)
            if over:
                row.status, row.note = "skipped", "time limit reached"
                return row, None
            if est is not None and est > a.max_baseline_s:
                row.status = "skipped"
                row.note = f"est. {_fmt_time(est)}/call ({src}) > {a.max_baseline_s:g} s"
                return row, None
        runner = None
        try:
            runner = self.methods[method].setup(case, buffers)
            row.timer, row.peak_kind = runner.timer, runner.peak_kind
            # Warm-up: the first call (compilation, caches), then one timed call.
            out0 = runner.step(0)
            _sync(case.device)
            scores = runner.scores(out0)
            grad = runner.grad(out0, 0) if case.training else None
            del out0
            # The second call is timed (to choose the number of reps) and gives the
            # peak memory of one call.
            peak_error = None
            try:
                runner.peak_begin()
            except Exception as exc:  # noqa: BLE001
                peak_error = exc
            t0 = time.perf_counter()
            out = runner.step(1 % runner.nbuf)
            _sync(case.device)
            t_call = time.perf_counter() - t0
            if not latency:
                try:
                    if peak_error is not None:
                        raise peak_error
                    row.peak_bytes = runner.peak_end()
                except Exception as exc:  # noqa: BLE001
                    row.note = f"peak memory failed: {_short_error(exc)}"
            del out
            budget = a.budget if self.elapsed() < a.time_limit else a.budget / 5
            if latency:
                reps = int(max(a.min_reps, min(a.latency_reps, budget / max(t_call, 1e-7))))
                times, walls, b2b = _time_latency(runner, reps)
                row.wall_s = statistics.median(walls)
                row.b2b_s = b2b
            else:
                reps = int(budget / max(t_call, 1e-7))
                min_reps = a.min_reps if t_call < a.long_call_s else a.min_reps_long
                reps = max(min_reps, min(a.max_reps, reps))
                times = _time_calls(runner, reps, first=2)
            row.reps = len(times)
            row.median_s = statistics.median(times)
            row.min_s = min(times)
            row.gcells = case.cells / row.median_s / 1e9
            if not latency:
                key = (method, case.device, case.mode, case.dtype, case.affine)
                self.history.setdefault(key, []).append(
                    (case.cells, case.rows + case.cols - 1, row.median_s, case.shape))
            if method == "jax":
                row.note = (row.note + "; " if row.note else "") + "wall clock"
            return row, (scores, grad)
        except Unsupported as exc:
            row.status, row.note = "unsupported", str(exc)
            return row, None
        except Exception as exc:  # noqa: BLE001
            row.status = "error"
            row.error = _short_error(exc)
            if isinstance(exc, torch.cuda.OutOfMemoryError):
                row.error = "out of memory: " + row.error
            if a.verbose:
                traceback.print_exc()
            return row, None
        finally:
            if runner is not None:
                try:
                    runner.cleanup()
                except Exception:  # noqa: BLE001
                    pass
            del runner
            if case.device == "cuda":
                try:
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
                except Exception:  # noqa: BLE001
                    pass

    # ---- a group: one case, every method ----------------------------------

    def run_case(self, case: Case) -> None:
        a = self.args
        label = f"{case.shape} {case.device} {case.dtype} {case.mode}" + (
            " affine" if case.affine else "")
        print(f"== {label}  (t={self.elapsed():.0f} s)", flush=True)
        try:
            nbuf = _n_buffers(case, a)
            buffers = _make_buffers(case, nbuf, a.seed)
        except Exception as exc:  # noqa: BLE001
            for m in a.methods:
                row = Row(shape=case.shape, batch=case.batch, rows=case.rows, cols=case.cols,
                          device=case.device, dtype=case.dtype, mode=case.mode,
                          affine=case.affine, reduction=case.reduction,
                          temperature=case.temperature, method=m, status="error",
                          error=f"inputs: {_short_error(exc)}")
                self.rows.append(row)
            self._save()
            return
        methods = [m for m in a.methods
                   if not (case.mode.startswith("latency") and m not in a.latency_methods)]
        group_rows: List[Row] = []
        results: Dict[str, Tuple] = {}
        try:
            for m in methods:
                row, res = self.measure(m, case, buffers)
                if res is not None:
                    results[m] = res
                if case.hvp:
                    self._compare_with_training(row)
                group_rows.append(row)
                self.rows.append(row)
                print("   " + _format_row(row), flush=True)
                self._save()
        finally:
            del buffers
            self._finish_group(case, group_rows, results)
            self._save()

    def _compare_with_training(self, row: Row) -> None:
        """An HVP row's time over the same method's training step of the same case."""
        if row.status != "ok":
            return

        def same_case(r: Row) -> Tuple:
            return (r.method, r.shape, r.device, r.dtype, r.affine, r.reduction, r.temperature)

        for r in reversed(self.rows):
            if r.mode == "training" and r.status == "ok" and same_case(r) == same_case(row):
                row.over_training = row.median_s / r.median_s
                return

    def _finish_group(self, case: Case, group_rows: List[Row], results: Dict[str, Tuple]):
        by = {r.method: r for r in group_rows}
        sw = by.get("softsw")
        if sw is not None and sw.status == "ok":
            for r in group_rows:
                if r.method != "softsw" and r.status == "ok":
                    r.speedup = r.median_s / sw.median_s
                    sw.speedups[r.method] = r.speedup
        ref_name = next((m for m in ("antidiag", "jax", "softsw") if m in results), None)
        if ref_name is None or len(results) < 2:
            return
        ref_scores, ref_grad = results[ref_name]
        tol = {"float64": 1e-8, "float32": 1e-3}.get(case.dtype, 3e-2)
        for m, (scores, grad) in results.items():
            r = by[m]
            r.check_ref = ref_name
            if m == ref_name:
                continue
            try:
                denom = ref_scores.abs().clamp_min(1.0)
                r.check_score = float(((scores - ref_scores).abs() / denom).max()) \
                    if scores.numel() else 0.0
                if not math.isfinite(r.check_score):
                    r.check_score = float("inf")
                ok = r.check_score <= tol
                if grad is not None and ref_grad is not None:
                    g = grad.to(ref_grad.device, torch.float64)
                    rg = ref_grad.to(torch.float64)
                    err = float((g - rg).abs().max()) if g.numel() else 0.0
                    r.check_grad = err if math.isfinite(err) else float("inf")
                    # Temperature 0 breaks ties differently in JAX (it splits them).
                    if not (m == "jax" and case.temperature == 0.0):
                        ok = ok and r.check_grad <= tol * max(1.0, float(rg.abs().max()))
                r.check_ok = ok
            except Exception as exc:  # noqa: BLE001
                r.note = (r.note + "; " if r.note else "") + f"check failed: {exc}"
        results.clear()

    # ---- the whole run -----------------------------------------------------

    def cases(self) -> List[Case]:
        a = self.args
        out = []
        modes = {"inference": ["inference"], "training": ["training"],
                 "both": ["inference", "training"], "hvp": ["training", "hvp"]}[a.mode]
        for (b, m, n, dev) in a.shape_list:
            for mode in modes:
                out.append(Case(b, m, n, dev, a.dtype, mode, a.gap_extend is not None,
                                a.gap_open, a.gap_extend, a.temperature, a.reduction,
                                a.gap_tensor))
        return out

    def latency_cases(self) -> List[Case]:
        a = self.args
        if not a.latency:
            return []
        b, m, n, dev = _parse_shapes(a.latency_shape, a.device)[0]
        return [Case(b, m, n, dev, a.dtype, mode, a.gap_extend is not None, a.gap_open,
                     a.gap_extend, a.temperature, a.reduction, a.gap_tensor)
                for mode in ("latency-fwd", "latency-step")]

    def run(self) -> int:
        a = self.args
        _print_header(self.meta, a)
        self._save()
        try:
            for case in self.latency_cases() + self.cases():
                threads = None
                if case.device == "cpu" and a.cpu_threads > 0:
                    threads = torch.get_num_threads()
                    torch.set_num_threads(a.cpu_threads)
                denormal = case.device == "cpu" and a.flush_denormal
                if denormal:
                    torch.set_flush_denormal(True)
                try:
                    self.run_case(case)
                finally:
                    if threads is not None:
                        torch.set_num_threads(threads)
                    if denormal:
                        torch.set_flush_denormal(False)
        except KeyboardInterrupt:
            print("bench: interrupted; printing what was measured", flush=True)
        finally:
            self._save()
            print_table(self.rows, self.meta)
            print(f"bench: {len(self.rows)} rows in {self.elapsed():.0f} s"
                  + (f"; JSON: {a.json}" if a.json else ""), flush=True)
        bad = [r for r in self.rows if r.method == "softsw" and r.status == "error"]
        wrong = [r for r in self.rows if r.check_ok is False]
        return 1 if (bad or wrong) and a.strict else 0


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------

_COLUMNS = [("shape", 14), ("dev", 4), ("mode", 12), ("method", 8), ("median", 10),
            ("Gcell/s", 8), ("peak MiB", 9), ("softsw x", 8), ("x train", 7), ("check", 13),
            ("note", 0)]


def _format_row(r: Row) -> str:
    if r.status == "ok":
        peak = "-" if r.peak_bytes is None else (
            ("~" if r.peak_kind == "xla-estimate" else "") + f"{r.peak_bytes / 2**20:.1f}")
        speed = "-" if r.speedup is None else f"{r.speedup:.1f}"
        if r.check_ref and r.check_score is None and r.method == r.check_ref:
            check = "ref"
        elif r.check_score is None:
            check = "-"
        else:
            check = f"{r.check_score:.0e}"
            if r.check_grad is not None:
                check += f"/{r.check_grad:.0e}"
            if r.check_ok is False:
                check += " BAD"
        note = r.note
        if r.wall_s is not None:
            note = (f"wall {_fmt_time(r.wall_s)}, back-to-back {_fmt_time(r.b2b_s)}"
                    + ("; " + note if note else ""))
        over_training = "-" if r.over_training is None else f"{r.over_training:.2f}"
        cells = [r.shape, r.device, r.mode, r.method, _fmt_time(r.median_s),
                 _fmt_num(r.gcells), peak, speed, over_training, check, note]
    else:
        what = r.error if r.status == "error" else r.note
        cells = [r.shape, r.device, r.mode, r.method, r.status.upper(), "", "", "", "", "",
                 what]
    out = []
    for (name, width), text in zip(_COLUMNS, cells):
        text = str(text)
        out.append(text.ljust(width) if width else text)
    return " ".join(out).rstrip()


def _print_header(meta: Dict[str, Any], args) -> None:
    print("softsw benchmark")
    for k in ("date", "commit", "command", "softsw", "softsw_path", "softsw_build", "torch",
              "cuda", "gpu",
              "sms", "l2_bytes", "python", "cpu", "cpu_threads"):
        if k in meta:
            print(f"  {k}: {meta[k]}")
    print(f"  inputs: scores ~ N(0,1) {args.dtype}, gap_open {args.gap_open}, gap_extend "
          f"{args.gap_extend}{' (gap tensors)' if args.gap_tensor else ''}, temperature "
          f"{args.temperature}, reduction {args.reduction}")
    print(f"  methods: {','.join(args.methods)}; budget {args.budget} s/measurement, "
          f"baselines skipped over {args.max_baseline_s} s/call, time limit {args.time_limit} s;"
          f" CPU rows: {args.cpu_threads or 'default'} threads"
          + (", flush denormals" if args.flush_denormal else ""), flush=True)


def print_table(rows: List[Row], meta: Dict[str, Any]) -> None:
    print()
    print("=" * 100)
    print(f"softsw benchmark  {meta.get('date', '')}  commit {meta.get('commit', '?')}  "
          f"{meta.get('gpu', meta.get('cpu', ''))}  torch {meta.get('torch', '')}  "
          f"{meta.get('dtype', '')}, gap {meta.get('gap_open')}"
          + (f"/{meta['gap_extend']}" if meta.get("gap_extend") is not None else "")
          + (" (tensors)" if meta.get("gap_tensor") else "")
          + f", T={meta.get('temperature')}, reduction {meta.get('reduction')}")
    print("median: CUDA events per call (JAX and CPU: wall clock); softsw x: this method's "
          "time / softsw's time, same run (how many times faster softsw is); x train: HVP "
          "step / training step (same method, same run); "
          "check: |score - ref| / max(1,|ref|) [/ max |grad - ref grad|]")
    header = " ".join(name.ljust(width) if width else name for name, width in _COLUMNS)
    print(header)
    print("-" * len(header))
    unsupported: Dict[str, set] = {}
    for r in rows:
        if r.status == "unsupported":
            unsupported.setdefault(r.method, set()).add(r.note)
            continue
        print(_format_row(r))
    if unsupported:
        print("not run (unsupported): " + "; ".join(
            f"{m}: {', '.join(sorted(why))}" for m, why in unsupported.items()))
    # Distance to the floor (GPU inference) and the targets.
    sw = [r for r in rows if r.method == "softsw" and r.status == "ok"]
    floor_inference, floor_training, bytes_per_cell = floors(meta.get("gap_extend") is not None)
    lines = []
    for r in sw:
        if r.device == "cuda" and r.mode == "inference" and r.gcells is not None:
            lines.append(f"  {r.shape:>15} inference {r.gcells:8.1f} G cells/s = "
                         f"{100 * r.gcells * 1e9 / floor_inference:5.1f}% of the SFU floor "
                         f"({floor_inference / 1e9:.0f} G cells/s)")
        if r.device == "cuda" and r.mode == "training" and r.gcells is not None:
            lines.append(f"  {r.shape:>15} training  {r.gcells:8.1f} G cells/s = "
                         f"{100 * r.gcells * 1e9 / floor_training:5.1f}% of the memory floor "
                         f"({floor_training / 1e9:.0f} G cells/s at {bytes_per_cell} B/cell)")
        if r.mode == "hvp" and r.over_training is not None:
            target = 4.0 if r.device == "cpu" else 3.0 if r.affine else 2.5
            lines.append(f"  {r.shape:>15} hvp       {_fmt_num(r.gcells):>8} G cells/s = "
                         f"{r.over_training:.2f}x the time of the training step "
                         f"(target <= {target:g}x)")
        if r.mode.startswith("latency"):
            lines.append(f"  {r.shape:>15} {r.mode}: {_fmt_time(r.median_s)} (events), "
                         f"wall {_fmt_time(r.wall_s)}, back-to-back {_fmt_time(r.b2b_s)}")
    if lines:
        print("softsw against the floor / targets:")
        print("\n".join(lines))
    sp = [(r.shape, r.device, r.mode, r.speedups) for r in sw if r.speedups]
    if sp:
        print("softsw speedups (same run): " + "; ".join(
            f"{s}@{d} {m}: " + ", ".join(f"{k} {v:.1f}x" for k, v in sps.items())
            for s, d, m, sps in sp))
    print("=" * 100, flush=True)


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends "(default: X)" to an option's help unless the help states its default
    or there is none to state (None, or False for a flag)."""

    def _get_help_string(self, action):
        if "default" in (action.help or "") or action.default in (None, False):
            return action.help
        return super()._get_help_string(action)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m softsw.bench",
        description="Benchmark softsw against the anti-diagonal PyTorch version, JAX and a "
                    "naive CUDA kernel.",
        epilog="In the table, 'softsw x' is a baseline's time over softsw's, measured in the "
               "same run: how many times faster softsw is.",
        formatter_class=_HelpFormatter)
    p.add_argument("--shapes", help="comma-separated BxMxN[@cpu|@cuda]; default: "
                   + ISSUE_SHAPES + " plus a CPU row 64x256x256@cpu (with --device cpu: "
                   + DEFAULT_CPU_SHAPES + ")")
    p.add_argument("--device", choices=["cuda", "cpu"], default=None,
                   help="device of shapes without @ (default: cuda if available)")
    p.add_argument("--dtype", default="float32", choices=sorted(_DTYPES))
    p.add_argument("--mode", default="both", choices=["inference", "training", "both", "hvp"],
                   help="hvp: the training step and the Hessian-vector-product step of a "
                        "loss on the expected alignment, per shape")
    p.add_argument("--affine", action="store_true",
                   help="affine gaps (gap_extend defaults to -0.5 then)")
    p.add_argument("--gap-open", type=float, default=-1.0)
    p.add_argument("--gap-tensor", action="store_true",
                   help="pass the gaps as (B, M, N) tensors of their value, read per cell "
                        "(softsw only)")
    p.add_argument("--gap-extend", type=float, default=None)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--reduction", default="max", choices=["max", "soft"])
    p.add_argument("--methods", default=",".join(ALL_METHODS),
                   help="methods to run, from " + ",".join(ALL_METHODS))
    p.add_argument("--baselines", default=None,
                   help="baselines to run besides softsw, from antidiag,jax,naive, or 'none' "
                        "(overrides --methods)")
    p.add_argument("--quick", action="store_true",
                   help="small shape list and short budgets: under a minute")
    p.add_argument("--json", default=None, help="write every row (and the run's metadata) here")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds of timed calls per measurement (default 1.0; quick 0.2)")
    p.add_argument("--min-reps", type=int, default=None, help="default 5; quick 3")
    p.add_argument("--min-reps-long", type=int, default=2,
                   help="minimum reps for calls longer than --long-call-s")
    p.add_argument("--long-call-s", type=float, default=0.5)
    p.add_argument("--max-reps", type=int, default=2000)
    p.add_argument("--max-baseline-s", type=float, default=None,
                   help="skip a baseline whose call is estimated longer (default 2; quick 0.5)")
    p.add_argument("--time-limit", type=float, default=None,
                   help="after this many seconds only softsw is measured (default 330; quick 45)")
    p.add_argument("--latency", dest="latency", action="store_true", default=None,
                   help="time one eager call at --latency-shape (default: on for CUDA)")
    p.add_argument("--no-latency", dest="latency", action="store_false")
    p.add_argument("--latency-shape", default="16x32x32")
    p.add_argument("--latency-methods", default="softsw,antidiag,jax")
    p.add_argument("--latency-reps", type=int, default=200)
    p.add_argument("--latency-buffers", type=int, default=64)
    p.add_argument("--l2-factor", type=float, default=3.0,
                   help="rotate enough input buffers to cover this many L2 caches")
    p.add_argument("--max-buffers", type=int, default=4096)
    p.add_argument("--buffer-bytes", type=float, default=2e9,
                   help="cap on the bytes of rotated input buffers")
    p.add_argument("--cpu-threads", type=int, default=2,
                   help="torch threads for CPU rows (default 2: CPU figures are for 2 cores); "
                        "0, or at least the machine's core count: leave torch's default")
    p.add_argument("--flush-denormal", action="store_true",
                   help="torch.set_flush_denormal(True) for CPU rows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--benchmarks-dir", default=None,
                   help="folder of jax_baseline.py and naive_cuda.py (default: ./benchmarks)")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 if softsw errors or any check fails")
    p.add_argument("--verbose", action="store_true", help="print tracebacks of failures")
    return p


def parse_args(argv=None):
    p = _parser()
    a = p.parse_args(argv)
    if a.device is None:
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device")
    if a.shapes is None:
        if a.device == "cuda":
            a.shapes = QUICK_CUDA_SHAPES if a.quick else DEFAULT_CUDA_SHAPES
        else:
            a.shapes = QUICK_CPU_SHAPES if a.quick else DEFAULT_CPU_SHAPES
    a.shape_list = _parse_shapes(a.shapes, a.device)
    for (_, _, _, dev) in a.shape_list:
        if dev not in ("cpu", "cuda"):
            p.error(f"unknown device {dev!r} in --shapes")
        if dev == "cuda" and not torch.cuda.is_available():
            p.error("a shape asks for cuda but there is no CUDA device")
    if a.affine and a.gap_extend is None:
        a.gap_extend = -0.5
    if a.gap_extend is not None and a.gap_extend == a.gap_open:
        a.gap_extend = None  # equal scores are linear gaps
    a.dtype = {"fp32": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16",
               "fp64": "float64", "double": "float64"}.get(a.dtype, a.dtype)
    if a.baselines is not None:
        chosen = [] if a.baselines.strip() in ("", "none") else [
            s.strip() for s in a.baselines.split(",") if s.strip()]
        for s in chosen:
            if s not in BASELINES:
                p.error(f"unknown baseline {s!r}: choose from {','.join(BASELINES)}")
        a.methods = ["softsw"] + chosen
    else:
        a.methods = [s.strip() for s in a.methods.split(",") if s.strip()]
        for s in a.methods:
            if s not in ALL_METHODS:
                p.error(f"unknown method {s!r}: choose from {','.join(ALL_METHODS)}")
    a.latency_methods = [s.strip() for s in a.latency_methods.split(",") if s.strip()]
    # Limit threads only where the machine has more cores than asked for: on a machine
    # with that many cores already, an explicit torch.set_num_threads() only adds
    # OpenMP barrier waits (seen: 100x slower small ops on a loaded 2-core machine).
    if a.cpu_threads >= (os.cpu_count() or 1):
        a.cpu_threads = 0
    if a.latency is None:
        a.latency = any(dev == "cuda" for (*_, dev) in a.shape_list)
    quick = a.quick
    a.budget = a.budget if a.budget is not None else (0.2 if quick else 1.0)
    a.min_reps = a.min_reps if a.min_reps is not None else (3 if quick else 5)
    a.max_baseline_s = a.max_baseline_s if a.max_baseline_s is not None else (
        0.5 if quick else 2.0)
    a.time_limit = a.time_limit if a.time_limit is not None else (45.0 if quick else 330.0)
    if quick:
        a.latency_reps = min(a.latency_reps, 50)
    return a


def main(argv=None) -> int:
    args = parse_args(argv)
    return Bench(args).run()


if __name__ == "__main__":
    sys.exit(main())
