"""Shared fixtures and helpers of the softsw test suite.

* ``device``: every device-parametrised test runs on CPU, and on CUDA when
  ``torch.cuda.is_available()`` (otherwise the CUDA case is skipped, with the
  reason).
* ``gen``: a ``torch.Generator`` seeded freshly for every test (from
  ``os.urandom``), so that each run sees new random inputs. The seed is printed
  and attached to the report of a failing test; rerun with
  ``SOFTSW_TEST_SEED=<seed> pytest ...`` to reproduce.
* Tolerances (see ``TOL``) are per dtype of ``scores``.
"""
from __future__ import annotations

import math
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

import softsw  # noqa: E402,F401

HAS_CUDA = torch.cuda.is_available()
CUDA_SKIP = pytest.mark.skipif(not HAS_CUDA, reason="CUDA is not available on this machine")

DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=CUDA_SKIP)]

# Tolerances by dtype of `scores` (values and gradients, relative to the
# largest reference magnitude, floored at 1):
#   float64: the kernels accumulate in float64 -> 1e-12.
#   float32: accumulate in float32 -> 1e-5.
#   float16 / bfloat16: accumulate in float32, but every output (score and
#     gradient) is rounded to the input dtype: one unit in the last place of
#     that dtype, 2^-10 (float16) and 2^-7 (bfloat16), plus the float32 1e-5.
# The reference is always computed in float64 from the *same* (rounded)
# inputs, so input rounding is not part of the error.
TOL = {
    torch.float64: 1e-12,
    torch.float32: 1e-5,
    torch.float16: 2.0 ** -10 + 1e-5,
    torch.bfloat16: 2.0 ** -7 + 1e-5,
}


def unit_roundoff(dtype) -> float:
    """Of the accumulate type (half types accumulate in float32)."""
    return 2.0 ** -53 if dtype == torch.float64 else 2.0 ** -24


# Beyond the floors of TOL, two effects of finite precision grow with the
# problem; the tolerances follow them (and nothing else):
# * score: every step of the optimal path adds a rounding error; a constant
#   gap score that is not representable on the grid of H rounds the *same*
#   way at every gap step (a bias, not a random walk; a float32 emulation of
#   the recurrence shows the same). Bound: u * (M + N) relative.
# * gradient (T > 0): a weight is exp((v - h) / T) of accumulate-type values of
#   magnitude |score|, so each cell's weight carries a relative error
#   ~ u * |score| / T, accumulated along paths of ~M + N cells (random walk):
#   2 u * sqrt(M + N) * |score| / T (the random-walk size, with a factor 2 of
#   margin: the largest ratio of error to the 1x estimate seen over 60 random
#   float32 31x33 problems at T = 0.1 was 0.48). At T = 0 the gradient is the 0/1 traceback
#   and must match exactly (tests use data on which float32 sums are exact).
def score_tol(dtype, M: int, N: int) -> float:
    return max(TOL[dtype], unit_roundoff(dtype) * (M + N))


def grad_tol(dtype, M: int, N: int, T: float, score_scale: float) -> float:
    if T == 0:
        return TOL[dtype]
    return max(TOL[dtype],
               2.0 * unit_roundoff(dtype) * math.sqrt(M + N) * max(1.0, abs(score_scale) / T))


# Hessian-vector products: each term is a weight times a tangent plus a weight's
# tangent times an adjoint (docs/math.md), two error terms of grad_tol's size, and
# the tangent of a weight, p (vdot - hdot) / T, carries one more factor 1 / T
# on terms that cancel: 2 * grad_tol * max(1, 1 / T).
def hvp_tol(dtype, M: int, N: int, T: float, score_scale: float) -> float:
    if T == 0:
        return TOL[dtype]
    return 2.0 * grad_tol(dtype, M, N, T, score_scale) * max(1.0, 1.0 / T)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: heavy test (large sizes, torch.compile)")
    config.addinivalue_line("markers", "cuda: needs a CUDA device")


def _new_seed() -> int:
    env = os.environ.get("SOFTSW_TEST_SEED")
    if env:
        return int(env)
    return int.from_bytes(os.urandom(4), "little")


@pytest.fixture
def seed(request) -> int:
    s = _new_seed()
    request.node.user_properties.append(("softsw_seed", s))
    print(f"softsw test seed: SOFTSW_TEST_SEED={s}")
    return s


@pytest.fixture
def gen(seed) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        for key, value in item.user_properties:
            if key == "softsw_seed":
                rep.sections.append(("softsw seed", f"reproduce with SOFTSW_TEST_SEED={value}"))


# ---------------------------------------------------------------------------
# Helpers.
# ---------------------------------------------------------------------------


