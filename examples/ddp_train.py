"""Train a model whose loss goes through softsw with DistributedDataParallel.

    torchrun --nproc_per_node 2 examples/ddp_train.py      # 2 processes (gloo on CPU, nccl on GPUs)
    python examples/ddp_train.py                           # the same training in one process

The model learns residue embeddings, a bilinear similarity and affine gap
scores so that the soft Smith-Waterman score of two proteins tells whether
they belong to the same family (softsw/data/families.fasta: real proteins of
three families). Each step draws one global batch of pairs; with N processes,
rank r trains on the r-th of N equal slices, and DDP averages the gradients:
the same gradients (to float64 rounding) as one process on the whole batch,
which tests/test_distributed.py checks.
"""
from __future__ import annotations

import argparse
import math
import os
import random

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import softsw
from softsw.fasta import read_fasta
from softsw.scoring import encode

ALPHABET = "ARNDCQEGHILKMFPSTWYVBZX*"
DATA = os.path.join(os.path.dirname(softsw.__file__), "data", "families.fasta")


class PairScorer(torch.nn.Module):
    """logit(same family) = scale * softSW(E(q) W E(t)^T / sqrt(D)) + bias."""

    def __init__(self, dim: int = 8, temperature: float = 1.0):
        super().__init__()
        kw = dict(dtype=torch.float64)
        self.embed = torch.nn.Embedding(len(ALPHABET), dim, **kw)
        self.mix = torch.nn.Linear(dim, dim, bias=False, **kw)
        self.gap_open = torch.nn.Parameter(torch.tensor(-1.5, **kw))
        self.gap_extend = torch.nn.Parameter(torch.tensor(-0.5, **kw))
        self.scale = torch.nn.Parameter(torch.tensor(0.1, **kw))
        self.bias = torch.nn.Parameter(torch.tensor(-1.0, **kw))
        self.temperature = temperature

    def forward(self, q_tokens, t_tokens, lengths):
        a = self.mix(self.embed(q_tokens.clamp(min=0)))  # padding: any row, never scored
        b = self.embed(t_tokens.clamp(min=0))
        scores = a @ b.transpose(1, 2) / math.sqrt(a.shape[-1])
        sw = softsw.align(scores, self.gap_open, self.temperature, gap_extend=self.gap_extend,
                          lengths=lengths)
        return self.scale * sw + self.bias


def load_pairs(max_length: int):
    """(tokens (S, L), lengths (S,), family id (S,)) of the shipped sequences,
    cut to their first `max_length` residues."""
    records = read_fasta(DATA)
    families = sorted({r.description.split()[0] for r in records})
    tokens, lengths = encode([r.sequence[:max_length] for r in records], ALPHABET)
    family = torch.tensor([families.index(r.description.split()[0]) for r in records])
    return tokens, lengths, family


def global_batch(step: int, batch: int, n_seqs: int, family):
    """`batch` (query, target) index pairs for `step`, half from one family:
    the same on every rank."""
    rnd = random.Random(1000 + step)
    pairs = []
    while len(pairs) < batch:
        q = rnd.randrange(n_seqs)
        same = [t for t in range(n_seqs) if family[t] == family[q] and t != q]
        other = [t for t in range(n_seqs) if family[t] != family[q]]
        pairs.append((q, rnd.choice(same if len(pairs) % 2 == 0 else other)))
    return pairs


def train(rank: int = 0, world: int = 1, *, steps: int = 5, batch: int = 16,
          max_length: int = 64, lr: float = 0.05, device: str = "cpu", log=None):
    """Trains `steps` SGD steps; returns each step's gradients (a dict of
    parameter name -> tensor, after DDP's averaging) and the final parameters."""
    if batch % world:
        raise ValueError(f"batch {batch} must be a multiple of the number of processes {world}")
    torch.manual_seed(0)  # the same initial parameters everywhere
    model = PairScorer().to(device)
    net = DistributedDataParallel(model) if world > 1 else model
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    tokens, lengths, family = load_pairs(max_length)
    history = []
    for step in range(steps):
        pairs = global_batch(step, batch, len(tokens), family)
        share = batch // world
        mine = pairs[rank * share:(rank + 1) * share]
        q = torch.tensor([p[0] for p in mine])
        t = torch.tensor([p[1] for p in mine])
        label = (family[q] == family[t]).to(torch.float64).to(device)
        pair_lengths = torch.stack([lengths[q], lengths[t]], 1).to(device)
        logit = net(tokens[q].to(device), tokens[t].to(device), pair_lengths)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, label)
        optimizer.zero_grad()
        loss.backward()  # DDP: the gradients are averaged over the ranks here
        history.append({n: p.grad.detach().clone().cpu() for n, p in model.named_parameters()})
        optimizer.step()
        if log is not None:
            log(f"step {step}: loss {loss.item():.4f} (rank {rank} of {world})")
    params = {n: p.detach().clone().cpu() for n, p in model.named_parameters()}
    return history, params


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=64)
    args = parser.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    device = "cpu"
    if world > 1:
        if torch.cuda.is_available():
            local = int(os.environ.get("LOCAL_RANK", "0"))
            torch.cuda.set_device(local)
            device = f"cuda:{local}"
        dist.init_process_group("nccl" if device != "cpu" else "gloo")
    elif torch.cuda.is_available():
        device = "cuda"
    try:
        train(rank, world, steps=args.steps, batch=args.batch, max_length=args.max_length,
              device=device, log=print if rank == 0 else None)
    finally:
        if world > 1:
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
