"""Learn a substitution matrix and gap scores from reference alignments.

    python examples/learn_alignment.py                    # GPU if any; ~30 s on 2 CPU cores
    python examples/learn_alignment.py --device cuda --plot learn_alignment.png

The data are synthetic homologous protein pairs whose true alignment is known:
a random ancestor sequence is copied with substitutions (drawn from the
substitution process that BLOSUM62 describes), insertions and deletions, and
both sequences get unrelated flanks, so that finding the homologous region is
part of the task. The model is a 20 x 20 substitution matrix and affine gap
scores, all learned from a random start. The loss is on the soft alignment
itself: the expected alignment ``P = d score / d S`` (``softsw.alignment``,
differentiable through a double backward) is pushed towards the true alignment
by a binary cross-entropy over the cells of each pair.

It prints the precision and recall of the model's Smith-Waterman alignment
(temperature 0) on held-out pairs before and after training, next to BLOSUM62
with the usual gap scores (-11 open, -1 extend), and writes a PNG (when
matplotlib is installed) of the learning curve and of one held-out pair's
``P`` before and after training.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import torch

import softsw
from softsw import scoring

AMINO_ACIDS = "ARNDCQEGHILKMFPSTWYV"
# Amino-acid background frequencies of the BLOSUM62 paper (Henikoff & Henikoff 1992),
# in the order of AMINO_ACIDS.
BACKGROUND = (0.074, 0.052, 0.045, 0.054, 0.025, 0.034, 0.054, 0.074, 0.026, 0.068,
              0.099, 0.058, 0.025, 0.047, 0.039, 0.057, 0.051, 0.013, 0.032, 0.073)
# BLOSUM62 entries are 2 log2(q_ab / (p_a p_b)): half-bit units.
BLOSUM_LAMBDA = math.log(2.0) / 2.0


# --------------------------------------------------------------------------
# Synthetic homologous pairs.
# --------------------------------------------------------------------------


@dataclass
class Evolution:
    """How a target sequence is derived from a query sequence."""
    identity_mix: float = 0.35   # weight of "keep the residue" against a BLOSUM62 draw
    insert_rate: float = 0.06    # per position: an insertion starts before it
    delete_rate: float = 0.06    # per position: a deletion starts at it
    indel_extend: float = 0.5    # an insertion or deletion goes on one more residue
    core: Tuple[int, int] = (40, 70)    # length range of the homologous region
    flank: Tuple[int, int] = (0, 15)    # length range of each unrelated flank


def substitution_probabilities() -> torch.Tensor:
    """(20, 20) row-stochastic P(b | a) implied by BLOSUM62: q_ab = p_a p_b e^(lambda s_ab)."""
    blosum = scoring.load_matrix("BLOSUM62")
    index = [blosum.alphabet.index(a) for a in AMINO_ACIDS]
    s = blosum.scores[index][:, index]
    p = torch.tensor(BACKGROUND, dtype=torch.float64)
    joint = p[:, None] * p[None, :] * torch.exp(BLOSUM_LAMBDA * s)
    return joint / joint.sum(1, keepdim=True)


@dataclass
class Pair:
    query: torch.Tensor    # (m,) int64 tokens into AMINO_ACIDS
    target: torch.Tensor   # (n,)
    matched: torch.Tensor  # (k, 2) int64: the true aligned (i, j) positions


def _geometric(gen: torch.Generator, extend: float) -> int:
    length = 1
    while float(torch.rand((), generator=gen)) < extend:
        length += 1
    return length


def make_pair(gen: torch.Generator, evolution: Evolution, substitution: torch.Tensor) -> Pair:
    """One homologous pair: query = flank + ancestor + flank, target = flank + mutated
    ancestor + flank; the matched positions are the ancestor residues that survive."""
    background = torch.tensor(BACKGROUND, dtype=torch.float64)

    def residues(n: int) -> List[int]:
        if n == 0:
            return []
        return torch.multinomial(background, n, replacement=True, generator=gen).tolist()

    def randint(bounds: Tuple[int, int]) -> int:
        return int(torch.randint(bounds[0], bounds[1] + 1, (), generator=gen))

    keep = evolution.identity_mix
    mutate = (1 - keep) * substitution + keep * torch.eye(len(AMINO_ACIDS), dtype=torch.float64)
    ancestor = residues(randint(evolution.core))
    q_left, t_left = residues(randint(evolution.flank)), residues(randint(evolution.flank))
    target, matched = list(t_left), []
    i, deleted = 0, 0
    for i, a in enumerate(ancestor):
        if float(torch.rand((), generator=gen)) < evolution.insert_rate:
            target += residues(_geometric(gen, evolution.indel_extend))
        if deleted == 0 and float(torch.rand((), generator=gen)) < evolution.delete_rate:
            deleted = _geometric(gen, evolution.indel_extend)
        if deleted > 0:
            deleted -= 1
            continue
        matched.append((len(q_left) + i, len(target)))
        target.append(int(torch.multinomial(mutate[a], 1, generator=gen)))
    query = q_left + ancestor + residues(randint(evolution.flank))
    target += residues(randint(evolution.flank))
    return Pair(torch.tensor(query), torch.tensor(target),
                torch.tensor(matched, dtype=torch.int64).reshape(-1, 2))


@dataclass
class Batch:
    query: torch.Tensor      # (B, M) tokens, -1 after each sequence's end
    target: torch.Tensor     # (B, N)
    lengths: torch.Tensor    # (B, 2) [m, n]
    alignment: torch.Tensor  # (B, M, N) 0/1 true alignment

    def to(self, device) -> "Batch":
        return Batch(*(t.to(device) for t in (self.query, self.target, self.lengths,
                                              self.alignment)))


def make_batch(pairs: List[Pair]) -> Batch:
    rows = max(len(p.query) for p in pairs)
    cols = max(len(p.target) for p in pairs)
    query = torch.full((len(pairs), rows), -1, dtype=torch.int64)
    target = torch.full((len(pairs), cols), -1, dtype=torch.int64)
    alignment = torch.zeros(len(pairs), rows, cols)
    for b, p in enumerate(pairs):
        query[b, :len(p.query)] = p.query
        target[b, :len(p.target)] = p.target
        alignment[b, p.matched[:, 0], p.matched[:, 1]] = 1.0
    lengths = torch.tensor([[len(p.query), len(p.target)] for p in pairs])
    return Batch(query, target, lengths, alignment)


# --------------------------------------------------------------------------
# The model: a substitution matrix and affine gap scores.
# --------------------------------------------------------------------------


class Aligner(torch.nn.Module):
    """Soft Smith-Waterman with a learned symmetric substitution matrix and learned
    affine gap scores (tensors: softsw differentiates with respect to them)."""

    def __init__(self, temperature: float = 1.0, gen: Optional[torch.Generator] = None):
        super().__init__()
        k = len(AMINO_ACIDS)
        # A random start: the model knows nothing about amino acids.
        self.matrix = torch.nn.Parameter(0.1 * torch.randn(k, k, generator=gen))
        self.gap_open = torch.nn.Parameter(torch.tensor(-1.0))
        self.gap_extend = torch.nn.Parameter(torch.tensor(-1.0))
        self.temperature = temperature

    def substitution(self) -> torch.Tensor:
        return 0.5 * (self.matrix + self.matrix.T)

    def scores(self, batch: Batch) -> torch.Tensor:
        return scoring.scores_from_tokens(batch.query, batch.target, self.substitution())

    def forward(self, batch: Batch) -> torch.Tensor:
        """The expected alignment P (B, M, N), differentiable with respect to the parameters."""
        _, expected = softsw.alignment(self.scores(batch), self.gap_open, self.temperature,
                                       gap_extend=self.gap_extend, lengths=batch.lengths)
        return expected

    @torch.no_grad()
    def predict(self, batch: Batch) -> torch.Tensor:
        """The 0/1 Smith-Waterman alignment (temperature 0) under the learned scores."""
        return hard_alignment(self.scores(batch), self.gap_open, self.gap_extend, batch)


def hard_alignment(scores, gap_open, gap_extend, batch: Batch) -> torch.Tensor:
    _, path = softsw.alignment(scores, gap_open, 0.0, gap_extend=gap_extend,
                               lengths=batch.lengths)
    return path


def alignment_loss(expected: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Binary cross-entropy of P against the true alignment over each pair's cells,
    divided by the number of true aligned pairs."""
    m = torch.arange(expected.shape[1], device=expected.device)
    n = torch.arange(expected.shape[2], device=expected.device)
    inside = ((m[None, :, None] < batch.lengths[:, 0, None, None])
              & (n[None, None, :] < batch.lengths[:, 1, None, None]))
    p = expected.clamp(1e-6, 1 - 1e-6)
    y = batch.alignment
    cross_entropy = -(y * p.log() + (1 - y) * (1 - p).log())
    return (cross_entropy * inside).sum() / y.sum()


