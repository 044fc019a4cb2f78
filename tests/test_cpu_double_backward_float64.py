"""CPU float64 double backward on SIMD lanes, linear gaps.

At T > 0 the float64 Hessian-vector product of linear gaps runs on the rows of
csrc/kernels/cpu/double_backward_simd.h as float32's does, with double lanes,
16 pairs to a group: the tangent pass, then the reverse pass that carries the
adjoints and their tangents. A lone pair, empty and invalid pairs, T = 0 and
affine gaps take the scalar passes of reverse.h. These tests hold the first
derivatives, the Hessian-vector products (scores and per-cell gap scores) and
the gradient through the first derivative's `grad_outputs` against the
float64 reference (tests/reference.py) at the float64 tolerances
(conftest.grad_tol / hvp_tol): batches of 1, 16, 17 and 37 pairs with garbage
in the padding of the scores and huge values in the padding of the
directions, T from 1e-3 to 1e3, |S| up to 1e4, "max" and "soft"; they show
that the SIMD passes are what ran (on the same forward state, the Hessian-
vector products differ from the scalar passes' in the last bits), and run
torch.autograd.gradgradcheck through them.
"""
import textwrap

import pytest
import torch

import softsw
from conftest import assert_close, fill_padding, grad_tol, hvp_tol, leaf, rand_lengths, randn
from helpers import assert_simd_ran, first_and_second, outputs_under_isa
from reference import ref_align
from softsw import _ops

F64 = torch.float64


def gap_tensor(gen, B, M, N, low, high):
    return -(torch.rand(B, M, N, generator=gen, dtype=F64) * (high - low) + low)


def directions(gen, lengths, B, M, N):
    """V (scores) and U (gap scores), +-1e30 in the padding: the Hessian is
    zero there, and a kernel that read them would return garbage."""
    V, U = randn(gen, B, M, N), randn(gen, B, M, N)
    for k in range(B):
        m, n = lengths[k].tolist()
        for x, big in ((V, 1e30), (U, -1e30)):
            x[k, m:, :] = big
            x[k, :, n:] = big
    return V, U


def compare(gen, S, gap, T, lengths, reduction, extend=None):
    """softsw's first and second derivatives against the reference's."""
    B, M, N = S.shape
    w = torch.rand(B, generator=gen, dtype=F64) + 0.5
    V, U = directions(gen, lengths, B, M, N)
    actual, _ = first_and_second(S, gap, T, lengths, reduction, w, V, U, F64, extend)
    expected, scale = first_and_second(S, gap, T, lengths, reduction, w, V, U, F64, extend,
                                       align=ref_align)
    tensors = [x for x in (gap, extend) if isinstance(x, torch.Tensor)]
    names = (["d/d S"] + [f"d/d gap {k}" for k in range(len(tensors))] + ["HVP d/d S"]
             + [f"HVP d/d gap {k}" for k in range(len(tensors))] + ["d/d grad_output"])
    firsts = 1 + len(tensors)
    assert len(actual) == len(expected) == len(names)
    for k, (name, a, e) in enumerate(zip(names, actual, expected)):
        assert a.dtype == F64
        tol = (grad_tol if k < firsts else hvp_tol)(F64, M, N, T, scale)
        assert_close(a, e, F64, f"{name} B={B} T={T} {reduction}", tol=tol)


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("gaps", ["constant", "tensor"])
@pytest.mark.parametrize("B", [1, 16, 17, 37])
def test_batches_with_padding(two_cpu_threads, gen, B, gaps, reduction):
    """Full groups, remainders and a lone pair; lengths shorter than the
    tensor, garbage (NaN, inf, 1e30) in the padding of the scores."""
    M, N = 17, 21
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N, scale=1.5), lengths, gen)
    gap = gap_tensor(gen, B, M, N, 0.3, 1.3) if gaps == "tensor" else -0.7
    compare(gen, S, gap, 0.7, lengths, reduction)


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [1e-3, 0.05, 1.0, 10.0, 1e3])
@pytest.mark.parametrize("magnitude", [1.0, 30.0, 1e4])
def test_temperatures_and_magnitudes(two_cpu_threads, gen, T, magnitude, reduction):
    """Scores and gap tensors of size `magnitude`: from near-uniform weights
    (T = 1e3, |S| = 1) to a single path (T = 1e-3, |S| = 1e4)."""
    B, M, N = 18, 13, 16
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N, scale=magnitude), lengths, gen)
    gap = gap_tensor(gen, B, M, N, 0.2 * magnitude, 1.0 * magnitude)
    compare(gen, S, gap, T, lengths, reduction)


