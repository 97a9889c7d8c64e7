"""The step profile's run list and table (benchmarks/experiments/step_profile.py), on a hand-made
run record."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.experiments import step_profile


def test_every_variant_trains_both_methods_with_its_overrides() -> None:
    runs = step_profile.runs([0], 2)
    assert [(r.label, r.group) for r in runs[:2]] == [
        ("SimCLR [bench (2 workers)]", "v0"),
        ("AttentionNCE (M=4) [bench (2 workers)]", "v0"),
    ]
    assert runs[3].settings == ("++views.num_positives=4", "++data.num_workers=0")
    assert len(runs) == 2 * len(step_profile.VARIANTS) and {r.epochs for r in runs} == {2}


def test_rows_are_the_last_epochs_phases_per_step(tmp_path: Path, monkeypatch) -> None:
    lines = [{"event": "step", "epoch": e, "loss": 1.0} for e in (0, 0, 1, 1)]
    lines += [
        {"event": "epoch", "epoch": 2, "train_seconds": 4.0, "val_seconds": 1.5,
         "data_seconds": 0.2, "forward_seconds": 1.0, "backward_seconds": 2.4,
         "optimizer_seconds": 0.4},
    ]  # fmt: skip
    (tmp_path / "record.jsonl").write_text("\n".join(map(json.dumps, lines)))
    monkeypatch.setattr(step_profile, "loss_seconds", lambda method, batch: 0.003)
    result = {"status": "ok", "comparison": "profile", "label": "SimCLR [x]", "method": "simclr",
              "run_dir": str(tmp_path)}  # fmt: skip
    assert step_profile.profile_rows([result], batch=8) == [
        ["SimCLR [x]", "2", "100", "500", "3", "1200", "200", "4.0", "1.5", "4"]
    ]


def test_loss_seconds_times_both_losses() -> None:
    assert 0 < step_profile.loss_seconds("simclr", 8, repeats=2) < 1
    assert 0 < step_profile.loss_seconds("attentionnce", 8, repeats=2) < 1
