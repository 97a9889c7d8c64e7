"""benchmarks.experiments.moco_settings: its run list and its verdicts on hand-made results."""

from __future__ import annotations

from benchmarks.experiments import moco_settings as ms

FORM = "MoCo v3 + AttentionNCE (M=4)"
TIME = "MoCo v3 (time of MoCo v3 + AttentionNCE)"


def test_runs_per_seed_baselines_variants_then_equal_time() -> None:
    runs = ms.runs([0, 1], 4)
    assert len(runs) == 2 * 7
    first = runs[:7]
    assert [r.label for r in first] == [
        "MoCo v3", FORM,
        "MoCo v3 + AttentionNCE (M=4, temperature=0.5)",
        "MoCo v3 + AttentionNCE (M=4, d_neg=1)",
        "MoCo v3 + AttentionNCE (M=4, d_pos=4)",
        "MoCo v3 + AttentionNCE (M=4, key_in_prototype=False)",
        TIME,
    ]  # fmt: skip
    assert first[2].settings == ("++views.num_positives=4", "++method_kwargs.temperature=0.5")
    assert first[5].settings[-1] == "++method_kwargs.key_in_prototype=false"
    assert {r.method for r in first[1:6]} == {"mocov3_attentionnce"}
    assert (first[6].method, first[6].epochs, first[6].matched_to) == ("mocov3", 0, FORM)
    assert {r.seed for r in runs[7:]} == {1}


def _runs(label, comparison, knns, epochs=4):
    return [
        {"label": label, "comparison": comparison, "status": "ok", "epochs": epochs, "seed": i,
         "knn_acc1": k, "linear_acc1": k, "offline_acc1": k, "seconds_per_epoch": 10.0}
        for i, k in enumerate(knns)
    ]  # fmt: skip


def test_a_setting_wins_only_when_clearly_ahead_at_equal_epochs_and_equal_time() -> None:
    results = (
        _runs("MoCo v3", "equal-epoch", [50.0, 51.0, 52.0])
        + _runs(FORM, "equal-epoch", [60.0, 61.0, 62.0])
        + _runs("MoCo v3 + AttentionNCE (M=4, d_neg=1)", "equal-epoch", [54.0, 55.0, 56.0])
        + _runs("MoCo v3 + AttentionNCE (M=4, d_pos=4)", "equal-epoch", [48.0, 49.0, 50.0])
        + _runs(TIME, "equal-time", [53.0, 54.0, 55.0], 6)
    )
    md, winners = ms.summarise(results)
    assert winners == ["shipped (tau 0.2, d_pos 1, d_neg 10, key in prototype)"]
    assert "| MoCo v3 | 4 | 3 | 51.0 ± 1.0 | 51.0 ± 1.0 | 51.0 ± 1.0 | 10.00 ± 0.00 | — | — |" in md
    assert "| MoCo v3 at the MoCo form's time | 6 | 3 | 54.0 ± 1.0 |" in md
    # 55 - 51 = 4 > 1 + 1: clear; 55 - 54 = 1 < 2: not clear.
    assert "| d_neg 1 | 4 | 3 | 55.0 ± 1.0 |" in md and "| +4.0, clear | +1.0, not clear |" in md
    # behind MoCo v3 at equal time by 5 > 2: clear, the sign says who leads
    assert "| d_pos 4 | 4 | 3 | 49.0 ± 1.0 |" in md and "| -2.0, not clear | -5.0, clear |" in md
    assert "temperature 0.5" not in md  # no runs, no row


def test_one_seed_is_undecided() -> None:
    results = _runs("MoCo v3", "equal-epoch", [50.0]) + _runs(FORM, "equal-epoch", [60.0])
    md, winners = ms.summarise(results)
    assert winners == [] and "| +10.0, one seed | n/a |" in md
