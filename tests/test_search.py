"""softsw.search (all against all), its FASTA reader and the `softsw search` CLI.

The shipped sequences (softsw/data/families.fasta: three protein families,
see softsw/data/README.md) are the real data: every query must rank its own
family's members above all others, and hard-mode scores must equal Biopython's
PairwiseAligner exactly. Random sequences check determinism under every batch
split and the top-k against the full matrix."""
from __future__ import annotations

import bisect
import os
import random

import pytest
import torch

import softsw
import softsw.cli
from softsw import seqsearch
from softsw.fasta import FastaError, parse_fasta, read_fasta
from conftest import DEVICES, CUDA_SKIP

DATA = os.path.join(os.path.dirname(softsw.__file__), "data", "families.fasta")
AMINO = "ACDEFGHIKLMNPQRSTVWY"


@pytest.fixture(scope="module")
def families():
    records = read_fasta(DATA)
    family = [r.description.split()[0] for r in records]
    assert all(f.startswith("family=") for f in family)
    return records, family


def query_subset(records, family):
    """Two queries of each family (the first and the last member)."""
    picked = []
    for f in sorted(set(family)):
        members = [i for i, g in enumerate(family) if g == f]
        picked += [members[0], members[-1]]
    return picked


def random_sequences(rnd, n, lo, hi):
    return ["".join(rnd.choice(AMINO) for _ in range(rnd.randint(lo, hi))) for _ in range(n)]


def rescore(found, matrix, gap_open, gap_extend):
    """Score of the aligned strings: matrix for pairs, a run of k gaps in one
    sequence scores gap_open + (k - 1) * gap_extend."""
    total, run = 0.0, None
    for a, b in zip(found.query_aligned, found.target_aligned):
        if a == "-" or b == "-":
            side = "q" if a == "-" else "t"
            total += gap_extend if run == side else gap_open
            run = side
        else:
            total += matrix[a][b]
            run = None
    return total


# --------------------------------------------------------------------------
# Real data: family ranking, Biopython scores, alignments.
# --------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_family_members_rank_first(device, families):
    records, family = families
    seqs = [r.sequence for r in records]
    queries = query_subset(records, family)
    result = softsw.search([seqs[q] for q in queries], seqs, top=len(seqs), device=device)
    for row, q in enumerate(queries):
        size = family.count(family[q])
        top = [family[t] for t in result.indices[row, :size].tolist()]
        assert top == [family[q]] * size, f"{records[q].name}: top {size} hits {top}"
        assert result.indices[row, 0] == q  # itself: the best score


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gaps", [(-11.0, -1.0), (-4.0, None)], ids=["affine", "linear"])
def test_hard_scores_equal_biopython(device, families, gaps):
    Bio = pytest.importorskip("Bio")  # noqa: F841
    from Bio import Align
    from Bio.Align import substitution_matrices
    records, family = families
    seqs = [r.sequence for r in records]
    queries = [seqs[q] for q in query_subset(records, family)]
    gap_open, gap_extend = gaps
    aligner = Align.PairwiseAligner(
        mode="local", substitution_matrix=substitution_matrices.load("BLOSUM62"),
        open_gap_score=gap_open,
        extend_gap_score=gap_open if gap_extend is None else gap_extend)
    want = torch.tensor([[aligner.score(q, t) for t in seqs] for q in queries],
                        dtype=torch.float32)
    got = softsw.search(queries, seqs, gap_open=gap_open, gap_extend=gap_extend, top=None,
                        device=device).scores
    assert torch.equal(got, want), f"{int((got != want).sum())} scores differ from Biopython"