@pytest.mark.parametrize("reduction", ["max", "soft"])
def test_affine_gaps_on_the_scalar_passes(two_cpu_threads, gen, reduction):
    """Affine float64 gaps stay on the scalar passes beside the linear SIMD
    groups: still the reference's derivatives."""
    B, M, N = 17, 12, 15
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N), lengths, gen)
    compare(gen, S, gap_tensor(gen, B, M, N, 0.5, 1.5), 0.8, lengths, reduction,
            extend=gap_tensor(gen, B, M, N, 0.1, 0.5))


def test_gradgradcheck(two_cpu_threads, gen):
    """torch.autograd.gradgradcheck through the SIMD double backward: a padded
    batch of 17 (two groups), both reductions, a gap tensor."""
    B, M, N = 17, 4, 5
    lengths = rand_lengths(gen, B, M, N)
    S = randn(gen, B, M, N)
    gap = gap_tensor(gen, B, M, N, 0.2, 1.2)
    for reduction in ("max", "soft"):
        def f(x, g, reduction=reduction):
            return softsw.align(x, g, 0.9, lengths=lengths, reduction=reduction)
        assert torch.autograd.gradgradcheck(f, (leaf(S), leaf(gap)), eps=1e-6, atol=1e-6)


# The double backward op alone on the problems and forward states of a file
# (as the test wrote them), under the process's SOFTSW_CPU_ISA: its outputs
# saved.
DOUBLE_BACKWARD_SCRIPT = textwrap.dedent("""
    import sys, torch
    import softsw
    cases = torch.load(sys.argv[1])
    outs = [torch.ops.softsw.double_backward(c["V"], c["U"], None, c["w"], *c["args"],
                                             *c["state"]) for c in cases]
    torch.save(outs, sys.argv[2])
    print("OK")
""")


def problems(seed):
    """37 pairs, some empty: constant gaps and a gap tensor, "max" and "soft".
    Each with its arguments of the forward op (api._prepare), its forward
    state (this process), a cotangent, directions and the reference's
    Hessian-vector products and grad_grad_score."""
    gen = torch.Generator().manual_seed(seed)
    B, M, N = 37, 20, 23
    T = 0.5
    lengths = rand_lengths(gen, B, M, N, allow_empty=True)
    S = fill_padding(randn(gen, B, M, N, scale=1.5), lengths, gen)
    cases = []
    for gap in (-0.7, gap_tensor(gen, B, M, N, 0.2, 1.5)):
        for reduction in ("max", "soft"):
            args, _ = softsw.api._prepare(S, gap, T, None, lengths, reduction)
            _, hidden, argmax, total = _ops.forward_without_autograd(*args, True)
            w = torch.rand(B, generator=gen, dtype=F64) + 0.5
            V, U = directions(gen, lengths, B, M, N)
            want, scale = first_and_second(S, gap, T, lengths, reduction, w, V, U, F64,
                                           align=ref_align)
            tensor = isinstance(gap, torch.Tensor)
            cases.append({"args": args, "state": (hidden, argmax, total), "w": w, "V": V,
                          "U": U if tensor else None,
                          "want": {"HVP d/d S": want[1 + tensor], "grad_grad_score": want[-1],
                                   **({"HVP d/d gap": want[3]} if tensor else {})},
                          "tol": hvp_tol(F64, M, N, T, scale),
                          "what": f"gap tensor={tensor} {reduction}"})
    return cases


def double_backward_under(isa, path, cases):
    """{name: output} of the double backward op for each case, in a process
    under SOFTSW_CPU_ISA=isa."""
    keys = ("args", "state", "w", "V", "U")
    outs = outputs_under_isa(isa, path, DOUBLE_BACKWARD_SCRIPT,
                             [{k: c[k] for k in keys} for c in cases])
    return [{"grad_grad_score": ggs, "HVP d/d S": hs, "HVP d/d gap": hg}
            for ggs, hs, hg, _ in outs]


@pytest.mark.parametrize("isa", ["avx512", pytest.param("baseline", marks=pytest.mark.slow),
                                 pytest.param("avx2", marks=pytest.mark.slow)])
def test_simd_double_backward_ran(seed, tmp_path, isa):
    """On the same forward states, the double backward under the best
    instruction set the CPU has (a cap above it runs the best), or a narrower
    cap (2 doubles to a vector on the baseline), and under
    SOFTSW_CPU_ISA=scalar: both match the reference, and their Hessian-vector
    products with respect to the scores differ in the last bits somewhere in
    each case: the SIMD passes ran."""
    cases = problems(seed)
    simd, scalar = (double_backward_under(x, tmp_path, cases) for x in (isa, "scalar"))
    assert_simd_ran(isa, cases, simd, scalar, "HVP d/d S")
