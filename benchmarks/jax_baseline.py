"""JAX baseline for the benchmark: soft Smith-Waterman as a ``lax.scan`` over
anti-diagonals, gradients by ``jax.grad``.

This is what a user without softsw would write in JAX (about 1.5 G cells/s
forward). Same recurrence and score as docs/semantics.md for
float gap scores: linear gaps (one state) or affine (``gap_extend`` given;
states D, U, L, C and the C' nodes), ``temperature > 0`` or ``0`` (plain max;
at ties ``jax.grad`` splits the gradient, where softsw picks one path), and
``reduction="max"`` or ``"soft"``. No per-position gap tensors, no lengths.

The scan carries the previous anti-diagonals as full-height vectors over the
query rows ``a = 0..M-1`` (cell ``(a, e - a)`` on step ``e``), so every step
has the same shape; cells outside the grid are held at their boundary value.

Import only where JAX is installed. Set ``XLA_PYTHON_CLIENT_PREALLOCATE=false``
before importing JAX next to PyTorch on one GPU (done here if unset), or JAX
takes 75 % of the GPU's memory up front.
"""
from __future__ import annotations

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

__all__ = ["align", "make_functions"]


def _softmax(cands, hard):
    x = jnp.stack(cands)
    return jnp.max(x, axis=0) if hard else jax.nn.logsumexp(x, axis=0)


def align(scores, gap_open: float = -1.0, temperature: float = 1.0, *, gap_extend=None,
          reduction: str = "max"):
    """``(B,)`` scores for ``scores`` of shape ``(B, M, N)`` (a JAX array).

    Half inputs are computed in float32; float64 needs ``jax_enable_x64``.
    """
    if reduction not in ("max", "soft"):
        raise ValueError(f"reduction must be 'max' or 'soft', got {reduction!r}")
    if not isinstance(gap_open, (int, float)) or not (
            gap_extend is None or isinstance(gap_extend, (int, float))):
        raise NotImplementedError("the JAX baseline takes float gap scores only")
    temperature = float(temperature)
    if temperature < 0:
        raise ValueError("temperature must be >= 0")
    batch, rows, cols = scores.shape
    acc = jnp.float64 if scores.dtype == jnp.float64 else jnp.float32
    hard = temperature == 0.0
    scale = 1.0 if hard else 1.0 / temperature
    affine = gap_extend is not None and float(gap_extend) != float(gap_open)
    go = float(gap_open) * scale
    ge = float(gap_extend if gap_extend is not None else gap_open) * scale
    if rows == 0 or cols == 0:
        return jnp.zeros((batch,), scores.dtype) + 0.0 * jnp.sum(scores, axis=(1, 2))

    steps = rows + cols - 1
    e = jnp.arange(steps)[:, None]
    a = jnp.arange(rows)[None, :]
    c = e - a
    valid = (c >= 0) & (c < cols)                                  # (steps, M)
    skewed = scores.astype(acc)[:, a, jnp.clip(c, 0, cols - 1)]   # (B, steps, M)
    skewed = jnp.where(valid[None], skewed, 0.0) * scale
    skewed = jnp.moveaxis(skewed, 1, 0)                            # (steps, B, M)
    ninf = jnp.asarray(-jnp.inf, acc)
    zeros = jnp.zeros((batch, rows), acc)

    def down(v, fill):  # v[a - 1] at row a; row -1 is the boundary
        return jnp.concatenate([jnp.full((batch, 1), fill, acc), v[:, :-1]], axis=1)

    def reduce(red, h, ok):
        if reduction == "soft" and not hard:
            return jnp.logaddexp(red, jax.nn.logsumexp(jnp.where(ok, h, ninf), axis=1))
        return jnp.maximum(red, jnp.max(jnp.where(ok, h, ninf), axis=1))

    red0 = (jnp.full((batch,), -jnp.inf, acc) if (reduction == "soft" and not hard)
            else jnp.zeros((batch,), acc))

    if not affine:
        def step(carry, x):
            h1, h2, red = carry
            s, ok = x
            h = _softmax([zeros, down(h2, 0.0) + s, down(h1, 0.0) + go, h1 + go], hard)
            h = jnp.where(ok, h, 0.0)
            return (h, h1, reduce(red, h, ok)), None

        (_, _, red), _ = lax.scan(step, (zeros, zeros, red0), (skewed, valid))
    else:
        minf = jnp.full((batch, rows), -jnp.inf, acc)

        def step(carry, x):
            c1, cdl1, cdu1, u1, l1, c2, red = carry
            s, ok = x
            d = down(c2, 0.0) + s
            u = _softmax([down(cdl1, 0.0) + go, down(u1, -jnp.inf) + ge], hard)
            l_ = _softmax([cdu1 + go, l1 + ge], hard)
            cc = jnp.where(ok, _softmax([zeros, d, u, l_], hard), 0.0)
            cdl = jnp.where(ok, _softmax([zeros, d, l_], hard), 0.0)
            cdu = jnp.where(ok, _softmax([zeros, d, u], hard), 0.0)
            u = jnp.where(ok, u, ninf)
            l_ = jnp.where(ok, l_, ninf)
            return (cc, cdl, cdu, u, l_, c1, reduce(red, cc, ok)), None

        init = (zeros, zeros, zeros, minf, minf, zeros, red0)
        (*_, red), _ = lax.scan(step, init, (skewed, valid))
    score = red if hard else red * temperature
    return score.astype(scores.dtype)


def make_functions(gap_open: float = -1.0, temperature: float = 1.0, *, gap_extend=None,
                   reduction: str = "max"):
    """``(inference, training)``, both jitted: ``inference(S) -> scores``;
    ``training(S) -> (scores, d sum(scores) / d S)``."""
    def forward(s):
        return align(s, gap_open, temperature, gap_extend=gap_extend, reduction=reduction)

    def loss(s):
        out = forward(s)
        return jnp.sum(out.astype(jnp.float32 if out.dtype != jnp.float64 else out.dtype)), out

    grad = jax.value_and_grad(loss, has_aux=True)

    def training(s):
        (_, out), g = grad(s)
        return out, g

    return jax.jit(forward), jax.jit(training)