@pytest.mark.parametrize("device", DEVICES)
def test_hit_alignments(device, families):
    """Every hit's alignment rescores to its score exactly, its strings are
    the sequences' aligned parts, and its identities count equal letters."""
    from softsw.scoring import load_matrix
    records, family = families
    seqs = [r.sequence for r in records]
    queries = [seqs[q] for q in query_subset(records, family)]
    m = load_matrix("BLOSUM62")
    matrix = {a: {b: float(m.scores[i, j]) for j, b in enumerate(m.alphabet)}
              for i, a in enumerate(m.alphabet)}
    result = softsw.search(queries, seqs, top=4, alignments=True, device=device)
    assert len(result.alignments) == len(queries)
    for q, t, score, found in result.hits():
        assert found.score == score
        assert rescore(found, matrix, -11.0, -1.0) == score, (q, t)
        assert found.query_aligned.replace("-", "") == \
            queries[q][found.query_start:found.query_end]
        assert found.target_aligned.replace("-", "") == seqs[t][found.target_start:found.target_end]
        same = sum(a == b and a != "-" for a, b in zip(found.query_aligned, found.target_aligned))
        assert found.identities == same and found.length == len(found.query_aligned)
    self_hit = result.alignments[0][0]
    assert self_hit.identity == 1.0 and self_hit.query_end - self_hit.query_start == len(queries[0])


# --------------------------------------------------------------------------
# Determinism, top-k, embeddings.
# --------------------------------------------------------------------------


