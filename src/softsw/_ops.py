"""Fake (meta) kernels and autograd for the ops that ``softsw._C`` registers.

The C++ side (csrc/bindings.cpp) defines the schemas and the CPU/CUDA kernels;
this module makes the ops traceable (torch.compile, fake tensors) and
differentiable twice:

* ``softsw::forward``  -> (score, hidden, argmax, total); its backward is
  ``softsw::backward``, which reads the saved ``hidden`` state.
* ``softsw::backward`` -> (grad_scores, grad_gap_open, grad_gap_extend); its
  backward is ``softsw::double_backward`` (a Hessian-vector product). It
  returns the full derivative with respect to ``scores`` and none for
  ``hidden``: ``hidden`` is a function of ``scores``, and the forward's
  autograd drops the gradient of ``hidden`` accordingly (docs/math.md).
* ``softsw::align`` is the user-facing op; its body is CompositeImplicitAutograd
  (``softsw.api._align``), so it differentiates through ``forward``.
"""
from __future__ import annotations

import torch

from . import _C  # noqa: F401  (loads the library: schemas and kernels)

_REDUCTIONS = {"max": 0, "soft": 1}


def accumulate_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def hidden_elements(batch: int, rows: int, cols: int, affine: bool) -> int:
    # Keep in sync with softsw::hidden_elements (csrc/kernels/problem.h).
    return (3 if affine else 1) * batch * rows * cols


# --------------------------------------------------------------------------
# Fake kernels: shapes and dtypes only.
# --------------------------------------------------------------------------


@torch.library.register_fake("softsw::forward")
def _forward_fake(scores, gap_open, gap_extend, gap_open_value, gap_extend_value, affine,
                  temperature, lengths, reduction, keep_hidden):
    batch, rows, cols = scores.shape
    acc = accumulate_dtype(scores.dtype)
    n_hidden = hidden_elements(batch, rows, cols, affine) if keep_hidden else 0
    return (
        scores.new_empty((batch,)),
        scores.new_empty((n_hidden,), dtype=acc),
        scores.new_empty((batch,), dtype=torch.int64),
        scores.new_empty((batch, 2), dtype=acc),
    )


def _maybe_like(wanted: bool, scores):
    return scores.new_empty(scores.shape if wanted else (0,))


@torch.library.register_fake("softsw::backward")
def _backward_fake(grad_score, scores, gap_open, gap_extend, gap_open_value, gap_extend_value,
                   affine, temperature, lengths, reduction, hidden, argmax, total):
    return (
        scores.new_empty(scores.shape),
        _maybe_like(gap_open is not None, scores),
        _maybe_like(affine and gap_extend is not None, scores),
    )


@torch.library.register_fake("softsw::double_backward")
def _double_backward_fake(grad_grad_scores, grad_grad_gap_open, grad_grad_gap_extend, grad_score,
                          scores, gap_open, gap_extend, gap_open_value, gap_extend_value, affine,
                          temperature, lengths, reduction, hidden, argmax, total):
    return (
        scores.new_empty((scores.shape[0],)),
        scores.new_empty(scores.shape),
        _maybe_like(gap_open is not None, scores),
        _maybe_like(affine and gap_extend is not None, scores),
    )


# --------------------------------------------------------------------------
# Autograd.
# --------------------------------------------------------------------------


# The ops without their autograd kernel, for calls that record no graph (grad
# mode off, as inside an autograd.Function's forward or a backward without
# create_graph): the registered autograd below is a Python kernel, and going
# through it only to redispatch below autograd costs about 5 us of host time
# per call, as much as a small problem's kernel. Same dispatch otherwise
# (tensor subclasses, dispatch modes and fake tensors still see the op).
_below_autograd = torch._C._AutoDispatchBelowAutograd


def _callable(overload):
    # The overload's C++ entry point (it handles __torch_function__ itself):
    # OpOverload.__call__ only adds a Python frame, unless a Python dispatcher
    # is attached to the op.
    if getattr(overload, "_pyobj_dispatcher", None) is None:
        return getattr(overload, "_op", overload)
    return overload


_forward_op = _callable(torch.ops.softsw.forward.default)
_backward_op = _callable(torch.ops.softsw.backward.default)


def forward_without_autograd(*args):
    with _below_autograd():
        return _forward_op(*args)


def backward_without_autograd(*args):
    with _below_autograd():
        return _backward_op(*args)


def save_forward_state(ctx, args, hidden, argmax, total):
    """Keep on `ctx` what the backward of ``softsw::forward`` reads. `args` are
    the forward's arguments without ``keep_hidden``. Shared by the registered
    autograd below and ``ForwardFunction``; ``api._EagerForward`` calls
    keep_forward_state directly."""
    (scores, gap_open, gap_extend, gap_open_value, gap_extend_value, affine, temperature,
     lengths, reduction) = args
    keep_forward_state(ctx, scores, gap_open, gap_extend, lengths,
                       (gap_open_value, gap_extend_value, affine, temperature, reduction),
                       hidden, argmax, total)


