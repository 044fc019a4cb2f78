"""The Python surface of softsw: ``align``, ``alignment`` and ``SoftSmithWaterman``.

Semantics (the short version of docs/semantics.md): for one pair with a score matrix
``S`` (M, N), DP cells ``1 <= i <= m``, ``1 <= j <= n`` hold the soft-max
(temperature ``T``; the plain max when ``T == 0``) over every local alignment
path that ends there::

    H[i,j] = softmax_T(0, H[i-1,j-1] + S[i-1,j-1], H[i-1,j] + g, H[i,j-1] + g)

with ``softmax_T(x) = T * log(sum(exp(x / T)))`` and ``H = 0`` on the border.
``reduction="max"`` scores the pair by the largest ``H`` (border zeros
included); ``reduction="soft"`` by ``softmax_T`` over all interior cells. The
gradient with respect to ``S`` is the expected alignment: the probability,
under the Gibbs distribution over paths, that query position ``i`` is matched
with target position ``j`` (the optimal path itself when ``T == 0``).
With ``gap_extend`` given, gaps are affine: opening a gap scores ``gap_open``
and each further step ``gap_extend`` (three states per cell; docs/semantics.md).
"""
from __future__ import annotations

import math
import numbers
from typing import Optional, Tuple, Union

import torch
import torch.autograd.forward_ad as forward_ad
from torch._subclasses.fake_tensor import is_fake

from . import _ops

GapScore = Union[float, torch.Tensor]

__all__ = ["align", "alignment", "SoftSmithWaterman"]


# --------------------------------------------------------------------------
# Argument checking: every rejected input names the argument.
# --------------------------------------------------------------------------


def _check_scores(scores) -> None:
    if not isinstance(scores, torch.Tensor):
        raise TypeError(f"softsw: `scores` must be a torch.Tensor, got {type(scores).__name__}")
    if scores.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise TypeError(
            "softsw: `scores` must be float16, bfloat16, float32 or float64, "
            f"got {scores.dtype}")
    if scores.dim() not in (2, 3):
        raise ValueError(
            f"softsw: `scores` must have shape (B, M, N) or (M, N), got {tuple(scores.shape)}")
    if not (scores.is_cpu or scores.is_cuda):
        raise ValueError(f"softsw: `scores` must be on a CPU or CUDA device, got {scores.device}")


def _check_temperature(temperature) -> float:
    if type(temperature) is float and temperature >= 0.0 and temperature != math.inf:
        return temperature  # the common case, checked cheaply
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise TypeError(
            "softsw: `temperature` must be a Python number >= 0, "
            f"got {type(temperature).__name__}")
    t = float(temperature)
    if not (t >= 0.0) or math.isinf(t):
        raise ValueError(f"softsw: `temperature` must be finite and >= 0, got {temperature}")
    return t


def _check_reduction(reduction) -> int:
    if reduction not in _ops._REDUCTIONS:
        raise ValueError(f"softsw: `reduction` must be 'max' or 'soft', got {reduction!r}")
    return _ops._REDUCTIONS[reduction]