# (temperature, gap_extend, dtype). The CPU's float32 linear-gap soft forward
# computes a pair that is alone in its SIMD group with the scalar loop, whose
# float32 exp/log round differently in the last bit: there a pair's score
# depends on the batch around it, so the case runs on CUDA only.
SPLIT_MODES = [
    pytest.param((0.0, -1.0, torch.float32), id="hard"),
    pytest.param((1.0, -1.0, torch.float32), id="soft-affine"),
    pytest.param((1.0, None, torch.float64), id="soft-linear-fp64"),
    pytest.param((1.0, None, torch.float32), id="soft-linear-fp32"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", SPLIT_MODES)
def test_same_hits_whatever_the_batch_split(device, seed, mode):
    temperature, gap_extend, dtype = mode
    if device == "cpu" and temperature and gap_extend is None and dtype == torch.float32:
        pytest.skip("CPU float32 linear soft forward: the lone-pair scalar path and the SIMD "
                    "group path differ in the last bit")
    rnd = random.Random(seed)
    queries = random_sequences(rnd, 13, 1, 90)
    targets = random_sequences(rnd, 29, 1, 120)
    queries[3] = random_sequences(rnd, 1, 60, 90)[0]
    targets[5] = targets[17] = queries[3]  # exact ties: ordered by target index
    kwargs = dict(gap_open=-3.0, gap_extend=gap_extend, temperature=temperature, top=6,
                  device=device, dtype=dtype, alignments=temperature == 0)
    runs = [softsw.search(queries, targets, **kwargs)]
    for cells in (120 * 90, 15_000, 40_000, 333_333):  # 120 * 90: the largest pair
        runs.append(softsw.search(queries, targets, batch_cells=cells, **kwargs))
    # A budget that splits the batch into many calls and still holds the
    # largest pair with its workspace in each call in flight (CUDA keeps two):
    # 200 kB in float32, twice that in float64 (8-byte scores, edges and state).
    budget = 200_000 * (2 if dtype == torch.float64 else 1)
    runs.append(softsw.search(queries, targets, memory_budget=budget, **kwargs))
    for other in runs[1:]:
        assert torch.equal(other.scores, runs[0].scores)
        assert torch.equal(other.indices, runs[0].indices)
        assert other.alignments == runs[0].alignments
    # Query 3's two copies score best and tie: the lower index first.
    assert runs[0].indices[3, :2].tolist() == [5, 17]


@pytest.mark.parametrize("device", DEVICES)
def test_top_k_is_the_sorted_full_matrix(device, seed):
    rnd = random.Random(seed)
    queries = random_sequences(rnd, 9, 1, 60)
    targets = random_sequences(rnd, 21, 1, 60)
    full = softsw.search(queries, targets, top=None, gap_open=-2.0, gap_extend=-0.5,
                         batch_cells=4000, device=device)
    assert full.indices is None and full.scores.shape == (9, 21)
    best = softsw.search(queries, targets, top=5, gap_open=-2.0, gap_extend=-0.5,
                         batch_cells=3600, device=device)  # 60 x 60: the largest pair
    for q in range(9):
        order = sorted(range(21), key=lambda t: (-full.scores[q, t].item(), t))[:5]
        assert best.indices[q].tolist() == order
        assert torch.equal(best.scores[q], full.scores[q, order])
    # Each entry is the pair's align() score.
    one = softsw.scoring.score_matrix(queries[2], targets[7], device=device)
    assert full.scores[2, 7] == softsw.align(one, -2.0, 0.0, gap_extend=-0.5).cpu()
    assert softsw.search(queries, targets[:3], top=10, device=device).scores.shape == (9, 3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("similarity", ["dot", "cosine"])
def test_embeddings(device, gen, similarity):
    """(L, D) embeddings: each score is align() of the pair's similarity matrix."""
    dims = 6
    queries = [torch.randn(n, dims, generator=gen, dtype=torch.float64) for n in (4, 17, 9)]
    targets = [torch.randn(n, dims, generator=gen, dtype=torch.float64)
               for n in (11, 3, 25, 8, 16)]
    full = softsw.search(queries, targets, similarity=similarity, gap_open=-1.0,
                         gap_extend=-0.3, temperature=0.5, top=None, device=device,
                         batch_cells=700)
    assert full.scores.dtype == torch.float64
    for q, a in enumerate(queries):
        for t, b in enumerate(targets):
            if similarity == "cosine":
                a_, b_ = (torch.nn.functional.normalize(x, dim=1) for x in (a, b))
            else:
                a_, b_ = a, b
            want = softsw.align((a_ @ b_.T).to(device), -1.0, 0.5, gap_extend=-0.3).cpu()
            torch.testing.assert_close(full.scores[q, t], want, rtol=1e-12, atol=1e-12)


def test_ranks_share_the_calls(seed):
    """Under torch.distributed each kernel call goes to exactly one rank, and
    the ranks' cells differ by at most the largest call."""
    rnd = random.Random(seed)
    lengths = lambda n: [rnd.randint(1, 300) for _ in range(n)]  # noqa: E731
    sets = stub_sets(lengths(40), lengths(70))
    calls = seqsearch._plan(sets[0], sets[1], 200_000)
    for world in (2, 3, 5):
        shares = [seqsearch._share(calls, r, world) for r in range(world)]
        ids = sorted(id(c) for share in shares for c in share)
        assert ids == sorted(id(c) for c in calls)
        loads = [sum(c.cells for c in share) for share in shares]
        assert max(loads) - min(loads) <= max(c.cells for c in calls)
    pairs = [(q, t) for c in calls for q in c.q_index.tolist() for t in c.t_index.tolist()]
    assert sorted(pairs) == [(q, t) for q in range(40) for t in range(70)]


def stub_sets(*lengths):
    """_Set stand-ins with lengths only (all that the planning reads)."""
    sets = [seqsearch._Set.__new__(seqsearch._Set) for _ in lengths]
    for s, n in zip(sets, lengths):
        s.lengths = torch.tensor(n, dtype=torch.int64)
    return sets


def test_plan_covers_each_pair_once_in_its_orientation(seed):
    """Every pair is in exactly one call; a call pairs one length bucket of
    queries (lengths within 10 % or 8 residues) with one of targets, keeps
    within batch_cells and the byte budget, and puts the targets on the rows
    exactly when the pair's query length falls in a longer bucket."""
    rnd = random.Random(seed)
    q_len = [rnd.randint(0, 400) for _ in range(37)]
    t_len = [rnd.randint(0, 400) for _ in range(53)]
    queries, targets = stub_sets(q_len, t_len)
    footprint = seqsearch._footprint(torch.float32, alphabet_size=24)
    starts = seqsearch._grid(400)
    bucket = lambda n: bisect.bisect_right(starts, n) - 1  # noqa: E731
    calls = seqsearch._plan(queries, targets, 200_000, footprint, 1_600_000)
    seen = []
    for c in calls:
        assert c.cells <= 200_000
        assert footprint.call(*c.items, c.rows, c.cols) <= 1_600_000
        for index, lengths, width, (start, stop) in ((c.q_index, q_len, c.q_width, c.q_span),
                                                     (c.t_index, t_len, c.t_width, c.t_span)):
            assert index.tolist() == seqsearch._order(torch.tensor(lengths))[start:stop].tolist()
            picked = [lengths[i] for i in index.tolist()]  # padded to the bucket's longest
            assert max(picked) <= width and (width in lengths or width == 1)
            assert width - min(picked) <= max(min(picked) // 10, 8)
        for q in c.q_index.tolist():
            for t in c.t_index.tolist():
                assert c.transposed == (bucket(q_len[q]) > bucket(t_len[t]))
                seen.append((q, t))
    assert sorted(seen) == [(q, t) for q in range(37) for t in range(53)]
    assert any(c.transposed for c in calls) and not all(c.transposed for c in calls)
    first = seqsearch._largest_first(calls, 2)  # each stream's first call: its largest
    assert sorted(map(id, first)) == sorted(map(id, calls))
    assert [c.cells for c in first[:2]] == sorted((c.cells for c in calls), reverse=True)[:2]
    with pytest.raises(ValueError, match="raise `memory_budget` or `batch_cells`"):
        seqsearch._plan(queries, targets, 200_000, footprint, 500_000)


@pytest.mark.parametrize("device", DEVICES)
def test_transposed_blocks_score_like_align(device, seed):
    """Long queries against short targets run with the targets on the rows:
    each score is align() of the query-by-target matrix, exactly in hard
    mode and to float32 rounding in soft mode (the sums run in another order).
    The substitution matrix is not symmetric: a transposed block must read
    it transposed."""
    rnd = random.Random(seed)
    queries = random_sequences(rnd, 4, 150, 220)
    targets = random_sequences(rnd, 5, 5, 60) + random_sequences(rnd, 3, 260, 300)
    blosum = softsw.scoring.load_matrix("BLOSUM62")
    gen = torch.Generator().manual_seed(seed)
    matrix = (blosum.alphabet, blosum.scores + torch.randint(0, 3, blosum.scores.shape,
                                                             generator=gen).double())
    assert not torch.equal(matrix[1], matrix[1].T)
    job = seqsearch._job(queries, targets, device=device, batch_cells=150_000)
    assert any(c.transposed for c in job.calls) and not all(c.transposed for c in job.calls)
    # The CPU gathers into one buffer, call after call; CUDA allocates per call.
    assert (job.buffer(job.calls) is not None) == (device == "cpu")
    for temperature in (0.0, 1.0):
        full = softsw.search(queries, targets, matrix=matrix, top=None, gap_open=-5.0,
                             gap_extend=-1.0, temperature=temperature, device=device,
                             batch_cells=150_000)
        for q, a in enumerate(queries):
            for t, b in enumerate(targets):
                one = softsw.scoring.score_matrix(a, b, matrix, device=device)
                want = softsw.align(one, -5.0, temperature, gap_extend=-1.0).cpu()
                if temperature == 0:
                    assert full.scores[q, t] == want, (q, t)
                else:
                    torch.testing.assert_close(full.scores[q, t], want)


@pytest.mark.parametrize("device", DEVICES)
def test_half_scores_give_float32_scores(device, seed):
    """float16 score matrices (what CUDA searches build from a matrix of
    small integers) score every pair as float32 ones do, to the bit, in
    every mode: the kernel's float32 total, unscaled as the kernel does."""
    gen = torch.Generator().manual_seed(seed)
    s = torch.randint(-4, 12, (6, 40, 50), generator=gen).float().to(device)
    lengths = torch.tensor([[40, 50], [30, 20], [1, 50], [0, 3], [40, 1], [17, 33]],
                           device=device)
    for temperature in (0.0, 1.0, 0.3):
        for reduction in ("max", "soft"):
            for gap_extend in (-1.0, None):
                kernel = seqsearch._scorer(-3.0, gap_extend, temperature, reduction)
                want = kernel(s, lengths)
                got = kernel(s.half(), lengths)
                assert got.dtype == torch.float32
                assert torch.equal(got, want), (temperature, reduction, gap_extend)
    rnd = random.Random(seed)
    queries = random_sequences(rnd, 6, 1, 120)
    targets = random_sequences(rnd, 9, 1, 150)
    for temperature in (0.0, 1.0):
        kw = dict(top=4, temperature=temperature, device=device, batch_cells=20_000)
        half = seqsearch._job(queries, targets, half_scores=True, **kw)
        assert half.call_matrix.dtype == torch.float16
        one, other = (seqsearch._run(half),
                      seqsearch._run(seqsearch._job(queries, targets, half_scores=False, **kw)))
        assert torch.equal(one.scores, other.scores) and torch.equal(one.indices, other.indices)
    halves = (softsw.scoring.load_matrix("BLOSUM62").alphabet, torch.full((24, 24), 0.1))
    assert seqsearch._job(queries, targets, matrix=halves, half_scores=True,
                          device=device).call_matrix.dtype == torch.float32


@CUDA_SKIP
def test_cuda_streams_give_one_streams_results():
    """Kernel calls on two or three CUDA streams (merges chained by events)
    give what one stream gives, top-k and full matrix; hard scores equal the
    CPU's."""
    rnd = random.Random(0)
    queries = random_sequences(rnd, 30, 1, 300)
    targets = random_sequences(rnd, 50, 1, 300)
    for top in (5, None):
        kw = dict(top=top, gap_open=-4.0, gap_extend=-1.0, device="cuda", batch_cells=100_000)
        one = seqsearch._run(seqsearch._job(queries, targets, in_flight=1, **kw))
        assert len(seqsearch._job(queries, targets, **kw).calls) > 20
        for n in (2, 3):
            other = seqsearch._run(seqsearch._job(queries, targets, in_flight=n, **kw))
            assert torch.equal(other.scores, one.scores)
            assert (other.indices is None) == (one.indices is None)
            if top is not None:
                assert torch.equal(other.indices, one.indices)
        cpu = softsw.search(queries, targets, **{**kw, "device": "cpu"})
        assert torch.equal(cpu.scores, one.scores)


@CUDA_SKIP
def test_cuda_memory_within_budget():
    """Peak CUDA memory of a search stays within its memory_budget."""
    rnd = random.Random(0)
    queries = random_sequences(rnd, 40, 50, 400)
    targets = random_sequences(rnd, 60, 50, 400)
    budget = 64 << 20
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    softsw.search(queries, targets, top=5, device="cuda", memory_budget=budget)
    torch.cuda.synchronize()
    used = torch.cuda.max_memory_allocated() - before
    assert used <= budget, f"peak {used} bytes > budget {budget}"


def test_errors():
    with pytest.raises(TypeError, match="`queries`"):
        softsw.search("ACDE", ["ACDE"])
    with pytest.raises(ValueError, match="`top`"):
        softsw.search(["ACDE"], ["ACDE"], top=0)
    with pytest.raises(ValueError, match="`alignments=True` needs hard mode"):
        softsw.search(["ACDE"], ["ACDE"], temperature=1.0, alignments=True)
    with pytest.raises(ValueError, match="`memory_budget`"):
        softsw.search(["ACDE"], ["ACDE"], memory_budget=1.5)
    with pytest.raises(ValueError, match="raise `memory_budget` or `batch_cells`"):
        softsw.search(["A" * 100], ["C" * 100], batch_cells=5000, device="cpu")
    with pytest.raises(ValueError, match="letter 'J'"):
        softsw.search(["ACJE"], ["ACDE"], device="cpu")
    assert softsw.search(["ACJE"], ["ACDE"], unknown="X", device="cpu").scores.shape == (1, 1)
    with pytest.raises(TypeError, match="both be sequences or both be embeddings"):
        softsw.search(["ACDE"], [torch.randn(3, 2)], device="cpu")
    with pytest.raises(ValueError, match="`similarity`"):
        softsw.search(["ACDE"], ["ACDE"], similarity="l2")
    empty = softsw.search([], ["ACDE"], device="cpu")
    assert empty.scores.shape == (0, 1)


# --------------------------------------------------------------------------
# FASTA and the CLI.
# --------------------------------------------------------------------------


def test_fasta_reader():
    records = parse_fasta(">a first one\nACD\nef*\n\n>b\n  GH IK \n")
    assert records == [("a", "first one", "ACDEF*"), ("b", "", "GHIK")]
    for text, message in [
            ("ACD\n>a\nAC\n", "<string>:1: sequence data before the first '>'"),
            (">a\nAC\n>\nAC\n", "<string>:3: header line without a name"),
            (">a\nAC\n>b\n>c\nA\n", "<string>:3: record 'b' has no sequence"),
            (">a\nAC-D\n", "<string>:2: column 3: '-' in record 'a' is an alignment gap"),
            (">a\nAC\nAC1D\n", "<string>:3: column 3: '1' in record 'a' is not a residue"),
            ("\n\n", "<string>: no FASTA records")]:
        with pytest.raises(FastaError, match=message):
            parse_fasta(text)


def test_cli_search(tmp_path, families, capsys):
    records, family = families
    queries = tmp_path / "q.fasta"
    with open(DATA) as handle:
        text = handle.read()
    chunks = text.split(">")[1:]
    queries.write_text(">" + chunks[2] + ">" + chunks[14])  # a LuxC and a type III PKS
    out = tmp_path / "hits.tsv"
    rc = softsw.cli.main(["search", str(queries), DATA, "--top", "3", "-o", str(out),
                          "--device", "cpu", "--batch-cells", "300000", "--no-progress"])
    assert rc == 0
    lines = out.read_text().splitlines()
    assert lines[0] == "# " + "\t".join(seqsearch.TSV_COLUMNS)
    rows = [line.split("\t") for line in lines[1:]]
    assert len(rows) == 6 and all(len(r) == len(seqsearch.TSV_COLUMNS) for r in rows)
    by_name = {r.name: r for r in records}
    for row in rows[:3]:
        assert row[0] == records[2].name and by_name[row[1]].description.startswith(
            "family=LuxC")
    assert rows[0][1] == records[2].name and rows[0][3] == "100.00"
    qlen = len(records[2].sequence)
    assert rows[0][6:12] == ["1", str(qlen), "1", str(qlen), str(qlen), str(qlen)]

    bad = tmp_path / "bad.fasta"
    bad.write_text(">x\nACDE\nAC#E\n")
    rc = softsw.cli.main(["search", str(bad), DATA, "--device", "cpu"])
    assert rc == 2
    assert f"{bad}:3: column 3: '#'" in capsys.readouterr().err


def test_progress_bar(capsys):
    pytest.importorskip("tqdm")
    softsw.search(["ACDEFG", "HIKL"], ["ACDE", "KLMN", "PQ"], device="cpu", progress=True)
    assert "softsw search" in capsys.readouterr().err
    softsw.search(["ACDEFG"], ["ACDE"], device="cpu", progress=False)
    assert capsys.readouterr().err == ""


def test_search_benchmark_runs(tmp_path):
    """benchmarks/search_bench.py on a few short proteins (what it reports is
    checked by its own runs; here: it runs and writes its JSON)."""
    import importlib.util
    import json
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "benchmarks", "search_bench.py")
    if not os.path.exists(path):
        pytest.skip("benchmarks/ is not next to tests/")
    spec = importlib.util.spec_from_file_location("search_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "bench.json"
    bench.main(["--device", "cpu", "--n", "6", "--min-length", "5", "--max-length", "40",
                "--json", str(out)])
    report = json.loads(out.read_text())
    assert set(report["modes"]) == {"hard", "soft"}
    assert all(m["search_cells_per_s"] > 0 and m["ratio"] > 0 for m in report["modes"].values())


def test_cli_soft_mode(tmp_path):
    queries = tmp_path / "q.fasta"
    queries.write_text(">q1\nMKTAYIAKQRQISFVKSHFSRQ\n")
    targets = tmp_path / "t.fasta"
    targets.write_text(">t1\nMKTAYIAKQR\n>t2\nGGGGSSSS\n>t3\nQISFVKSHFS\n")
    out = tmp_path / "hits.tsv"
    assert softsw.cli.main(["search", str(queries), str(targets), "--temperature", "1",
                            "--gap-extend", "-1", "--top", "2", "-o", str(out),
                            "--device", "cpu", "--no-progress"]) == 0
    rows = [line.split("\t") for line in out.read_text().splitlines()[1:]]
    want = softsw.search(["MKTAYIAKQRQISFVKSHFSRQ"], ["MKTAYIAKQR", "GGGGSSSS", "QISFVKSHFS"],
                         temperature=1.0, top=2, device="cpu")
    names = ["t1", "t2", "t3"]
    assert [r[1] for r in rows] == [names[i] for i in want.indices[0].tolist()]
    assert [float(r[2]) for r in rows] == pytest.approx(want.scores[0].tolist(), rel=1e-5)
    assert all(r[3:10] == ["."] * 7 for r in rows)