def keep_forward_state(ctx, scores, gap_open, gap_extend, lengths, floats, hidden, argmax,
                       total):
    """save_forward_state with the non-tensor arguments as one tuple `floats`
    (gap_open_value, gap_extend_value, affine, temperature, reduction)."""
    ctx.floats = floats
    ctx.save_for_backward(scores, gap_open, gap_extend, lengths, hidden, argmax, total)


def backward_of_forward(ctx, grad_score, backward_op=None):
    """(d scores, d gap_open, d gap_extend) from what save_forward_state kept;
    None for a gap that is a float. ``backward_op`` (``softsw::backward``
    unless given) records its own autograd under create_graph, which gives
    double backward."""
    scores, gap_open, gap_extend, lengths, hidden, argmax, total = ctx.saved_tensors
    gap_open_value, gap_extend_value, affine, temperature, reduction = ctx.floats
    if backward_op is None:
        backward_op = (torch.ops.softsw.backward if torch.is_grad_enabled()
                       else backward_without_autograd)
    grad_scores, grad_open, grad_extend = backward_op(
        grad_score, scores, gap_open, gap_extend, gap_open_value, gap_extend_value,
        affine, temperature, lengths, reduction, hidden, argmax, total)
    return (grad_scores,
            grad_open if gap_open is not None else None,
            grad_extend if (affine and gap_extend is not None) else None)


def _forward_setup_context(ctx, inputs, output):
    _, hidden, argmax, total = output
    ctx.keep_hidden = inputs[-1]
    save_forward_state(ctx, inputs[:-1], hidden, argmax, total)


def _forward_backward(ctx, grad_score, _grad_hidden, _grad_argmax, _grad_total):
    if not ctx.keep_hidden:
        raise RuntimeError(
            "softsw: this forward was called with keep_hidden=False, so it kept nothing "
            "to differentiate; call softsw.align (or forward with keep_hidden=True)")
    return backward_of_forward(ctx, grad_score) + (None,) * 7


torch.library.register_autograd(
    "softsw::forward", _forward_backward, setup_context=_forward_setup_context)


# The autograd of ``softsw::backward``: its backward is ``softsw::double_backward``.
# Shared by the registration below, ``BackwardFunction`` and ``api._EagerBackward``.
def backward_setup_context(ctx, inputs, output):
    (grad_score, scores, gap_open, gap_extend, gap_open_value, gap_extend_value, affine,
     temperature, lengths, reduction, hidden, argmax, total) = inputs
    ctx.has_gap_open = gap_open is not None
    ctx.has_gap_extend = affine and gap_extend is not None
    ctx.floats = (gap_open_value, gap_extend_value, affine, temperature, reduction)
    ctx.save_for_backward(grad_score, scores, gap_open, gap_extend, lengths, hidden, argmax,
                          total)


def backward_backward(ctx, gg_scores, gg_open, gg_extend):
    grad_score, scores, gap_open, gap_extend, lengths, hidden, argmax, total = ctx.saved_tensors
    gap_open_value, gap_extend_value, affine, temperature, reduction = ctx.floats
    gg_open = gg_open if ctx.has_gap_open else None
    gg_extend = gg_extend if ctx.has_gap_extend else None
    ggs, hvp_scores, hvp_open, hvp_extend = torch.ops.softsw.double_backward(
        gg_scores, gg_open, gg_extend, grad_score, scores, gap_open, gap_extend, gap_open_value,
        gap_extend_value, affine, temperature, lengths, reduction, hidden, argmax, total)
    return (
        ggs,
        hvp_scores,
        hvp_open if ctx.has_gap_open else None,
        hvp_extend if ctx.has_gap_extend else None,
        None, None, None, None, None, None, None, None, None,
    )


torch.library.register_autograd(
    "softsw::backward", backward_backward, setup_context=backward_setup_context)


# --------------------------------------------------------------------------
# autograd.Functions for eager calls and functorch transforms.
#
# ``torch.library.register_autograd`` (above) serves tracing (torch.compile),
# but its generated autograd.Function has no ``setup_context`` of its own, so
# functorch (``torch.func.grad``, ``jacrev``, ...) refuses it. The two
# Functions below run the same ops with the same saved state and the same
# backward; ``generate_vmap_rule`` lets vmap reach the ops' batching rules
# (further below). Plain eager calls use ``api._EagerForward`` instead: a
# Function with ``setup_context`` binds its arguments with inspect.signature
# on every call, host time that a small problem notices.
# --------------------------------------------------------------------------


