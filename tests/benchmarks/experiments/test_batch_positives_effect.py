"""benchmarks.experiments.batch_positives_effect: its run list and its table."""

from __future__ import annotations

import pytest

from benchmarks.experiments import batch_positives_effect as bpe


def test_variants_differ_only_in_the_two_switches() -> None:
    found = {folder: ovr for folder, _, ovr in bpe.variants(12)}
    assert list(found) == [
        "full_per_crop", "full_batched", "small_per_crop", "small_batched",
        "small_per_crop_bn_frozen", "small_batched_bn_frozen",
    ]  # fmt: skip
    assert found["full_per_crop"] == ()
    assert found["small_batched_bn_frozen"] == (
        "++views.positive_crop_size=12",
        "++method_kwargs.batch_positives=true",
        "++method_kwargs.positives_update_bn=false",
    )
    with pytest.raises(ValueError, match="--small-size"):
        bpe.variants(0)


def test_runs_simclr_once_per_seed_and_one_folder_per_variant() -> None:
    runs = bpe.runs([0, 1], 4, 16)
    assert len(runs) == 2 * 7 and len({r.key for r in runs}) == len(runs)
    assert runs[0].key == "full_per_crop/equal-epoch/SimCLR/seed0"
    small = runs[3]
    assert small.label == "AttentionNCE (M=4), 16 px, per crop" and small.group == "small_per_crop"
    assert small.settings == ("++views.num_positives=4", "++views.positive_crop_size=16")
    assert {r.epochs for r in runs} == {4}


def test_summary_is_mean_and_sample_std_over_ok_seeds() -> None:
    def run(label, seed, knn, status="ok"):
        return {"label": label, "comparison": "equal-epoch", "status": status, "seed": seed,
                "epochs": 4, "knn_acc1": knn, "linear_acc1": knn - 10, "offline_acc1": knn + 10,
                "seconds_per_epoch": knn / 6}  # fmt: skip

    label = "AttentionNCE (M=4), anchor size, batched"
    results = [run("SimCLR", 0, 50.0), run(label, 0, 60.0), run(label, 1, 64.0),
               run(label, 2, 0.0, "failed")]  # fmt: skip
    ref = {"comparison": "reference", "label": "raw pixels", "status": "ok", "seed": 0, "epochs": 0}
    md = bpe.summary(results + [ref])
    # std of (60, 64) with ddof 1 is 2.83
    assert (
        "| AttentionNCE (M=4) | anchor size, batched | 62.0 ± 2.8 | 52.0 ± 2.8 | 72.0 ± 2.8 | "
        "10.33 ± 0.47 | 2/3 |"
    ) in md
    assert "| SimCLR | (none) | 50.0 | 40.0 | 60.0 | 8.33 | 1/1 |" in md
    assert "raw pixels" not in md