def _gap_argument(gap, name: str, scores: torch.Tensor) -> Tuple[Optional[torch.Tensor], float]:
    """(tensor expanded to (B, M, N) or None, float value)."""
    if type(gap) is float and -math.inf <= gap < math.inf:
        return None, gap  # the common case, checked cheaply
    batch, rows, cols = scores.shape
    if isinstance(gap, torch.Tensor):
        if gap.dtype.is_complex or not gap.dtype.is_floating_point:
            raise TypeError(f"softsw: `{name}` must be a float or a floating-point tensor, "
                            f"got {gap.dtype}")
        if gap.device != scores.device:
            raise ValueError(f"softsw: `{name}` is on {gap.device} but `scores` is on "
                             f"{scores.device}")
        g = gap.to(scores.dtype)
        if g.dim() == 1:
            if g.shape[0] != batch:
                raise ValueError(f"softsw: a 1-D `{name}` gives one score per pair and must "
                                 f"have shape (B,) = ({batch},), got {tuple(gap.shape)}")
            g = g.view(batch, 1, 1)
        try:
            g = g.expand(batch, rows, cols)
        except RuntimeError:
            raise ValueError(f"softsw: `{name}` of shape {tuple(gap.shape)} does not broadcast "
                             f"to (B, M, N) = ({batch}, {rows}, {cols})") from None
        return g, 0.0
    if isinstance(gap, bool) or not isinstance(gap, numbers.Real):
        raise TypeError(f"softsw: `{name}` must be a float or a tensor, got {type(gap).__name__}")
    value = float(gap)
    if math.isnan(value) or value == math.inf:
        raise ValueError(f"softsw: `{name}` must be a finite number (or -inf), got {gap}")
    return None, value


def _eager() -> bool:
    if torch.compiler.is_compiling():
        return False
    return not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


def _lengths_argument(lengths, scores: torch.Tensor) -> Optional[torch.Tensor]:
    if lengths is None:
        return None
    batch, rows, cols = scores.shape
    if not isinstance(lengths, torch.Tensor):
        raise TypeError(
            f"softsw: `lengths` must be None or an integer tensor, got {type(lengths).__name__}")
    if lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
        raise TypeError(f"softsw: `lengths` must be an integer tensor, got {lengths.dtype}")
    if lengths.shape != (batch, 2):
        raise ValueError(f"softsw: `lengths` must have shape (B, 2) = ({batch}, 2), "
                         f"got {tuple(lengths.shape)}")
    if lengths.device != scores.device:
        raise ValueError(f"softsw: `lengths` is on {lengths.device} but `scores` is on "
                         f"{scores.device}")
    lengths = lengths.to(torch.int64)
    # A value check reads the tensor (a host sync on CUDA); skipped while tracing
    # (fake tensors, torch.compile) or capturing a graph, where the kernels treat
    # an out-of-range pair as invalid (NaN score) rather than read outside it.
    if _eager() and not is_fake(lengths) and lengths.numel() > 0:
        if not _lengths_in_range(lengths, rows, cols):
            raise ValueError(f"softsw: `lengths` must satisfy 0 <= m <= M = {rows} and "
                             f"0 <= n <= N = {cols}")
    return lengths


def _lengths_in_range(lengths: torch.Tensor, rows: int, cols: int) -> bool:
    if torch._C._functorch.is_functorch_wrapped_tensor(lengths):
        # Every vmapped slice counts: compare on the wrapper, read the
        # innermost tensor (see _unwrapped).
        bounds = torch.tensor([rows, cols], device=lengths.device)
        return not bool(_unwrapped(((lengths < 0) | (lengths > bounds)).any()).any())
    # Two small reductions and one read back (on CUDA, the call's one host sync;
    # no bounds tensor copied to the device). Not aminmax over dim 0: on CPU
    # that wakes the intra-op threads, which then compete with the kernel's.
    low, high_m, high_n = torch.cat((lengths.amin().view(1), lengths.amax(0))).tolist()
    return low >= 0 and high_m <= rows and high_n <= cols


def _unwrapped(tensor: torch.Tensor) -> torch.Tensor:
    # Under vmap / torch.func.grad a tensor is a wrapper that refuses bool();
    # its innermost tensor holds the values of every vmapped slice.
    while torch._C._functorch.is_functorch_wrapped_tensor(tensor):
        tensor = torch._C._functorch.get_unwrapped(tensor)
    return tensor


_SERVED_DEVICES = set()


def _check_device_served(scores: torch.Tensor) -> None:
    # Once per CUDA device: a clear error when this build has no code for its
    # architecture (instead of a launch failure deep inside the op).
    if scores.is_cuda and not torch.compiler.is_compiling():
        index = scores.get_device()
        if index not in _SERVED_DEVICES:
            from .info import check_device
            check_device(scores.device)
            _SERVED_DEVICES.add(index)


