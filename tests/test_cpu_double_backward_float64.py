"""CPU float64 double backward on SIMD lanes, linear and affine gaps.

At T > 0 the float64 Hessian-vector product runs on the rows of
csrc/kernels/cpu/double_backward_simd.h (linear gaps) and
affine_double_backward_simd.h (affine gaps) as float32's does, with double
lanes, 16 pairs to a group: the tangent pass, then the reverse pass that
carries the adjoints and their tangents. Affine gaps: the pairs inside the
double range rule of csrc/kernels/probability.h, their weights from the shares
of the C, U, L nodes the float64 forward kept (a lone affine pair: a group of
one, on the narrow rows). A lone linear pair, empty and invalid pairs, affine
pairs out of the range rule and T = 0 take the scalar passes of reverse.h.
These tests hold the first derivatives, the Hessian-vector products (scores
and per-cell gap scores) and the gradient through the first derivative's
`grad_outputs` against the float64 reference (tests/reference.py) at the
float64 tolerances (conftest.grad_tol / hvp_tol): batches of 1, 15, 16, 17
and 37 pairs with garbage in the padding of the scores and huge values in the
padding of the directions, T from 1e-3 to 1e3, |S| up to 1e4, pairs on both
sides of the range rule in one group, constant gaps and gap tensors, "max" and
"soft"; they show that the SIMD passes are what ran (on the same forward
state, the Hessian-vector products differ from the scalar passes' in the last
bits), that an affine pair's node tangents give the same bits in place and in
its blocks (tangent_store.h), and run torch.autograd.gradgradcheck through
them.
"""
import math
import textwrap

import pytest
import torch

import softsw
from conftest import assert_close, fill_padding, grad_tol, hvp_tol, rand_lengths, randn
from helpers import (DOUBLE_LOG2_LIMIT, assert_simd_ran, first_and_second, gap_tensor,
                     outputs_under_isa, scores_across_a_range_rule, small_padded_problem)
from reference import ref_align
from softsw import _ops

F64 = torch.float64

AFFINE = pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])


def gaps_of(gen, B, M, N, tensor, affine, scale=1.0):
    """Open and extend gap scores (extend None for linear gaps): constants or
    tensors, of size `scale`."""
    if tensor:
        return (gap_tensor(gen, B, M, N, 0.3 * scale, 1.3 * scale),
                gap_tensor(gen, B, M, N, 0.1 * scale, 0.5 * scale) if affine else None)
    return -0.7 * scale, -0.3 * scale if affine else None


def directions(gen, lengths, B, M, N):
    """V (scores) and U (gap scores; -U on the extend gaps), +-1e30 in the
    padding: the Hessian is zero there, and a kernel that read them would
    return garbage."""
    V, U = randn(gen, B, M, N), randn(gen, B, M, N)
    for k in range(B):
        m, n = lengths[k].tolist()
        for x, big in ((V, 1e30), (U, -1e30)):
            x[k, m:, :] = big
            x[k, :, n:] = big
    return V, U


def compare(gen, S, gap, T, lengths, reduction, extend=None):
    """softsw's first and second derivatives against the reference's, with a
    random cotangent and directions."""
    B, M, N = S.shape
    w = torch.rand(B, generator=gen, dtype=F64) + 0.5
    V, U = directions(gen, lengths, B, M, N)
    return check(S, gap, T, lengths, reduction, extend, w, V, U)


def check(S, gap, T, lengths, reduction, extend, w, V, U):
    """softsw's first and second derivatives (returned) against the
    reference's."""
    B, M, N = S.shape
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
    return actual


@AFFINE
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("gaps", ["constant", "tensor"])
@pytest.mark.parametrize("B", [1, 15, 16, 17, 37])
def test_batches_with_padding(two_cpu_threads, gen, B, gaps, reduction, affine):
    """Full groups, remainders and a lone pair; lengths shorter than the
    tensor, garbage (NaN, inf, 1e30) in the padding of the scores."""
    M, N = 17, 21
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N, scale=1.5), lengths, gen)
    gap, extend = gaps_of(gen, B, M, N, gaps == "tensor", affine)
    compare(gen, S, gap, 0.7, lengths, reduction, extend)