def precision_recall(predicted: torch.Tensor, true: torch.Tensor) -> Tuple[float, float]:
    """Over all pairs together: correct aligned pairs / predicted ones, / true ones."""
    hits = float((predicted * true).sum())
    return hits / max(float(predicted.sum()), 1.0), hits / max(float(true.sum()), 1.0)


# --------------------------------------------------------------------------
# Training.
# --------------------------------------------------------------------------


@dataclass
class Config:
    steps: int = 200
    batch_size: int = 16
    train_pairs: int = 512
    test_pairs: int = 128
    lr: float = 0.1
    temperature: float = 1.0
    eval_every: int = 20
    seed: int = 0
    device: str = "cpu"


@dataclass
class History:
    steps: List[int] = field(default_factory=list)
    loss: List[float] = field(default_factory=list)
    eval_steps: List[int] = field(default_factory=list)
    precision: List[float] = field(default_factory=list)
    recall: List[float] = field(default_factory=list)


def make_data(config: Config, evolution: Evolution = Evolution()) -> Tuple[List[Pair], Batch]:
    """(training pairs, the held-out pairs as one batch on config.device)."""
    gen = torch.Generator().manual_seed(config.seed)
    substitution = substitution_probabilities()
    pairs = [make_pair(gen, evolution, substitution)
             for _ in range(config.train_pairs + config.test_pairs)]
    return pairs[:config.train_pairs], make_batch(pairs[config.train_pairs:]).to(config.device)