def _prepare(scores, gap_open, temperature, gap_extend, lengths, reduction):
    _check_scores(scores)
    _check_device_served(scores)
    temperature = _check_temperature(temperature)
    reduction_code = _check_reduction(reduction)
    squeeze = scores.dim() == 2
    s = scores.unsqueeze(0) if squeeze else scores
    open_t, open_v = _gap_argument(gap_open, "gap_open", s)
    if gap_extend is None:
        affine, extend_t, extend_v = False, None, open_v
    else:
        extend_t, extend_v = _gap_argument(gap_extend, "gap_extend", s)
        # Equal float scores are linear gaps: the faster one-state recurrence.
        affine = not (open_t is None and extend_t is None and extend_v == open_v)
        if not affine:
            extend_v = open_v
    if lengths is not None and squeeze:
        raise ValueError("softsw: `lengths` needs batched `scores` of shape (B, M, N)")
    lengths = _lengths_argument(lengths, s)
    return (s, open_t, extend_t, open_v, extend_v, affine, temperature, lengths,
            reduction_code), squeeze


def _needs_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in tensors)


def _has_tangent(*tensors) -> bool:
    # Forward-mode AD (torch.func.jvp / jacfwd / hessian, forward_ad.dual_level):
    # the tangent rides on the tensor, which does not require grad.
    if forward_ad._current_level < 0:
        return False
    return any(t is not None and forward_ad.unpack_dual(t).tangent is not None
               for t in tensors)


def _transformed(*tensors) -> bool:
    """Whether a functorch transform or forward-mode AD is active: then the
    autograd.Functions with setup_context, jvp and vmap rules run."""
    return torch._C._are_functorch_transforms_active() or _has_tangent(*tensors)


# --------------------------------------------------------------------------
# Public functions.
# --------------------------------------------------------------------------


def align(scores: torch.Tensor, gap_open: GapScore = -1.0, temperature: float = 1.0, *,
          gap_extend: Optional[GapScore] = None, lengths: Optional[torch.Tensor] = None,
          reduction: str = "max") -> torch.Tensor:
    """Soft (or hard) Smith-Waterman local alignment score of each pair.

    Args:
        scores: ``(B, M, N)`` or ``(M, N)`` substitution scores, ``scores[b, i, j]``
            for aligning query position ``i`` with target position ``j``.
            float16/bfloat16 (accumulated in float32), float32 or float64; CPU or
            CUDA; any strides.
        gap_open: score *added* for a gap move (negative penalises). A float, or
            a tensor broadcastable to ``(B, M, N)`` (``(B,)`` means one per pair);
            entry ``[b, i-1, j-1]`` scores a gap move ending at DP cell ``(i, j)``.
            Tensor gap scores receive gradients.
        temperature: ``T >= 0``. ``0`` is hard Smith-Waterman (exact max).
        gap_extend: ``None`` for linear gaps; otherwise the score of each gap
            step after the first (affine gaps), a float or tensor like ``gap_open``.
        lengths: ``None`` or an integer ``(B, 2)`` tensor of true lengths
            ``[m_b, n_b]``; pairs are padded at the end and padding never matters.
        reduction: ``"max"`` (best local alignment: max over cells) or ``"soft"``
            (``softmax_T`` over all interior cells).

    Returns:
        ``(B,)`` scores (0-d for 2-D input), in the dtype of ``scores``. Its
        gradient with respect to ``scores`` is the expected alignment matrix;
        double backward is supported.
    """
    args, squeeze = _prepare(scores, gap_open, temperature, gap_extend, lengths, reduction)
    s, open_t, extend_t, open_v, extend_v, affine, temperature, lengths, code = args
    needs_grad = torch.is_grad_enabled() and (
        s.requires_grad or (open_t is not None and open_t.requires_grad)
        or (extend_t is not None and extend_t.requires_grad))
    if torch.compiler.is_compiling():  # the registered autograd, when needed
        score = torch.ops.softsw.forward(*args, needs_grad)[0]
    elif (needs_grad and torch._C._are_functorch_transforms_active()) or \
            _has_tangent(s, open_t, extend_t):
        score = _ops.ForwardFunction.apply(*args)[0]
    elif needs_grad:
        score = _EagerForward.apply(s, open_t, extend_t, lengths,
                                    (open_v, extend_v, affine, temperature, code))
    else:
        score = _ops.forward_without_autograd(*args, False)[0]
    return score.squeeze(0) if squeeze else score