def randn(gen, *shape, dtype=torch.float64, device="cpu", scale=1.0, shift=0.0):
    """Random normal data drawn on CPU from `gen` (so it does not depend on the
    device), rounded to `dtype`, then moved to `device`."""
    x = torch.randn(tuple(shape), generator=gen, dtype=torch.float64) * scale + shift
    return x.to(dtype).to(device)


def rand_lengths(gen, B, M, N, *, full_first=True, allow_empty=False):
    """(B, 2) int64 lengths; the first pair uses the full extent (so the padded
    shape is exercised), the others random in [1, M] x [1, N]."""
    lo = 0 if allow_empty else 1
    m = torch.randint(lo, M + 1, (B,), generator=gen)
    n = torch.randint(lo, N + 1, (B,), generator=gen)
    if full_first:
        m[0], n[0] = M, N
    return torch.stack([m, n], dim=1)


GARBAGE = (float("nan"), float("inf"), -float("inf"), 1e30, -1e30, 3e4)


def fill_padding(x: torch.Tensor, lengths: torch.Tensor, gen) -> torch.Tensor:
    """A copy of the (B, M, N) tensor `x` with everything outside each pair's
    (m, n) replaced by garbage (NaN, +-inf, huge values) -- which must not matter."""
    x = x.detach().clone()
    B, M, N = x.shape
    garbage = torch.tensor(GARBAGE, dtype=torch.float64)
    idx = torch.randint(0, len(GARBAGE), (B, M, N), generator=gen)
    fill = garbage[idx].to(x.dtype).to(x.device)
    mask = padding_mask(lengths, M, N).to(x.device)
    return torch.where(mask, fill, x)


def padding_mask(lengths: torch.Tensor, M: int, N: int) -> torch.Tensor:
    """(B, M, N) bool: True outside each pair's (m, n)."""
    lengths = lengths.cpu()
    rows = torch.arange(M).view(1, M, 1)
    cols = torch.arange(N).view(1, 1, N)
    return (rows >= lengths[:, 0].view(-1, 1, 1)) | (cols >= lengths[:, 1].view(-1, 1, 1))


def assert_close(actual, expected, dtype, what="", tol=None):
    """|actual - expected| <= tol * max(1, max|expected|) + tol * |expected|, elementwise,
    with NaN required at the same places. `actual` may live on any device / dtype."""
    tol = TOL[dtype] if tol is None else tol
    a = actual.detach().to(device="cpu", dtype=torch.float64)
    e = expected.detach().to(device="cpu", dtype=torch.float64)
    assert a.shape == e.shape, f"{what}: shape {tuple(a.shape)} != {tuple(e.shape)}"
    finite = e[torch.isfinite(e)]
    scale = max(1.0, finite.abs().max().item()) if finite.numel() else 1.0
    torch.testing.assert_close(a, e, rtol=tol, atol=tol * scale, equal_nan=True,
                               msg=lambda m: f"{what} (dtype {dtype}, tol {tol:g}): {m}")


def tolerance_used(actual, expected):
    """The smallest tol for which assert_close(actual, expected, tol=tol) passes
    (over the entries finite on both sides)."""
    a = actual.detach().double().cpu()
    e = expected.detach().double().cpu()
    both = torch.isfinite(a) & torch.isfinite(e)
    if not both.any():
        return 0.0
    top = max(1.0, e[both].abs().max().item())
    return ((a - e).abs() / (top + e.abs()))[both].max().item()

def grads(out, inputs, weight=None, create_graph=False):
    """Gradients of sum(weight * out) with respect to `inputs` (None where unused)."""
    if weight is None:
        weight = torch.ones_like(out)
    return torch.autograd.grad(out, inputs, grad_outputs=weight, allow_unused=True,
                               create_graph=create_graph)


def leaf(x: torch.Tensor) -> torch.Tensor:
    return x.detach().clone().requires_grad_(True)


def _cpu_threads(k: int):
    """The CPU kernels at k threads (torch.set_num_threads) for the test;
    skipped where SOFTSW_NUM_THREADS pins another count."""
    pinned = os.environ.get("SOFTSW_NUM_THREADS")
    if pinned not in (None, "", str(k)):
        pytest.skip(f"SOFTSW_NUM_THREADS={pinned} overrides torch.set_num_threads")
    before = torch.get_num_threads()
    torch.set_num_threads(k)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def two_cpu_threads():
    """The CPU kernels at two threads for the test. For tests of pairs in SIMD
    groups: a batch is cut into max(ceil(pairs / 16), threads) groups, so that
    with many threads a small batch would leave every pair alone, and a test
    of "alone equals in a group" could not fail."""
    yield from _cpu_threads(2)


@pytest.fixture
def one_cpu_thread():
    """The CPU kernels on one thread for the test: a batch of up to 16 pairs
    is one SIMD group."""
    yield from _cpu_threads(1)
