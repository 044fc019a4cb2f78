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
