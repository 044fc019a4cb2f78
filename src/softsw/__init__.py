"""softsw: differentiable (soft) Smith-Waterman local alignment for PyTorch.

    import softsw
    score = softsw.align(scores, gap_open=-1.0, temperature=1.0)      # (B,)
    score, expected = softsw.alignment(scores, gap_open=-1.0)         # + soft alignment
    torch.ops.softsw.align(scores, -1.0, 1.0)                          # the custom op
    hits = softsw.search(queries, targets, top=10)                     # all against all

See ``softsw.align`` for the semantics and arguments.
"""
from .info import build_info  # noqa: F401  (checks this build against torch, loads _C)
from . import _ops  # noqa: F401  (registers fake kernels and autograd)
from .api import SoftSmithWaterman, align, alignment
from .seqsearch import SearchResult, search

__version__ = "0.1.0"

__all__ = ["align", "alignment", "SoftSmithWaterman", "search", "SearchResult", "build_info",
           "__version__"]