@AFFINE
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("T", [1e-3, 0.05, 1.0, 10.0, 1e3])
@pytest.mark.parametrize("magnitude", [1.0, 30.0, 1e4])
def test_temperatures_and_magnitudes(two_cpu_threads, gen, T, magnitude, reduction, affine):
    """Scores and gap tensors of size `magnitude`: from near-uniform weights
    (T = 1e3, |S| = 1) to a single path (T = 1e-3, |S| = 1e4); affine pairs
    on either side of the range rule in one batch where the size puts them
    there."""
    B, M, N = 18, 13, 16
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(randn(gen, B, M, N, scale=magnitude), lengths, gen)
    gap = gap_tensor(gen, B, M, N, 0.2 * magnitude, 1.0 * magnitude)
    extend = gap_tensor(gen, B, M, N, 0.1 * magnitude, 0.4 * magnitude) if affine else None
    compare(gen, S, gap, T, lengths, reduction, extend)


@AFFINE
@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("gaps", ["constant", "tensor"])
def test_range_rule_mixed_in_one_group(two_cpu_threads, gen, gaps, reduction, affine):
    """One group of 17 pairs: some far out of the double range rule (a single
    dominating cell, scores scaled by 1e3: the scalar passes for affine
    gaps), the rest inside (the SIMD group)."""
    B, M, N = 17, 18, 27
    T = 0.7
    S = scores_across_a_range_rule(gen, B, M, N, 4 * DOUBLE_LOG2_LIMIT * T * math.log(2))
    lengths = rand_lengths(gen, B, M, N)
    S = fill_padding(S, lengths, gen)
    gap, extend = gaps_of(gen, B, M, N, gaps == "tensor", affine)
    compare(gen, S, gap, T, lengths, reduction, extend)


@pytest.mark.parametrize("reduction", ["max", "soft"])
@pytest.mark.parametrize("gaps", ["constant", "tensor"])
def test_affine_tangent_store_layouts(one_cpu_thread, gen, gaps, reduction):
    """Alike affine pairs shorter than the tensor: all 16 in one group of W
    lanes and the first 8 on the narrow rows, their node tangents kept in
    place; three together and a pair alone keep them in their pairs' blocks
    (tangent_store.h). Against the reference, and bit for bit the same in
    every layout."""
    B, M, N = 16, 21, 25
    T = 0.6
    lengths = torch.tensor([[17, 22]] * B)
    S = fill_padding(randn(gen, B, M, N, scale=1.5), lengths, gen)
    gap, extend = gaps_of(gen, B, M, N, gaps == "tensor", affine=True)
    w = torch.rand(B, generator=gen, dtype=F64) + 0.5
    V, U = directions(gen, lengths, B, M, N)

    def pick(x, idx):
        return x[idx] if isinstance(x, torch.Tensor) else x

    whole = check(S, gap, T, lengths, reduction, extend, w, V, U)
    for idx in (torch.arange(8), torch.arange(5, 8), torch.tensor([9])):
        part = first_and_second(S[idx], pick(gap, idx), T, lengths[idx], reduction, w[idx],
                                V[idx], U[idx], F64, pick(extend, idx))[0]
        for k, (a, b) in enumerate(zip(part, whole)):
            # (Per pair: the (B, M, N) derivatives and d/d grad_output.)
            b = b[idx] if b.dim() == 3 or k == len(whole) - 1 else b
            assert torch.equal(a, b), f"pairs {idx.tolist()}: output {k} differs from in a group"


@AFFINE
def test_gradgradcheck(two_cpu_threads, gen, affine):
    """torch.autograd.gradgradcheck through the SIMD double backward: a padded
    batch of 17 (two groups), both reductions, gap tensors."""
    inputs, align_of = small_padded_problem(gen, affine)
    for reduction in ("max", "soft"):
        assert torch.autograd.gradgradcheck(align_of(reduction), inputs, eps=1e-6, atol=1e-6)


