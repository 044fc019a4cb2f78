"""The benchmark's HVP mode on a small CPU shape: it runs the training step and the
Hessian-vector-product step, reports their ratio, and the HVP that softsw computes
matches the anti-diagonal version's (plain PyTorch autograd)."""
from __future__ import annotations

import json

import pytest
import torch

import softsw
from softsw import bench


@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
def test_hvp_mode(tmp_path, affine):
    out = tmp_path / "bench.json"
    argv = ["--device", "cpu", "--mode", "hvp", "--shapes", "3x12x9", "--methods",
            "softsw,antidiag", "--budget", "0.01", "--min-reps", "2", "--max-reps", "3",
            "--no-latency", "--strict", "--json", str(out)]
    if affine:
        argv.append("--affine")
    assert bench.main(argv) == 0
    rows = {(r["mode"], r["method"]): r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {(mode, method) for mode in ("training", "hvp")
                         for method in ("softsw", "antidiag")}
    for (mode, method), r in rows.items():
        assert r["status"] == "ok", r
        assert r["affine"] == affine
        assert r["gcells"] == pytest.approx(3 * 12 * 9 / r["median_s"] / 1e9)
    for method in ("softsw", "antidiag"):
        hvp, training = rows["hvp", method], rows["training", method]
        assert hvp["over_training"] == pytest.approx(hvp["median_s"] / training["median_s"])
        assert training["over_training"] is None
    # softsw is checked against the anti-diagonal version: scores and the HVP S.grad.
    hvp = rows["hvp", "softsw"]
    assert hvp["check_ref"] == "antidiag" and hvp["check_ok"] is True
    assert hvp["check_grad"] is not None and hvp["check_grad"] < 1e-4


def test_hvp_step_is_the_hessian_times_w():
    # What the HVP mode times leaves S.grad = (d^2 score / d S^2) W, the Hessian from autograd.
    case = bench.Case(1, 4, 3, "cpu", "float64", "hvp", False, -1.0, None, 1.0, "max")
    buffers = bench._make_buffers(case, 1, seed=0)
    bench.SoftswMethod(None).setup(case, buffers).step(0)
    hessian = torch.autograd.functional.hessian(
        lambda s: softsw.align(s, -1.0, 1.0).sum(), buffers[0].detach())
    weight = bench._hvp_weight(case)
    expected = (hessian.reshape(12, 12) @ weight.reshape(12)).reshape(1, 4, 3)
    assert weight.abs().min() > 0 and expected.abs().max() > 1e-3
    assert torch.allclose(buffers[0].grad, expected, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("affine", [False, True], ids=["linear", "affine"])
def test_gap_tensor_mode(tmp_path, affine):
    """--gap-tensor passes the gaps as (B, M, N) tensors: softsw runs both
    modes (and its scores equal the constant gaps' to rounding), the baselines
    report the case unsupported."""
    out = tmp_path / "bench.json"
    argv = ["--device", "cpu", "--mode", "both", "--shapes", "3x12x9", "--methods",
            "softsw,antidiag", "--budget", "0.01", "--min-reps", "2", "--max-reps", "3",
            "--no-latency", "--gap-tensor", "--json", str(out)] + (["--affine"] if affine else [])
    assert bench.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["meta"]["gap_tensor"] is True
    rows = {(r["mode"], r["method"]): r for r in report["rows"]}
    for mode in ("inference", "training"):
        assert rows[mode, "softsw"]["status"] == "ok", rows[mode, "softsw"]
        assert rows[mode, "antidiag"]["status"] == "unsupported"
        assert "gap tensors" in rows[mode, "antidiag"]["note"]
    case = bench.Case(3, 12, 9, "cpu", "float32", "inference", affine, -1.0,
                      -0.5 if affine else None, 1.0, "max", True)
    x = torch.randn(3, 12, 9)
    runner = bench.SoftswMethod(None).setup(case, [x])
    with torch.no_grad():
        expected = softsw.align(x, -1.0, 1.0, gap_extend=-0.5 if affine else None)
    assert torch.allclose(runner.step(0), expected, rtol=1e-5, atol=1e-5)
