"""The report (benchmarks/report.py): the committed reference records rebuild the committed tables
to the digit; the activity columns are the records' last-epoch values; the paired statistics and
the noise rule agree with hand computation and Student's t table."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from benchmarks import report
from benchmarks.__main__ import main

REFERENCE = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "reference"


def _section(text: str, title: str) -> str:
    return text.split(f"## {title}\n")[1].split("\n## ")[0]


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("ref") / "reference"
    shutil.copytree(REFERENCE / "runs", out / "runs")
    assert main(["--preset", "reference", "--report-only", "--out", str(out)]) == 0
    return (out / "results.md").read_text()


#: Rows and verdicts as the 0.5.0 harness printed them from the same records (c40550c's
#: benchmarks/results/reference/results.md): the rewritten report must print the same numbers.
PRINTED_BY_0_5_0 = [
    "| AttentionNCE (M=4) | 29 | 0,1,2 | 83.22 ± 0.35 | 80.68 ± 0.75 | +3.52 | +2.67 | +1.22 | no | no |",
    "| SimCLR (time of AttentionNCE) | 82 | 0,1,2 | 82.93 ± 1.00 | 80.77 ± 0.21 | +3.23 | +2.75 | +0.93 | no | no |",
    "- Is the attention itself responsible? AttentionNCE (M=4) minus AttentionNCE, attention off (M=4): "
    "offline linear -0.9, not clear; offline kNN -0.4, not clear (seeds 0,1,2 / 0,1,2).",
]  # fmt: skip


def test_report_only_rebuilds_the_committed_tables_to_the_digit(rebuilt: str) -> None:
    committed = (REFERENCE / "results.md").read_text()
    for title in (
        "Equal epochs",
        "Equal wall-clock",
        "Regime",
        "Verdicts",
        "Representation health",
    ):
        assert _section(rebuilt, title).strip() == _section(committed, title).strip(), title
    lines = rebuilt.splitlines()
    for old in PRINTED_BY_0_5_0:
        assert any(line.startswith(old.rstrip(" |")) for line in lines), old


def test_activity_is_each_records_last_epoch_mean_over_seeds(rebuilt: str) -> None:
    def last(row: str, key: str) -> float:
        values = []
        for seed in range(3):
            lines = (REFERENCE / "runs" / row / f"seed{seed}" / "record.jsonl").read_text()
            epochs = [json.loads(ln) for ln in lines.splitlines() if '"event": "epoch"' in ln]
            values.append(epochs[-1][f"train_attn_{key}"])
        return sum(values) / 3

    rows = [ln for ln in _section(rebuilt, "Regime").splitlines() if ln.startswith("| ")]
    regime = {ln.split(" | ")[0][2:]: ln.strip(" |").split(" | ") for ln in rows}
    for label, folder, p, k in [("AttentionNCE (M=4)", "AttentionNCE-M-4", 4, 254),
                                ("MoCo v3 + AttentionNCE (M=4)",
                                 "MoCo-v3-AttentionNCE-M-4", 5, 127),
                                ("AttentionNCE, attention off (M=4)",
                                 "AttentionNCE-attention-off-M-4", 4, 254)]:  # fmt: skip
        cells = regime[label][-3:]
        folder = f"equal-epoch/{folder}"
        assert cells[0] == f"{last(folder, 'eff_num_positives'):.2f} of {p}"
        assert cells[1] == f"{last(folder, 'eff_num_negatives'):.2f} of {k}"
        assert cells[2] == f"{last(folder, 'max_beta'):.2f}"
    assert regime["AttentionNCE (M=4)"][-3:] == ["3.99 of 4", "253.96 of 254", "1.10"]  # issue 47
    assert regime["SimCLR"][-3:] == ["-", "-", "-"]


def test_paired_statistics_by_hand_and_t_table() -> None:
    got = report.paired({0: 3.0, 1: 5.0, 2: 7.0, 9: 1.0}, {0: 2.0, 1: 3.0, 2: 4.0})
    # differences 1, 2, 3: mean 2, std 1, t = 2 / (1 / sqrt 3), half-width t_0.975,2 / sqrt 3
    assert got == pytest.approx({"n": 3, "mean": 2.0, "std": 1.0, "t": 2 * math.sqrt(3),
                                 "detectable": 4.302653 / math.sqrt(3)})  # fmt: skip
    assert report.paired({0: 1.0}, {0: 0.0}) is None
    for df, t in ((1, 12.706), (4, 2.776), (12, 2.179), (20, 2.086), (30, 2.042), (120, 1.980)):
        assert report.t975(df) == pytest.approx(t, abs=1.5e-3)


def test_the_noise_rule_and_verdict_text() -> None:
    assert report.clear((60.0, 1.0), (57.0, 1.5)) is True  # 3.0 > 2.5
    assert report.clear((60.0, 1.0), (58.0, 1.5)) is False
    assert report.clear((60.0, None), (50.0, 1.0)) is None  # one seed decides nothing
    assert report.verdict((57.0, 1.0), (60.0, 1.5)) == "-3.0, clear"
    assert report.verdict((60.0, None), (59.0, 1.0)) == "+1.0, one seed"
    assert report.mean_std([1.0, 3.0, None, float("nan")]) == (2.0, pytest.approx(2**0.5))


def test_verdict_lines_print_the_paired_statistics(rebuilt: str) -> None:
    lines = _section(rebuilt, "Verdicts").splitlines()
    third = lines[lines.index(next(ln for ln in lines if "attention itself" in ln)) + 1]
    # attention off minus AttentionNCE, linear, per seed (from the committed result.json files)
    a, b = ([json.loads((REFERENCE / "runs" / "equal-epoch" / row / f"seed{s}" / "result.json")
             .read_text())["offline_acc1"] for s in range(3)]
            for row in ("AttentionNCE-M-4", "AttentionNCE-attention-off-M-4"))  # fmt: skip
    s = report.paired(dict(enumerate(a)), dict(enumerate(b)))
    assert f"linear {s['mean']:+.2f} ± {s['std']:.2f}, t = {s['t']:+.2f}" in third
    assert f"detectable {s['detectable']:.2f}" in third


def test_rows_tables_and_missing_verdicts_on_hand_made_results() -> None:
    def r(label, comparison, seed, lin, status="ok"):
        return {"key": f"{label}/{seed}", "label": label, "comparison": comparison, "seed": seed,
                "epochs": 2, "status": status, "offline_acc1": lin, "error": ""}  # fmt: skip

    results = [r("SimCLR", "equal-epoch", 0, 50.0), r("SimCLR", "equal-epoch", 1, 52.0),
               r("SimCLR", "equal-epoch", 2, None, "failed")]  # fmt: skip
    (line,) = report.aggregate(results)
    assert line.seeds == [0, 1] and line.failed == [2] and line.stats["offline_acc1"][0] == 51.0
    md = report.bench_markdown(results, ["header"])
    assert "| SimCLR | 2 | 0,1 (failed: 2) |" in md and "## Verdicts" not in md
    assert "FAILED or skipped: SimCLR/2" in md


def test_each_ablation_row_is_set_against_the_three_controls() -> None:
    def r(label, comparison, lin):
        return {"key": label, "label": label, "comparison": comparison, "seed": 0, "epochs": 2,
                "status": "ok", "offline_acc1": lin, "offline_knn_acc1": lin,
                "error": ""}  # fmt: skip

    controls = [q[2].label for q in report.QUESTIONS[:3]]  # equal time, same views, off
    # an M=2 row has no controls at its M: no lines
    results = [r("AttentionNCE (M=4, d_pos=1, d_neg=1)", "ablation", 80.0),
               r("AttentionNCE (M=2, d_pos=1, d_neg=10)", "ablation", 70.0)]  # fmt: skip
    results += [r(label, "equal-epoch", lin) for label, lin in zip(controls, (81.0, 82.5, 79.0))]
    lines = [ln for ln in report.verdicts_markdown(report.aggregate(results)).splitlines()
             if ln.startswith("- Ablation:")]  # fmt: skip
    assert [ln.split(" minus ")[1].split(":")[0] for ln in lines] == [controls[1], controls[2],
                                                                       controls[0]]  # fmt: skip
    assert [ln.split("offline linear ")[1].split(",")[0] for ln in lines] == [
        "-2.5",
        "+1.0",
        "-1.0",
    ]


def test_report_only_on_some_seeds_prints_them_and_writes_nothing(tmp_path, capsys) -> None:
    shutil.copytree(REFERENCE / "runs", tmp_path / "runs")
    argv = ["--preset", "reference", "--report-only", "--seeds", "1,2", "--out", str(tmp_path)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "(seeds 1,2 / 1,2)" in printed and "seeds 0," not in printed
    assert not (tmp_path / "results.md").exists()