# The double backward op alone on the problems and forward states of a file
# (as the test wrote them), under the process's SOFTSW_CPU_ISA: its outputs
# saved.
DOUBLE_BACKWARD_SCRIPT = textwrap.dedent("""
    import sys, torch
    import softsw
    cases = torch.load(sys.argv[1])
    outs = [torch.ops.softsw.double_backward(c["V"], c["U"], c["E"], c["w"], *c["args"],
                                             *c["state"]) for c in cases]
    torch.save(outs, sys.argv[2])
    print("OK")
""")


def problems(seed):
    """37 pairs, some empty: linear and affine gaps, constant and per-cell,
    "max" and "soft". Each with its arguments of the forward op
    (api._prepare), its forward state (this process), a cotangent, directions
    and the reference's Hessian-vector products and grad_grad_score."""
    gen = torch.Generator().manual_seed(seed)
    B, M, N = 37, 20, 23
    T = 0.5
    lengths = rand_lengths(gen, B, M, N, allow_empty=True)
    S = fill_padding(randn(gen, B, M, N, scale=1.5), lengths, gen)
    cases = []
    for affine in (False, True):
        for tensor in (False, True):
            gap, extend = gaps_of(gen, B, M, N, tensor, affine)
            for reduction in ("max", "soft"):
                args, _ = softsw.api._prepare(S, gap, T, extend, lengths, reduction)
                _, hidden, argmax, total = _ops.forward_without_autograd(*args, True)
                w = torch.rand(B, generator=gen, dtype=F64) + 0.5
                V, U = directions(gen, lengths, B, M, N)
                want, scale = first_and_second(S, gap, T, lengths, reduction, w, V, U, F64,
                                               extend, align=ref_align)
                gaps = 2 if affine else 1
                hvp = {"HVP d/d S": want[1 + gaps * tensor], "grad_grad_score": want[-1]}
                if tensor:
                    hvp["HVP d/d gap"] = want[2 + gaps]
                    if affine:
                        hvp["HVP d/d extend"] = want[3 + gaps]
                cases.append({"args": args, "state": (hidden, argmax, total), "w": w, "V": V,
                              "U": U if tensor else None,
                              "E": -U if tensor and affine else None,
                              "want": hvp, "tol": hvp_tol(F64, M, N, T, scale),
                              "what": f"affine={affine} gap tensor={tensor} {reduction}"})
    return cases


def double_backward_under(isa, path, cases):
    """{name: output} of the double backward op for each case, in a process
    under SOFTSW_CPU_ISA=isa."""
    keys = ("args", "state", "w", "V", "U", "E")
    outs = outputs_under_isa(isa, path, DOUBLE_BACKWARD_SCRIPT,
                             [{k: c[k] for k in keys} for c in cases])
    return [{"grad_grad_score": ggs, "HVP d/d S": hs, "HVP d/d gap": hg, "HVP d/d extend": he}
            for ggs, hs, hg, he in outs]


@pytest.mark.parametrize("isa", ["avx512", pytest.param("baseline", marks=pytest.mark.slow),
                                 pytest.param("avx2", marks=pytest.mark.slow)])
def test_simd_double_backward_ran(seed, tmp_path, isa):
    """On the same forward states, the double backward under the best
    instruction set the CPU has (a cap above it runs the best), or a narrower
    cap (2 doubles to a vector on the baseline), and under
    SOFTSW_CPU_ISA=scalar: both match the reference, and their Hessian-vector
    products with respect to the scores differ in the last bits somewhere in
    each case, linear and affine: the SIMD passes ran."""
    cases = problems(seed)
    simd, scalar = (double_backward_under(x, tmp_path, cases) for x in (isa, "scalar"))
    assert_simd_ran(isa, cases, simd, scalar, "HVP d/d S")
