"""examples/learn_alignment.py: its data are consistent and a few training steps of
its model, on the loss of the expected alignment, make the held-out alignments better."""
from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest
import torch

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "learn_alignment.py"


@pytest.fixture(scope="module")
def example():
    if not EXAMPLE.is_file():
        pytest.skip(f"{EXAMPLE} is not in this tree")
    spec = importlib.util.spec_from_file_location("learn_alignment", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_pairs_are_true_alignments(example, gen):
    substitution = example.substitution_probabilities()
    assert torch.allclose(substitution.sum(1), torch.ones(20, dtype=torch.float64))
    for _ in range(20):
        pair = example.make_pair(gen, example.Evolution(), substitution)
        i, j = pair.matched[:, 0], pair.matched[:, 1]
        assert len(pair.matched) > 0
        # A valid alignment: both coordinates strictly increasing, inside the sequences.
        assert bool((i.diff() > 0).all()) and bool((j.diff() > 0).all())
        assert int(i.max()) < len(pair.query) and int(j.max()) < len(pair.target)


def test_pair_without_mutations_is_the_identity(example, gen):
    still = example.Evolution(identity_mix=1.0, insert_rate=0.0, delete_rate=0.0, flank=(0, 0))
    pair = example.make_pair(gen, still, example.substitution_probabilities())
    assert torch.equal(pair.query, pair.target)
    assert torch.equal(pair.matched[:, 0], torch.arange(len(pair.query)))
    assert torch.equal(pair.matched[:, 1], torch.arange(len(pair.query)))


def test_precision_recall(example):
    true = torch.zeros(1, 4, 4)
    true[0, [0, 1, 2], [0, 1, 3]] = 1
    predicted = torch.zeros(1, 4, 4)
    predicted[0, [0, 1, 3], [0, 1, 3]] = 1
    assert example.precision_recall(predicted, true) == (2 / 3, 2 / 3)
    assert example.precision_recall(torch.zeros(1, 4, 4), true) == (0.0, 0.0)


def test_training_improves_held_out_alignments(example):
    config = example.Config(steps=25, batch_size=8, train_pairs=64, test_pairs=24,
                            eval_every=25, seed=3)
    train_pairs, held_out = example.make_data(config)
    model = example.Aligner(config.temperature, torch.Generator().manual_seed(config.seed))
    history = example.train(model, train_pairs, held_out, config, log=lambda _: None)
    first, last = history.loss[:5], history.loss[-5:]
    assert sum(last) < 0.7 * sum(first)
    (precision0, precision1), (recall0, recall1) = (
        (history.precision[0], history.precision[-1]), (history.recall[0], history.recall[-1]))
    assert precision1 > precision0 + 0.3 and recall1 > recall0 + 0.3
    # The learned gap scores moved: gradients reached them through the double backward.
    assert model.gap_open.item() != -1.0 and model.gap_extend.item() != -1.0