class ForwardFunction(torch.autograd.Function):
    """``softsw::forward`` with ``keep_hidden=True``; differentiable in its
    first output (the score), through :class:`BackwardFunction`."""

    generate_vmap_rule = True

    @staticmethod
    def forward(*args):
        return torch.ops.softsw.forward(*args, True)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, hidden, argmax, total = output
        ctx.mark_non_differentiable(hidden, argmax, total)
        save_forward_state(ctx, inputs, hidden, argmax, total)
        scores, gap_open, gap_extend, _, _, _, _, lengths, _ = inputs
        ctx.save_for_forward(scores, gap_open, gap_extend, lengths, hidden, argmax, total)

    @staticmethod
    def backward(ctx, grad_score, _grad_hidden, _grad_argmax, _grad_total):
        return backward_of_forward(ctx, grad_score, BackwardFunction.apply) + (None,) * 6

    @staticmethod
    def jvp(ctx, d_scores, d_open, d_extend, *_):
        # Forward mode: d score = <d score / d inputs, tangents>, the gradient
        # taken with a cotangent of ones.
        scores = ctx.saved_tensors[0]
        ones = torch.ones(scores.shape[0], dtype=scores.dtype, device=scores.device)
        grads = backward_of_forward(ctx, ones, BackwardFunction.apply)
        tangent = torch.zeros_like(ones)
        for grad, direction in zip(grads, (d_scores, d_open, d_extend)):
            if grad is not None and direction is not None:
                tangent = tangent + (grad * direction).sum((1, 2))
        return tangent, None, None, None


class BackwardFunction(torch.autograd.Function):
    """``softsw::backward``; its backward is ``softsw::double_backward``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(*args):
        return torch.ops.softsw.backward(*args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        backward_setup_context(ctx, inputs, output)
        (grad_score, scores, gap_open, gap_extend, _, _, _, _, lengths, _, hidden, argmax,
         total) = inputs
        ctx.save_for_forward(grad_score, scores, gap_open, gap_extend, lengths, hidden, argmax,
                             total)

    @staticmethod
    def backward(ctx, gg_scores, gg_open, gg_extend):
        return backward_backward(ctx, gg_scores, gg_open, gg_extend)

    @staticmethod
    def jvp(ctx, d_grad_score, d_scores, d_open, d_extend, *_):
        # The gradient is grad_score * g(inputs): its tangent is the Hessian
        # of the score applied to the input tangents (symmetric, so the double
        # backward's vector-Hessian product), times grad_score, plus
        # d_grad_score * g.
        grad_score, scores, gap_open, gap_extend, lengths, hidden, argmax, total = \
            ctx.saved_tensors
        gap_open_value, gap_extend_value, affine, temperature, reduction = ctx.floats
        state = (scores, gap_open, gap_extend, gap_open_value, gap_extend_value, affine,
                 temperature, lengths, reduction, hidden, argmax, total)
        d_scores = torch.zeros_like(scores) if d_scores is None else d_scores
        d_open = d_open if ctx.has_gap_open else None
        d_extend = d_extend if ctx.has_gap_extend else None
        tangents = list(torch.ops.softsw.double_backward(
            d_scores, d_open, d_extend, grad_score, *state)[1:])
        if d_grad_score is not None:
            extra = torch.ops.softsw.backward(d_grad_score, *state)
            tangents = [t + e if e.numel() else t for t, e in zip(tangents, extra)]
        return tuple(tangents)


# --------------------------------------------------------------------------
# Batching rules (vmap): every op treats its pairs independently, so a vmapped
# dimension V folds into the batch: (V, B, ...) -> (V * B, ...), and the
# outputs unfold again. ``hidden`` is flat, but every backend keeps it pair by
# pair (pair b's planes start at b * planes * M * N), so the same fold is the
# state of the folded problem, and an unbatched one is repeated V times.
# --------------------------------------------------------------------------


def _fold(value, dim, size):
    if not isinstance(value, torch.Tensor):
        return value
    if dim is None:
        value = value.unsqueeze(0).expand(size, *value.shape)
    else:
        value = value.movedim(dim, 0)
    return value.reshape(size * value.shape[1], *value.shape[2:])


def _unfold(output, size):
    # Empty outputs (no gradient for a gap given as a float) stay unbatched.
    if output.numel() == 0:
        return output, None
    return output.reshape(size, output.shape[0] // size, *output.shape[1:]), 0


def _folding_rule(op):
    def rule(info, in_dims, *args):
        size = info.batch_size
        outputs = op(*(_fold(a, d, size) for a, d in zip(args, in_dims)))
        unfolded = [_unfold(o, size) for o in outputs]
        return tuple(o for o, _ in unfolded), tuple(d for _, d in unfolded)
    return rule


for _name in ("forward", "backward", "double_backward"):
    torch.library.register_vmap(f"softsw::{_name}",
                                _folding_rule(getattr(torch.ops.softsw, _name).default))