def evaluate(model: Aligner, held_out: Batch) -> Tuple[float, float]:
    return precision_recall(model.predict(held_out), held_out.alignment)


def train(model: Aligner, train_pairs: List[Pair], held_out: Batch, config: Config,
          log=print) -> History:
    gen = torch.Generator().manual_seed(config.seed + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    history = History()
    for step in range(1, config.steps + 1):
        if step == 1 or step % config.eval_every == 0:
            precision, recall = evaluate(model, held_out)
            history.eval_steps.append(step - 1)
            history.precision.append(precision)
            history.recall.append(recall)
        chosen = torch.randperm(len(train_pairs), generator=gen)[:config.batch_size].tolist()
        batch = make_batch([train_pairs[k] for k in chosen]).to(config.device)
        loss = alignment_loss(model(batch), batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.steps.append(step)
        history.loss.append(loss.item())
        if step % config.eval_every == 0:
            log(f"  step {step:4d}  loss {loss.item():7.3f}  held-out precision "
                f"{history.precision[-1]:.3f} recall {history.recall[-1]:.3f}")
    precision, recall = evaluate(model, held_out)
    history.eval_steps.append(config.steps)
    history.precision.append(precision)
    history.recall.append(recall)
    return history


# --------------------------------------------------------------------------
# The picture.
# --------------------------------------------------------------------------


def plot(path: str, history: History, before: torch.Tensor, after: torch.Tensor,
         true: torch.Tensor, title: str) -> bool:
    """Learning curve, and one pair's P before and after; False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no picture written to {path} "
              f"(pip install matplotlib)")
        return False
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.4),
                             gridspec_kw=dict(width_ratios=[1.3, 1, 1], wspace=0.35))
    ax = axes[0]
    window = 10
    loss = torch.tensor(history.loss)
    smooth = torch.nn.functional.avg_pool1d(loss[None, None], window, 1).flatten()
    ax.plot(history.steps, history.loss, color="0.8", lw=0.8, label="training loss")
    ax.plot(history.steps[window - 1:], smooth.tolist(), color="C0",
            label=f"training loss, mean of {window} steps")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy of P per true aligned pair")
    ax.set_ylim(bottom=0)
    right = ax.twinx()
    right.plot(history.eval_steps, history.precision, "o-", color="C2", ms=3,
               label="held-out precision")
    right.plot(history.eval_steps, history.recall, "s-", color="C3", ms=3,
               label="held-out recall")
    right.set_ylim(0, 1)
    right.set_ylabel("held-out precision / recall")
    handles, labels = ax.get_legend_handles_labels()
    handles2, labels2 = right.get_legend_handles_labels()
    right.legend(handles + handles2, labels + labels2, loc="center right", fontsize=8)
    ax.set_title("learning curve")
    rows, cols = true.nonzero(as_tuple=True)
    for ax, p, name in ((axes[1], before, "before"), (axes[2], after, "after")):
        image = ax.imshow(p, cmap="Blues", vmin=0, vmax=1, interpolation="nearest")
        # Small dots: the colour of each true cell stays visible around its dot.
        ax.scatter(cols, rows, s=2.5, color="orangered", linewidths=0, label="true alignment")
        ax.set_title(f"one held-out pair: P {name} training")
        ax.set_xlabel("target position j")
        ax.set_ylabel("query position i")
        ax.legend(loc="upper right", fontsize=8, markerscale=4)
    fig.colorbar(image, ax=axes[2], fraction=0.05, pad=0.03, label="P[i, j]")
    fig.suptitle(title, fontsize=11)
    fig.savefig(path, dpi=80, bbox_inches="tight")
    plt.close(fig)
    return True


# --------------------------------------------------------------------------
# Command line.
# --------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    c = Config()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--device", default="auto", help="cpu, cuda, or auto (cuda when available)")
    p.add_argument("--steps", type=int, default=c.steps)
    p.add_argument("--batch-size", type=int, default=c.batch_size)
    p.add_argument("--train-pairs", type=int, default=c.train_pairs)
    p.add_argument("--test-pairs", type=int, default=c.test_pairs)
    p.add_argument("--lr", type=float, default=c.lr)
    p.add_argument("--temperature", type=float, default=c.temperature)
    p.add_argument("--seed", type=int, default=c.seed)
    p.add_argument("--threads", type=int, default=0,
                   help="torch CPU threads (0: torch's default; 1 is faster on a busy machine)")
    p.add_argument("--plot", default="learn_alignment.png", help="PNG to write ('' for none)")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        print("--device cuda: no CUDA device", file=sys.stderr)
        return 2
    config = Config(steps=args.steps, batch_size=args.batch_size, train_pairs=args.train_pairs,
                    test_pairs=args.test_pairs, lr=args.lr, temperature=args.temperature,
                    seed=args.seed, device=device)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    train_pairs, held_out = make_data(config)
    aligned = held_out.alignment.sum(dim=(1, 2))
    print(f"data: {len(train_pairs)} training and {config.test_pairs} held-out pairs, "
          f"query/target lengths up to {held_out.query.shape[1]}/{held_out.target.shape[1]}, "
          f"{float(aligned.mean()):.0f} true aligned pairs per pair "
          f"({time.perf_counter() - t0:.1f} s)")

    blosum = scoring.load_matrix("BLOSUM62")
    index = torch.tensor([blosum.alphabet.index(a) for a in AMINO_ACIDS])
    blosum62 = blosum.scores[index][:, index].float().to(device)
    reference = precision_recall(hard_alignment(
        scoring.scores_from_tokens(held_out.query, held_out.target, blosum62), -11.0, -1.0,
        held_out), held_out.alignment)

    model = Aligner(config.temperature, torch.Generator().manual_seed(config.seed)).to(device)
    shown = 0  # the held-out pair in the picture
    with torch.no_grad():
        p_before = model(held_out)[shown].cpu()
    before = evaluate(model, held_out)
    print(f"device {device}, {config.steps} steps of {config.batch_size} pairs, Adam lr "
          f"{config.lr}, temperature {config.temperature}")
    t1 = time.perf_counter()
    history = train(model, train_pairs, held_out, config)
    seconds = time.perf_counter() - t1
    after = (history.precision[-1], history.recall[-1])
    with torch.no_grad():
        p_after = model(held_out)[shown].cpu()

    print(f"trained in {seconds:.1f} s ({1e3 * seconds / config.steps:.0f} ms per step)")
    print(f"held-out alignment ({config.test_pairs} pairs)    precision  recall")
    print(f"  before training (random matrix)       {before[0]:9.3f}  {before[1]:6.3f}")
    print(f"  after training                        {after[0]:9.3f}  {after[1]:6.3f}")
    print(f"  BLOSUM62, gaps -11/-1 (reference)     {reference[0]:9.3f}  {reference[1]:6.3f}")
    learned = model.substitution().detach().cpu()
    correlation = torch.corrcoef(torch.stack([learned.flatten(), blosum62.cpu().flatten()]))[0, 1]
    print(f"learned gap scores: open {model.gap_open.item():.2f}, extend "
          f"{model.gap_extend.item():.2f}; learned matrix vs BLOSUM62: correlation "
          f"{float(correlation):.2f}")
    if args.plot:
        m, n = held_out.lengths[shown].tolist()
        title = (f"learned substitution matrix and gap scores: held-out precision / recall "
                 f"{before[0]:.2f} / {before[1]:.2f} before, {after[0]:.2f} / {after[1]:.2f} "
                 f"after training (pair shown: {m} x {n})")
        if plot(args.plot, history, p_before[:m, :n], p_after[:m, :n],
                held_out.alignment[shown, :m, :n].cpu(), title):
            print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