class _EagerForward(torch.autograd.Function):
    """Autograd of ``softsw::forward`` for plain eager calls of :func:`align`.

    The same forward and backward ops, and the same backward, as the
    ``torch.library`` registration (kept for torch.compile) and
    ``_ops.ForwardFunction`` (for functorch transforms). The registration's
    eager wrapper re-reads the op schema on every call (``fill_defaults``),
    and an ``autograd.Function`` with ``setup_context`` binds its arguments
    with ``inspect.signature`` on every call: each about 0.1 to 0.2 ms of
    host time per call, measured, more than a small problem's kernels take.
    The non-tensor arguments travel as one tuple (``floats``, as
    ``_ops.keep_forward_state`` keeps them): fewer arguments for ``apply``
    to sort and fewer gradients to return.
    """

    @staticmethod
    def forward(ctx, scores, gap_open, gap_extend, lengths, floats):
        gap_open_value, gap_extend_value, affine, temperature, reduction = floats
        score, hidden, argmax, total = _ops.forward_without_autograd(
            scores, gap_open, gap_extend, gap_open_value, gap_extend_value, affine,
            temperature, lengths, reduction, True)
        _ops.keep_forward_state(ctx, scores, gap_open, gap_extend, lengths, floats, hidden,
                                argmax, total)
        return score

    @staticmethod
    def backward(ctx, grad_score):
        backward_op = _eager_backward if torch.is_grad_enabled() else None
        return _ops.backward_of_forward(ctx, grad_score, backward_op) + (None, None)


class _EagerBackward(torch.autograd.Function):
    """Autograd of ``softsw::backward`` for the backward of plain eager calls
    of :func:`align` that records a graph (``create_graph=True``, as a
    Hessian-vector product does): the same op and the same double backward
    (``_ops.backward_backward``) as the ``torch.library`` registration, whose
    eager wrapper reads the op schema again on every call (see
    :class:`_EagerForward`). Non-tensor arguments in one tuple, ``floats``.
    A gradient of an output the loss does not use arrives as None, and the
    double backward takes None for a zero direction: no zeros are made."""

    @staticmethod
    def forward(ctx, grad_score, scores, gap_open, gap_extend, lengths, hidden, argmax, total,
                floats):
        gap_open_value, gap_extend_value, affine, temperature, reduction = floats
        inputs = (grad_score, scores, gap_open, gap_extend, gap_open_value, gap_extend_value,
                  affine, temperature, lengths, reduction, hidden, argmax, total)
        ctx.set_materialize_grads(False)
        _ops.backward_setup_context(ctx, inputs, None)
        return _ops.backward_without_autograd(*inputs)

    @staticmethod
    def backward(ctx, gg_scores, gg_open, gg_extend):
        ggs, hvp_scores, hvp_open, hvp_extend = _ops.backward_backward(
            ctx, gg_scores, gg_open, gg_extend)[:4]
        return ggs, hvp_scores, hvp_open, hvp_extend, None, None, None, None, None


def _eager_backward(grad_score, scores, gap_open, gap_extend, gap_open_value, gap_extend_value,
                    affine, temperature, lengths, reduction, hidden, argmax, total):
    # backward_of_forward's `backward_op`, through _EagerBackward.
    return _EagerBackward.apply(
        grad_score, scores, gap_open, gap_extend, lengths, hidden, argmax, total,
        (gap_open_value, gap_extend_value, affine, temperature, reduction))


