"""Bad input (docs/semantics.md, "Inputs"): one test per rejected case, with the exception type and
a message that names the argument; never a crash. Raw-op misuse that a
kernel could turn into an out-of-bounds access runs in a subprocess, so a
crash fails that test instead of killing the run."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import softsw
from conftest import HAS_CUDA

F64 = torch.float64


def S3(B=2, M=4, N=5, **kw):
    return torch.randn(B, M, N, dtype=kw.pop("dtype", F64), **kw)


def raises(exc, name, fn, *args, **kwargs):
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    assert name in str(info.value), f"message does not name `{name}`: {info.value}"


# --- scores ---------------------------------------------------------------


def test_scores_rank_1():
    raises(ValueError, "scores", softsw.align, torch.randn(7, dtype=F64))


def test_scores_rank_4():
    raises(ValueError, "scores", softsw.align, torch.randn(2, 2, 3, 4, dtype=F64))


def test_scores_rank_0():
    raises(ValueError, "scores", softsw.align, torch.tensor(1.0, dtype=F64))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
def test_scores_integer_dtype(dtype):
    raises(TypeError, "scores", softsw.align, torch.ones(2, 3, 4, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_scores_complex_dtype(dtype):
    raises(TypeError, "scores", softsw.align, torch.ones(2, 3, 4, dtype=dtype))


def test_scores_not_a_tensor():
    raises(TypeError, "scores", softsw.align, [[1.0, 2.0], [3.0, 4.0]])


def test_scores_on_meta_device():
    raises(ValueError, "scores", softsw.align, torch.empty(2, 3, 4, device="meta"))


def test_op_scores_rank_1():
    raises((ValueError, RuntimeError), "scores", torch.ops.softsw.align, torch.randn(7))


# --- temperature ----------------------------------------------------------


def test_temperature_negative():
    raises(ValueError, "temperature", softsw.align, S3(), -1.0, -0.5)


def test_temperature_negative_zero_is_zero():
    # -0.0 >= 0 is True: it is T = 0, hard mode, not an error.
    S = S3()
    assert torch.equal(softsw.align(S, -1.0, -0.0), softsw.align(S, -1.0, 0.0))


def test_temperature_nan():
    raises(ValueError, "temperature", softsw.align, S3(), -1.0, float("nan"))


def test_temperature_inf():
    raises(ValueError, "temperature", softsw.align, S3(), -1.0, float("inf"))


def test_temperature_not_a_number():
    raises(TypeError, "temperature", softsw.align, S3(), -1.0, "1.0")


def test_temperature_tensor():
    raises(TypeError, "temperature", softsw.align, S3(), -1.0, torch.tensor(1.0))


def test_op_temperature_negative():
    raises((ValueError, RuntimeError), "temperature", torch.ops.softsw.align, S3(), -1.0, -2.0)


def test_module_temperature_negative():
    raises(ValueError, "temperature", softsw.SoftSmithWaterman, -1.0, -0.1)


# --- reduction ------------------------------------------------------------


def test_reduction_unknown():
    raises(ValueError, "reduction", softsw.align, S3(), reduction="mean")


def test_reduction_wrong_case():
    raises(ValueError, "reduction", softsw.align, S3(), reduction="MAX")


def test_op_reduction_unknown():
    raises((ValueError, RuntimeError), "reduction", torch.ops.softsw.align, S3(), -1.0, 1.0,
           None, "sum")


def test_module_reduction_unknown():
    raises(ValueError, "reduction", softsw.SoftSmithWaterman, reduction="sum")


def test_alignment_checks_arguments_too():
    raises(ValueError, "reduction", softsw.alignment, S3(), reduction="median")


# --- lengths --------------------------------------------------------------


def test_lengths_negative():
    raises(ValueError, "lengths", softsw.align, S3(), lengths=torch.tensor([[4, 5], [-1, 3]]))


def test_lengths_above_rows():
    raises(ValueError, "lengths", softsw.align, S3(), lengths=torch.tensor([[4, 5], [5, 3]]))


def test_lengths_above_cols():
    raises(ValueError, "lengths", softsw.align, S3(), lengths=torch.tensor([[4, 6], [2, 3]]))


def test_lengths_wrong_last_dim():
    raises(ValueError, "lengths", softsw.align, S3(), lengths=torch.tensor([[4, 5, 1], [2, 3, 1]]))


def test_lengths_one_dimensional():
    raises(ValueError, "lengths", softsw.align, S3(), lengths=torch.tensor([4, 5]))


def test_lengths_wrong_batch():
    raises(ValueError, "lengths", softsw.align, S3(), lengths=torch.tensor([[4, 5]] * 3))


def test_lengths_float_dtype():
    raises(TypeError, "lengths", softsw.align, S3(), lengths=torch.tensor([[4.0, 5.0], [2, 3]]))


def test_lengths_bool_dtype():
    raises(TypeError, "lengths", softsw.align, S3(),
           lengths=torch.ones(2, 2, dtype=torch.bool))


def test_lengths_not_a_tensor():
    raises(TypeError, "lengths", softsw.align, S3(), lengths=[[4, 5], [2, 3]])


def test_lengths_on_other_device_meta():
    raises(ValueError, "lengths", softsw.align, S3(),
           lengths=torch.empty(2, 2, dtype=torch.int64, device="meta"))


@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA (cuda vs cpu tensors)")
def test_lengths_on_other_device_cuda():
    raises(ValueError, "lengths", softsw.align, S3(device="cuda"),
           lengths=torch.tensor([[4, 5], [2, 3]]))


@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA (cuda vs cpu tensors)")
def test_lengths_cuda_scores_cpu():
    raises(ValueError, "lengths", softsw.align, S3(),
           lengths=torch.tensor([[4, 5], [2, 3]], device="cuda"))


def test_op_lengths_out_of_range():
    raises((ValueError, RuntimeError), "lengths", torch.ops.softsw.align, S3(), -1.0, 1.0,
           torch.tensor([[9, 5], [2, 3]]))


# --- gap scores -----------------------------------------------------------


def test_gap_open_does_not_broadcast():
    raises(ValueError, "gap_open", softsw.align, S3(), torch.full((2, 3, 5), -1.0, dtype=F64))


def test_gap_extend_does_not_broadcast():
    raises(ValueError, "gap_extend", softsw.align, S3(), -1.0,
           gap_extend=torch.full((2, 4, 2), -0.5, dtype=F64))


def test_gap_open_one_per_pair_wrong_length():
    raises(ValueError, "gap_open", softsw.align, S3(), torch.full((3,), -1.0, dtype=F64))


def test_gap_open_too_many_dims():
    raises(ValueError, "gap_open", softsw.align, S3(), torch.full((1, 2, 4, 5), -1.0))


def test_gap_open_integer_tensor():
    raises(TypeError, "gap_open", softsw.align, S3(), torch.full((2, 1, 1), -1))


def test_gap_extend_complex_tensor():
    raises(TypeError, "gap_extend", softsw.align, S3(), -1.0,
           gap_extend=torch.full((2, 1, 1), -1 + 0j))


def test_gap_open_not_a_number():
    raises(TypeError, "gap_open", softsw.align, S3(), "-1")


def test_gap_open_nan():
    raises(ValueError, "gap_open", softsw.align, S3(), float("nan"))


def test_gap_extend_plus_inf():
    raises(ValueError, "gap_extend", softsw.align, S3(), -1.0, gap_extend=float("inf"))


def test_gap_open_on_meta_device():
    raises(ValueError, "gap_open", softsw.align, S3(), torch.empty(2, 4, 5, device="meta"))


@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA (cuda vs cpu tensors)")
def test_gap_open_on_other_device_cuda():
    raises(ValueError, "gap_open", softsw.align, S3(device="cuda"),
           torch.full((2, 1, 1), -1.0, dtype=F64))


# --- raw ops: misuse must raise (or be contained), never crash ------------


def test_raw_forward_wrong_rank():
    raises(RuntimeError, "scores", torch.ops.softsw.forward, torch.randn(4, 5, dtype=F64),
           None, None, -1.0, -1.0, False, 1.0, None, 0, False)


def test_raw_forward_gap_not_expanded():
    raises(RuntimeError, "gap_open", torch.ops.softsw.forward, S3(),
           torch.full((2, 1, 1), -1.0, dtype=F64), None, 0.0, 0.0, False, 1.0, None, 0, False)


def test_raw_forward_bad_reduction_code():
    raises(RuntimeError, "reduction", torch.ops.softsw.forward, S3(), None, None, -1.0, -1.0,
           False, 1.0, None, 7, False)


def test_raw_backward_without_hidden():
    S = S3()
    score, hidden, argmax, total = torch.ops.softsw.forward(S, None, None, -1.0, -1.0, False,
                                                            1.0, None, 0, False)
    raises(RuntimeError, "hidden", torch.ops.softsw.backward, torch.ones(2, dtype=F64), S,
           None, None, -1.0, -1.0, False, 1.0, None, 0, hidden, argmax, total)


def test_backward_of_forward_without_hidden():
    S = S3().requires_grad_(True)
    score = torch.ops.softsw.forward(S, None, None, -1.0, -1.0, False, 1.0, None, 0, False)[0]
    raises(RuntimeError, "keep_hidden", score.sum().backward)


def test_raw_backward_hidden_of_other_problem():
    S = S3()
    _, hidden, argmax, total = torch.ops.softsw.forward(S, None, None, -1.0, -1.0, False, 1.0,
                                                        None, 0, True)
    # The affine backward needs three planes of hidden state; this has one.
    raises(RuntimeError, "hidden", torch.ops.softsw.backward, torch.ones(2, dtype=F64), S,
           None, None, -1.0, -0.5, True, 1.0, None, 0, hidden, argmax, total)


CRASH_SCRIPT = textwrap.dedent("""
    import math, torch, softsw
    F64 = torch.float64
    B, M, N = 4, 6, 7
    S = torch.randn(B, M, N, dtype=F64)
    good = torch.tensor([[6, 7], [3, 4], [6, 7], [2, 2]])
    expect = softsw.align(S, -0.5, 1.0, lengths=good)
    bad = torch.tensor([[6, 7], [3, 4], [M + 1000, 7], [-5, 2**40]])
    for affine in (False, True):
        for T in (1.0, 0.0):
            for red in (0, 1):
                try:
                    out = torch.ops.softsw.forward(S, None, None, -0.5, -0.1 if affine else -0.5,
                                                   affine, T, bad, red, True)
                except RuntimeError as e:
                    assert "lengths" in str(e), e
                    continue
                score, hidden, argmax, total = out
                # Contained: the out-of-range pairs are invalid (NaN), the others intact.
                assert math.isnan(score[2].item()) and math.isnan(score[3].item()), score
                if not affine and T == 1.0 and red == 0:
                    assert torch.allclose(score[:2], expect[:2], rtol=1e-12, atol=1e-12)
                g = torch.ops.softsw.backward(torch.ones(B, dtype=F64), S, None, None, -0.5,
                                              -0.1 if affine else -0.5, affine, T, bad, red,
                                              hidden, argmax, total)[0]
                assert torch.isfinite(g[:2]).all()
                d = torch.ops.softsw.double_backward(torch.randn(B, M, N, dtype=F64), None, None,
                                                     torch.ones(B, dtype=F64), S, None, None,
                                                     -0.5, -0.1 if affine else -0.5, affine, T,
                                                     bad, red, hidden, argmax, total)
                assert torch.isfinite(d[1][:2]).all()
    # Out-of-range lengths under tracing (no host-side value check there).
    f = torch.compile(lambda s, l: softsw.align(s, -0.5, 1.0, lengths=l), fullgraph=True,
                      backend="eager")
    out = f(S, bad)
    assert math.isnan(out[2].item()) and math.isnan(out[3].item()), out
    assert torch.allclose(out[:2], expect[:2], rtol=1e-12, atol=1e-12)
    print("OK")
""")


@pytest.mark.slow
def test_out_of_range_lengths_never_crash():
    """The raw ops (and a traced align, which skips the host-side check) get
    out-of-range lengths: they must raise a RuntimeError naming `lengths` or
    contain the damage (NaN for those pairs, others intact) -- in a subprocess,
    so that an out-of-bounds access shows up as a failed test."""
    env = dict(os.environ)
    env.setdefault("SOFTSW_NUM_THREADS", "2")
    proc = subprocess.run([sys.executable, "-c", CRASH_SCRIPT], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.strip().endswith("OK")
