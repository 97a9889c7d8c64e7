"""benchmarks/report.py: the paired rule and Holm's correction against hand computation and
Student's t table, the verdict lines and their count on hand-made results, the activity columns
against the records, each ablation row's controls; and the tables README.md and docs/results.md
show are exactly the report's, rebuilt from the committed records."""

from __future__ import annotations

import math
import re
import shlex
import shutil
from pathlib import Path

import pytest

from benchmarks import report
from benchmarks.__main__ import build_parser, main, settings
from benchmarks.recorder import read_records
from benchmarks.runner import read_results
from benchmarks.runs import FAMILIES, Row, controls, parse_row, row_of

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "benchmarks" / "results" / "reference"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("ref") / "reference"
    shutil.copytree(REFERENCE / "runs", out / "runs")
    assert main(["--preset", "reference", "--report-only", "--out", str(out)]) == 0
    assert (out / "results.png").is_file() and (out / "curves.png").is_file()
    return (out / "results.md").read_text()


def _section(text: str, title: str) -> str:
    return text.split(f"## {title}\n")[1].split("\n## ")[0]


def test_the_committed_results_md_is_the_reports(rebuilt: str) -> None:
    committed = (REFERENCE / "results.md").read_text()
    for title in ("Summary", "Runs", "Regime", "Verdicts"):
        assert _section(rebuilt, title).strip() == _section(committed, title).strip(), title


def test_readme_and_results_doc_hold_exactly_the_reports_tables() -> None:
    runs = settings(build_parser().parse_args(["--preset", "reference"])).runs()
    lines = report.aggregate(read_results(REFERENCE, runs))
    assert report.summary_table(lines) in (ROOT / "README.md").read_text()
    results = (ROOT / "docs" / "results.md").read_text()
    regime = _section(report.regime_markdown(lines), "Regime")
    table = "\n".join(ln for ln in regime.splitlines() if ln.startswith("|"))
    assert table in results
    for line in report.verdicts_markdown(lines, FAMILIES).splitlines():  # the rest: REFERENCE's
        if line.startswith(("- ", "| ")):
            assert line in results, line
    two = [ln for ln in report.two_by_two_markdown(lines).splitlines() if ln.startswith("|")]
    assert "\n".join(two) in (ROOT / "README.md").read_text() and "\n".join(two) in results
    # the 2x2's rows are what they say: R 1.00 where balanced, 1.33 where not (the paper's R)
    cells = {ln.split(" | ")[0][2:]: ln.split(" | ")[1:] for ln in two[2:]}
    assert all("R 1.00" in c for c in cells["balanced"]) and "R 1.33" in cells["unbalanced"][0]


def test_every_markdown_table_has_as_many_cells_as_its_header() -> None:
    for path in DOCS:
        width = None
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.startswith("|"):
                width = None
                continue
            cells = len(re.split(r"(?<!\\)\|", line.strip())) - 2
            width = width or cells
            assert cells == width, f"{path.name}:{number}: {cells} cells under {width}"


def test_every_benchmark_command_in_the_docs_parses() -> None:
    for path in DOCS:
        text = re.sub(r"\\\n\s*", " ", path.read_text())  # shell line continuations
        for command in re.findall(r"python3 -m benchmarks((?: [^`\n]*)?)", text):
            argv = shlex.split(command.split(" -- ")[0])
            try:
                build_parser().parse_args(argv)
            except SystemExit:
                pytest.fail(f"{path.name}: `python3 -m benchmarks{command}` does not parse")


