"""attnce_bench.experiments.batch_positives_effect: the variants it runs and its summary of the
bench's results."""

from __future__ import annotations

from pathlib import Path

from attnce_bench.api import BenchOptions
from attnce_bench.experiments import batch_positives_effect as bpe


def test_variants_differ_only_in_the_two_switches(tmp_path: Path) -> None:
    names = [v[0] for v in bpe.variants(12)]
    assert names == [
        "full_per_crop",
        "full_batched",
        "small_per_crop",
        "small_batched",
        "small_per_crop_bn_frozen",
        "small_batched_bn_frozen",
    ]
    sets = {v[0]: v[2] for v in bpe.variants(12)}
    assert sets["full_per_crop"] == []
    assert sets["small_batched"] == [
        "attentionnce:views.positive_crop_size=12",
        "attentionnce:method_kwargs.batch_positives=true",
    ]
    opts = bpe.bench_options(tmp_path, sets["full_batched"], False, BenchOptions(preset="smoke"))
    assert opts.preset == "smoke" and opts.out == str(tmp_path)
    assert list(opts.methods) == ["attentionnce"]
    assert opts.sets == ["attentionnce:method_kwargs.batch_positives=true"]
    assert opts.time_matched is False and list(opts.extra_m) == []


def test_summary_is_mean_and_sample_std_over_ok_seeds() -> None:
    runs = [
        {
            "label": "AttentionNCE (M=4)",
            "comparison": "equal-epoch",
            "status": "ok",
            "knn_acc1": 60.0,
            "linear_acc1": 50.0,
            "offline_acc1": 70.0,
            "seconds_per_epoch": 10.0,
        },
        {
            "label": "AttentionNCE (M=4)",
            "comparison": "equal-epoch",
            "status": "ok",
            "knn_acc1": 64.0,
            "linear_acc1": 52.0,
            "offline_acc1": 72.0,
            "seconds_per_epoch": 12.0,
        },
        {
            "label": "AttentionNCE (M=4)",
            "comparison": "equal-epoch",
            "status": "failed",
            "knn_acc1": None,
            "linear_acc1": None,
            "offline_acc1": None,
            "seconds_per_epoch": None,
        },
        {
            "label": "SimCLR",
            "comparison": "equal-epoch",
            "status": "ok",
            "knn_acc1": 1.0,
            "linear_acc1": 1.0,
            "offline_acc1": 1.0,
            "seconds_per_epoch": 1.0,
        },
    ]
    got = bpe.summary(runs, "AttentionNCE (M=4)")
    # std of (60, 64) with ddof 1 is 2.83
    assert got == {
        "knn_acc1": "62.0 ± 2.8",
        "linear_acc1": "51.0 ± 1.4",
        "offline_acc1": "71.0 ± 1.4",
        "s_per_epoch": "11.00 ± 1.41",
        "seeds": "2/3",
    }
