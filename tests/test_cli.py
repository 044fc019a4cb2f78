"""The command line: `softsw` subcommands and the demo's options, errors and picture."""
import pytest
import torch

import softsw
from softsw import cli, demo

SMALL = ["--query", "HEAGAWGHEE", "--target", "PAWHEAE"]


def test_cli_lists_subcommands(capsys):
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    for name in cli.SUBCOMMANDS:
        assert f"  {name} " in out


def test_cli_rejects_unknown_subcommand(capsys):
    assert cli.main(["nope"]) == 2
    assert "unknown subcommand 'nope'" in capsys.readouterr().err


def test_cli_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"softsw {softsw.__version__}"


def test_cli_runs_the_demo(capsys):
    assert cli.main(["demo", *SMALL, "--temperature", "0"]) == 0
    out = capsys.readouterr().out
    # HEAGAWGHEE / PAWHEAE, BLOSUM62, linear gap -4: the hard score is 25 (README).
    assert "softsw score                          25" in out


@pytest.mark.parametrize("args,message", [
    (["--top", "-3"], "--top must be a positive number of pairs, got -3"),
    (["--top", "0"], "--top must be a positive number of pairs, got 0"),
    (["--gap-open", "nan"], "--gap-open must be a finite number"),
    (["--gap-extend", "inf"], "--gap-extend must be a finite number"),
    (["--temperature", "-1"], "--temperature must be a finite number >= 0"),
    (["--query", "HEAJ"], "--query: letter 'J' at position 4 is not in the alphabet of BLOSUM62"),
    (["--target", "PJ"], "pass --unknown X to score such letters as X"),
    (["--unknown", "1"], "--unknown must be one letter of the alphabet of BLOSUM62"),
    (["--matrix", "NO_SUCH_MATRIX"], "--matrix: unknown substitution matrix"),
    (["--device", "tpu"], "--device must be cpu, cuda or cuda:N, got 'tpu'"),
    (["--plot", "picture.jpg"], "--plot: 'picture.jpg' must end in .png, .pdf or .svg"),
    (["--plot", "/no/such/folder/x.png"], "--plot: the folder '/no/such/folder' does not exist"),
    (["--query=  "], "--query must have at least one letter"),
])
def test_demo_rejects_bad_options_in_cli_words(capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        demo.main(SMALL + args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "unknown='X'" not in err  # the Python API's wording, not the command line's


def test_demo_unknown_letter_scored_as_x(capsys):
    assert demo.main(["--query", "HEAJJ", "--target", "PAWHEAE", "--unknown", "x",
                      "--temperature", "0"]) == 0
    assert "softsw score" in capsys.readouterr().out


def test_demo_explains_positive_gap_scores(capsys):
    assert demo.main(SMALL + ["--gap-open", "4", "--temperature", "0"]) == 0
    out = capsys.readouterr().out
    assert "a positive gap score adds to a path's score" in out


def test_demo_top_lists_that_many_pairs(capsys):
    assert demo.main(SMALL + ["--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "The 3 most probable matched pairs" in out
    table = out.split("The 3 most probable matched pairs")[1].split("\n\n")[0]
    assert len([line for line in table.splitlines() if line.strip().endswith(("yes", "no"))]) == 3


def test_residue_ticks():
    assert demo._residue_ticks("PAW") == ([0, 1, 2], ["P", "A", "W"])
    seq = "M" + "A" * 99 + "W" * 46  # 146 residues: a label every 10th position
    positions, labels = demo._residue_ticks(seq)
    assert positions[:3] == [0, 9, 19] and labels[:3] == ["M1", "A10", "A20"]
    assert labels[-1] == "W140"


def test_demo_plot_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "alignment.png"
    assert demo.main(SMALL + ["--plot", str(path)]) == 0
    assert f"Wrote {path}" in capsys.readouterr().out
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_alignment_draws_the_expected_alignment_and_the_path(tmp_path, monkeypatch):
    matplotlib_figure = pytest.importorskip("matplotlib.figure")
    drawn = {}
    original_savefig = matplotlib_figure.Figure.savefig

    def savefig(fig, path, *args, **kwargs):
        ax = fig.axes[0]
        drawn["image"] = ax.get_images()[0].get_array()
        drawn["line"] = ax.get_lines()[0].get_xydata()
        drawn["colorbar"] = fig.axes[1].get_ylabel()
        drawn["xticks"] = [t.get_text() for t in ax.get_xticklabels()]
        return original_savefig(fig, path, *args, **kwargs)

    monkeypatch.setattr(matplotlib_figure.Figure, "savefig", savefig)
    expected = torch.tensor([[0.9, 0.1, 0.0], [0.0, 0.2, 0.7]])
    demo.plot_alignment(str(tmp_path / "a.png"), expected, [(0, 0), (1, 2)], "AB", "CDE",
                        title="t")
    assert torch.equal(torch.as_tensor(drawn["image"]), expected.double())
    assert drawn["line"].tolist() == [[0, 0], [2, 1]]  # (column = target, row = query)
    assert drawn["xticks"] == ["C", "D", "E"]
    assert "d score / d S" in drawn["colorbar"]