def test_paired_statistics_by_hand_and_t_table() -> None:
    got = report.paired({0: 3.0, 1: 5.0, 2: 7.0, 9: 1.0}, {0: 2.0, 1: 3.0, 2: 4.0})
    # differences 1, 2, 3: mean 2, std 1, t = 2 / (1 / sqrt 3), half-width t_0.975,2 / sqrt 3;
    # two-sided p of t = 3.4641 at 2 degrees of freedom (Student's table): 0.0742
    want = {"n": 3, "mean": 2.0, "std": 1.0, "t": 2 * math.sqrt(3), "half": 4.302653 / math.sqrt(3)}
    assert {k: got[k] for k in want} == pytest.approx(want)
    assert got["p"] == pytest.approx(0.0742, abs=5e-4)
    assert report.paired({0: 1.0}, {0: 0.0}) is None


def test_holm_steps_down_until_the_first_failure() -> None:
    assert report.holm([0.01, 0.04, 0.03]) == [True, False, False]  # 0.03 > 0.05 / 2
    assert report.holm([0.01, 0.02, 0.04]) == [True, True, True]  # 0.0167, 0.025, 0.05
    assert report.holm([0.2, 0.001]) == [False, True]


def _result(row, seed, lin):
    result = dict(key=f"{row.key}/{seed}", label=row.label, comparison=row.comparison, seed=seed)
    result.update(status="ok", offline_acc1=lin, offline_knn_acc1=lin, error="", epochs=2)
    return dict(result, settings=list(row.overrides), method=row.method)


def test_verdict_lines_follow_the_paired_rule_and_are_counted() -> None:
    off = Row("attentionnce_off", 4)
    row = parse_row("d_pos=1,d_neg=1", 4)
    noisy, one = parse_row("d_pos=1,d_neg=0.3", 4), parse_row("d_pos=1,d_neg=0.1", 4)
    hint = parse_row("d_pos=1,d_neg=0.2", 4)  # t = -2.85 over 4 seeds, half-width 1.17
    results = [_result(off, s, 80.0 + s) for s in range(4)]
    rows = (
        (row, (-2.1, -2, -1.9)),
        (noisy, (1, -1.5, 0.5)),
        (one, (-3,)),
        (hint, (-1, -2, -0.2, -1)),
    )
    for r, gaps in rows:
        results += [_result(r, s, 80.0 + s + g) for s, g in enumerate(gaps)]
    md = report.verdicts_markdown(report.aggregate(results))
    lines = {ln.split(" minus ")[0]: ln for ln in md.splitlines() if ln.startswith("- ")}
    assert "linear -2.00 ± 0.25" in lines[f"- {row.label}"]  # diffs -2.1, -2, -1.9
    # each 2-seed subset: -2.05 or -1.95 ± 12.71 * 0.07 / sqrt 2 = 0.64
    leave_one_out = "real in 3 of 3 leave-one-seed-out subsets"
    assert f", real, survives Holm, {leave_one_out}" in lines[f"- {row.label}"]
    assert "linear +0.00 ±" in lines[f"- {noisy.label}"]
    assert "not shown" in lines[f"- {noisy.label}"]
    assert "linear -3.00, one seed: no test" in lines[f"- {one.label}"]
    assert "t = -2.85), not shown" in lines[f"- {hint.label}"]  # |t| > 2 is not real
    # Each row's family: 2 lines against the one control present, Holm within the family.
    assert f"| ablation: {row.label} | 2 | 2 | 2 | 2 |" in md
    assert f"| ablation: {hint.label} | 2 | 2 | 0 | 0 |" in md
    assert f"| ablation: {one.label} | 2 | 0 | 0 | 0 |" in md
    assert "| imbalance | 0 | 0 | 0 | 0 |" in md  # declared: listed before its rows train


