"""Random configurations (shape, lengths, gap shapes, linear / affine, T,
reduction, strides) on small problems, each checked against the reference:
values, gradients and a Hessian-vector product. The configuration is printed
on failure (with the seed)."""
import pytest
import torch

import softsw
from conftest import (DEVICES, assert_close, fill_padding, grad_tol, hvp_tol, leaf, randn,
                      score_tol)
from reference import ref_align

GAP_SHAPES = ["float", "scalar", "B", "B11", "BM1", "B1N", "BMN"]


def gap_of(kind, gen, B, M, N, center, device):
    if kind == "float":
        return center + 0.1 * float(torch.randn((), generator=gen))
    shape = {"scalar": (), "B": (B,), "B11": (B, 1, 1), "BM1": (B, M, 1), "B1N": (B, 1, N),
             "BMN": (B, M, N)}[kind]
    return randn(gen, *shape, device=device, scale=0.2, shift=center)


def pick(gen, options):
    return options[int(torch.randint(len(options), (), generator=gen))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("chunk", range(4))
def test_random_configurations(device, gen, chunk):
    for _ in range(12):
        B = int(torch.randint(1, 5, (), generator=gen))
        M = int(torch.randint(1, 11, (), generator=gen))
        N = int(torch.randint(1, 11, (), generator=gen))
        T = pick(gen, [0.0, 0.05, 0.3, 1.0, 2.5])
        reduction = pick(gen, ["max", "soft"])
        affine = bool(torch.randint(2, (), generator=gen))
        okind = pick(gen, GAP_SHAPES)
        ekind = pick(gen, GAP_SHAPES)
        use_lengths = bool(torch.randint(2, (), generator=gen))
        transposed = bool(torch.randint(2, (), generator=gen))
        config = dict(B=B, M=M, N=N, T=T, reduction=reduction, affine=affine, open=okind,
                      extend=ekind if affine else None, lengths=use_lengths,
                      transposed=transposed)
        print("config:", config)
        S = randn(gen, B, M, N)
        lengths = None
        if use_lengths:
            lengths = torch.stack([torch.randint(0, M + 1, (B,), generator=gen),
                                   torch.randint(0, N + 1, (B,), generator=gen)], 1)
            S = fill_padding(S, lengths, gen)
        S = S.to(device)
        if transposed:  # same values, non-contiguous layout
            S = S.transpose(1, 2).contiguous().transpose(1, 2)
        go = gap_of(okind, gen, B, M, N, -0.8, device)
        ge = gap_of(ekind, gen, B, M, N, -0.25, device) if affine else None
        V = randn(gen, B, M, N)
        w = randn(gen, B)

        def run(fn, dev, ref):
            conv = (lambda x: x.detach().to("cpu", torch.float64)) if ref else \
                (lambda x: x.detach())
            ins = [leaf(conv(S))]
            g_o = leaf(conv(go)) if isinstance(go, torch.Tensor) else go
            g_e = leaf(conv(ge)) if isinstance(ge, torch.Tensor) else ge
            ins += [t for t in (g_o, g_e) if isinstance(t, torch.Tensor)]
            out = fn(ins[0], g_o, T, gap_extend=g_e,
                     lengths=None if lengths is None else lengths.to(dev), reduction=reduction)
            first = torch.autograd.grad(out, ins, grad_outputs=w.to(dev), create_graph=True,
                                        allow_unused=True)
            first = [torch.zeros_like(x) if f is None else f for f, x in zip(first, ins)]
            inner = (first[0] * V.to(dev)).sum()
            if inner.requires_grad:
                second = torch.autograd.grad(inner, ins, allow_unused=True)
            else:  # e.g. the reference when every pair is empty
                second = [None] * len(ins)
            second = [torch.zeros_like(x) if s is None else s for s, x in zip(second, ins)]
            return out, first, second

        out, first, second = run(softsw.align, device, False)
        r_out, r_first, r_second = run(ref_align, "cpu", True)
        stol = score_tol(torch.float64, M, N)
        gtol = grad_tol(torch.float64, M, N, T, r_out.abs().max().item() if B else 0.0)
        assert_close(out, r_out, torch.float64, f"score {config}", tol=stol)
        for k, (a, e) in enumerate(zip(first, r_first)):
            assert_close(a, e, torch.float64, f"gradient {k} {config}", tol=gtol)
        htol = hvp_tol(torch.float64, M, N, T, r_out.abs().max().item() if B else 0.0)
        for k, (a, e) in enumerate(zip(second, r_second)):
            assert_close(a, e, torch.float64, f"HVP {k} {config}", tol=htol)