def alignment(scores: torch.Tensor, gap_open: GapScore = -1.0, temperature: float = 1.0, *,
              gap_extend: Optional[GapScore] = None, lengths: Optional[torch.Tensor] = None,
              reduction: str = "max") -> Tuple[torch.Tensor, torch.Tensor]:
    """The score and the expected alignment ``d score / d scores`` of each pair.

    Same arguments as :func:`align`. Returns ``(score, expected_alignment)``:
    ``expected_alignment[b, i, j]`` is the posterior probability that query
    position ``i`` is matched with target position ``j`` (for ``temperature=0``
    the 0/1 matrix of the optimal alignment path, ties broken by preferring, at
    each cell, a path that starts there, then a match, then a gap down, then a
    gap right; with affine gaps the same order on ``C``, a gap opened before
    one extended, and a gap opened from a start, then a match, then a gap the
    other way; equal float ``gap_open`` and ``gap_extend`` are linear gaps and
    follow the linear order). Zero outside each pair's ``lengths``. Both outputs are
    differentiable (the alignment through a Hessian-vector product), so a loss
    on the soft alignment itself can be trained.
    """
    args, squeeze = _prepare(scores, gap_open, temperature, gap_extend, lengths, reduction)
    compiling = torch.compiler.is_compiling()
    if not compiling and _transformed(*args[:3]):
        forward, backward = _ops.ForwardFunction.apply, _ops.BackwardFunction.apply
        score, hidden, argmax, total = forward(*args)
    else:
        if compiling or _needs_grad(*args[:3]):  # the registered autograd
            forward, backward = torch.ops.softsw.forward, torch.ops.softsw.backward
        else:  # nothing to differentiate
            forward, backward = _ops.forward_without_autograd, _ops.backward_without_autograd
        score, hidden, argmax, total = forward(*args, True)
    ones = torch.ones_like(score)
    expected = backward(ones, *args, hidden, argmax, total)[0]
    if squeeze:
        return score.squeeze(0), expected.squeeze(0)
    return score, expected


def _align_op(scores, gap_open=-1.0, temperature=1.0, lengths=None, reduction="max",
              gap_extend=None):
    # Body of torch.ops.softsw.align (CompositeImplicitAutograd).
    return align(scores, gap_open, temperature, gap_extend=gap_extend, lengths=lengths,
                 reduction=reduction)


torch.library.impl("softsw::align", "CompositeImplicitAutograd")(_align_op)


class SoftSmithWaterman(torch.nn.Module):
    """Module form of :func:`align` with fixed gap scores and temperature.

    ``SoftSmithWaterman(gap_open, temperature)(S)`` returns, for ``S`` of shape
    ``(B, M, N)``, the ``(B,)`` best-cell score of the linear-gap soft
    Smith-Waterman recurrence. Gap scores given as tensors (e.g.
    ``nn.Parameter``) are learned.
    """

    def __init__(self, gap_open: GapScore = -1.0, temperature: float = 1.0, *,
                 gap_extend: Optional[GapScore] = None, reduction: str = "max"):
        super().__init__()
        _check_temperature(temperature)
        _check_reduction(reduction)
        self.gap_open = gap_open
        self.gap_extend = gap_extend
        self.temperature = temperature
        self.reduction = reduction

    def forward(self, scores: torch.Tensor, lengths: Optional[torch.Tensor] = None
                ) -> torch.Tensor:
        return align(scores, self.gap_open, self.temperature, gap_extend=self.gap_extend,
                     lengths=lengths, reduction=self.reduction)

    def extra_repr(self) -> str:
        return (f"gap_open={self.gap_open}, temperature={self.temperature}, "
                f"gap_extend={self.gap_extend}, reduction={self.reduction!r}")