def test_a_paper_presets_first_question_is_the_papers_claim_at_equal_epochs() -> None:
    attn, simclr = Row("attentionnce", 4), Row("simclr")
    results = [_result(simclr, s, 80.0 + s) for s in range(3)]
    results += [_result(attn, s, 80.0 + s + g) for s, g in enumerate((1.0, 2.0, 3.0))]
    families = settings(build_parser().parse_args(["--preset", "paper-cifar10"])).families
    md = report.verdicts_markdown(report.aggregate(results), declared=families)
    # differences 1, 2, 3: mean 2, half-width t_0.975,2 * 1 / sqrt 3 = 2.48
    claim = "- Does AttentionNCE beat SimCLR at equal epochs (the paper's claim)? AttentionNCE "
    assert claim + "(M=4) minus SimCLR: linear +2.00 ± 2.48 (95 % half-width, 3 seeds" in md
    assert "| the questions | 2 | 2 | 0 | 0 |" in md  # the one question with records, 2 probes
    assert "imbalance" not in md  # the reference's declared families are not the preset's


def test_each_ablation_row_is_set_against_its_controls() -> None:
    def labels(row: Row) -> list:
        return [c.label for c in controls(row)]

    assert labels(parse_row("d_pos=1,d_neg=1", 4)) == [
        "SimCLR on the same views (M=4)",
        "AttentionNCE, attention off (M=4)",
        "SimCLR (time of AttentionNCE)",
    ]
    tau = parse_row("d_pos=1,d_neg=0.4,temperature=0.5,neg_weighting=importance", 4)
    assert labels(tau) == [
        "SimCLR on the same views (M=4, temperature=0.5)",
        "AttentionNCE, attention off (M=4, temperature=0.5)",
        "AttentionNCE (M=4, d_pos=1, d_neg=0.4, temperature=0.5)",
    ]
    moco = parse_row("mocov3_attentionnce:d_neg=1", 4)
    assert labels(moco) == ["MoCo v3 + AttentionNCE (M=4)", "MoCo v3"]
    moco = parse_row("mocov3_attentionnce:d_neg=1,neg_weighting=importance", 4)
    assert labels(moco)[2] == "MoCo v3 + AttentionNCE (M=4, d_neg=1)"
    # the row a result.json was trained as, from its recorded overrides
    recorded = {"method": "attentionnce", "comparison": "ablation", "settings": tau.overrides}
    assert row_of(recorded) == tau


def test_activity_is_each_records_last_epoch(rebuilt: str) -> None:
    def last(folder: str, key: str, pick=lambda v: sum(v) / len(v)) -> float:
        records = sorted((REFERENCE / "runs" / folder).glob("seed*/record.jsonl"))
        return pick([read_records(r, "epoch")[-1][f"train_attn_{key}"] for r in records])

    rows = [ln for ln in _section(rebuilt, "Regime").splitlines() if ln.startswith("| ")]
    regime = {ln.split(" | ")[0][2:]: ln.strip(" |").split(" | ") for ln in rows}
    folder = "ablation/AttentionNCE-M-4-d-pos-1-d-neg-1"
    cells = regime["AttentionNCE (M=4, d_pos=1, d_neg=1)"][-5:]
    assert cells[0] == f"{last(folder, 'eff_num_positives'):.2f} of 4"
    assert cells[1] == f"{last(folder, 'eff_num_negatives'):.2f} of 254"
    assert cells[2] == f"{last(folder, 'max_beta', max):.2f}"
    assert regime["SimCLR"][-5:] == ["-"] * 5
    # a diagnostic that older records lack is averaged over the seeds that have it, and named
    off, key = REFERENCE / "runs" / "equal-epoch" / "AttentionNCE-attention-off-M-4", "push_ratio"
    seeds = sorted(int(p.name[4:]) for p in off.glob("seed*"))
    values = {s: read_records(off / f"seed{s}" / "record.jsonl", "epoch")[-1] for s in seeds}
    having = [s for s in seeds if values[s].get(f"train_attn_{key}") is not None]
    cell = f"{sum(values[s][f'train_attn_{key}'] for s in having) / len(having):.2f}"
    if len(having) < len(seeds):
        cell += f" (seed{'s' * (len(having) > 1)} {','.join(map(str, having))})"
    assert regime["AttentionNCE, attention off (M=4)"][-2] == cell
