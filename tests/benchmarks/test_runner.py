"""Each run is a shipped config plus visible overrides, reused only when identical
(benchmarks/runner.py). Composes configs; trains nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

import attnce_plugin
from benchmarks.runner import (
    BenchConfigError,
    Budget,
    Data,
    Result,
    _matched,
    _Tail,
    check_curve_epochs,
    cpu_name,
    epochs_at,
    execute,
    load_result,
    parse_set,
    prepare,
    processor_name,
    read_record,
    save_result,
    unmatchable,
)
from benchmarks.runs import METHODS, Run


def _budget(tmp_path: Path, *sets: str) -> Budget:
    data = Data("fashion_mnist", str(tmp_path / "train"), str(tmp_path / "val"), "")
    return Budget(data, batch_size=8, num_workers=0, sets=sets)


def _shipped(name: str):
    with initialize_config_module("attnce_plugin.configs", version_base="1.2"):
        cfg = compose(name)
    OmegaConf.resolve(cfg)
    return cfg


def _flat(cfg) -> dict:
    def walk(node, prefix=""):
        if isinstance(node, dict):
            for k, v in node.items():
                yield from walk(v, f"{prefix}{k}.")
        else:
            yield prefix[:-1], node

    return dict(walk(OmegaConf.to_container(cfg)))


@pytest.mark.parametrize("method", sorted(METHODS))
def test_run_differs_from_its_shipped_config_only_where_its_overrides_say(tmp_path, method):
    prep = prepare(Run("row", method, "equal-epoch", 3, 2), _budget(tmp_path), tmp_path)
    assert prep.config == f"pretrain/cifar/{METHODS[method][0]}.yaml"
    shipped, run = _flat(_shipped(prep.config)), _flat(prep.resolved)
    keys = {o.lstrip("+~").split("=")[0] for o in prep.overrides}
    changed = {k for k in shipped.keys() | run.keys() if shipped.get(k) != run.get(k)}
    # trainer=cpu is a config group; the views' interpolations feed augmentations.*.
    explained = {k for k in changed if any(k == o or k.startswith(o + ".") for o in keys)}
    group = {"accelerator", "devices", "strategy", "sync_batchnorm", "precision"}
    group |= {"num_sanity_val_steps"}
    rest = {k for k in changed - explained - group if not k.startswith("augmentations")}
    assert rest == set(), rest
    assert run["seed"] == 3 and run["max_epochs"] == 2 and run["accelerator"] == "cpu"
    assert run["diagnostics.record"] == str(prep.run_dir / "record.jsonl")
    assert prep.command[2:6] == [
        "--config-path", "pkg://attnce_plugin.configs", "--config-name", prep.config
    ]  # fmt: skip


def test_baselines_are_the_attentionnce_configs_with_solo_losses_and_no_positives(tmp_path):
    for method, loss in (("simclr", "simclr"), ("mocov3", "mocov3")):
        cfg = prepare(Run("b", method, "equal-epoch", 0, 1), _budget(tmp_path), tmp_path).resolved
        assert cfg.method_kwargs.loss == loss and cfg.views.num_positives == 0
        assert sum(a.num_crops for a in cfg.augmentations) == 2  # the 2 anchor views only


def test_set_values_come_last_and_only_for_their_method(tmp_path):
    b = _budget(tmp_path, "optimizer.lr=0.3", "attentionnce:method_kwargs.d_neg=1")
    att = prepare(Run("a", "attentionnce", "x", 0, 1), b, tmp_path)
    sim = prepare(Run("s", "simclr", "x", 0, 1), b, tmp_path)
    assert att.resolved.optimizer.lr == sim.resolved.optimizer.lr == 0.3
    assert att.resolved.method_kwargs.d_neg == 1 and sim.resolved.method_kwargs.d_neg == 10
    assert att.overrides[-1] == "++method_kwargs.d_neg=1"


@pytest.mark.parametrize("method", sorted(METHODS))
def test_crop_min_scale_reaches_every_pipeline_and_nothing_else(tmp_path, method):
    b = _budget(tmp_path)
    b.crop_min_scale = 0.5
    run = Run("a", method, "x", 0, 1)
    scaled, base = prepare(run, b, tmp_path).resolved, prepare(run, _budget(tmp_path), tmp_path)
    # what solo-learn's pipelines read: each full-size one the base's, at scale [0.5, 1]; the
    # multicrop positives (small crops, their max scale below 1) unchanged
    pipes = OmegaConf.to_container(base.resolved.augmentations)
    for p in pipes:
        if p["rrc"]["crop_max_scale"] == 1.0:
            p["rrc"]["crop_min_scale"] = 0.5
    assert OmegaConf.to_container(scaled.augmentations) == pipes
    changed = {k for k, v in _flat(scaled).items() if _flat(base.resolved).get(k) != v}
    assert changed <= {"augmentations", "views.positive_min_scale"}


@pytest.mark.parametrize("text", ["no_equals", "=1", "byol:optimizer.lr=1"])
def test_bad_set_is_refused(text):
    with pytest.raises(BenchConfigError, match="--set"):
        parse_set(text)


def test_bad_override_is_refused_with_hydras_reason(tmp_path):
    b = _budget(tmp_path)
    b.overrides = ["method_kwargs=["]
    with pytest.raises(BenchConfigError, match="pretrain/cifar/attentionnce.yaml"):
        prepare(Run("a", "attentionnce", "x", 0, 1), b, tmp_path)


def test_config_yaml_and_command_name_their_source(tmp_path):
    prep = prepare(Run("a", "attentionnce", "x", 0, 1), _budget(tmp_path), tmp_path)
    prep.write()
    lines = (prep.run_dir / "config.yaml").read_text().splitlines()
    assert (
        lines[0]
        == "# pretrain/cifar/attentionnce.yaml from attnce_plugin.configs, with these overrides:"
    )
    assert lines[1 : 1 + len(prep.overrides)] == [f"#   {o}" for o in prep.overrides]
    assert "main_pretrain.py" in (prep.run_dir / "command.sh").read_text()


def test_reuse_only_for_the_same_config_and_plugin_version(tmp_path, monkeypatch):
    run = Run("a", "attentionnce", "x", 0, 1)
    prep = prepare(run, _budget(tmp_path), tmp_path)
    other = prepare(run, _budget(tmp_path, "optimizer.lr=0.3"), tmp_path)
    assert prep.digest != other.digest
    prep.run_dir.mkdir(parents=True)
    save_result(
        Result(run.key, "a", "attentionnce", "x", 0, 1, run_dir=str(prep.run_dir)), prep.digest
    )
    assert load_result(prep.run_dir, prep.digest).reused
    assert load_result(prep.run_dir, other.digest) is None
    before = prep.digest
    monkeypatch.setattr(attnce_plugin, "__version__", "9.9.9")
    assert prepare(run, _budget(tmp_path), tmp_path).digest != before
    data = json.loads((prep.run_dir / "result.json").read_text())
    (prep.run_dir / "result.json").write_text(json.dumps(dict(data, status="failed")))
    assert load_result(prep.run_dir, prep.digest) is None  # a failed run is trained again


def test_read_record_skips_a_half_written_line(tmp_path):
    path = tmp_path / "record.jsonl"
    path.write_text('{"event": "step", "loss": 1}\n{"event": "epoch", "epoch": 1}\n{"event": "ep')
    assert read_record(path) == [{"event": "epoch", "epoch": 1}]
    assert read_record(tmp_path / "missing.jsonl") == []


def test_the_controls_compose_to_their_losses(tmp_path):
    b = _budget(tmp_path)
    views = prepare(Run("v", "simclr_views", "x", 0, 1), b, tmp_path).resolved
    assert views.method_kwargs.loss == "simclr_all_views" and views.views.num_positives == 4
    off = prepare(Run("o", "attentionnce_off", "x", 0, 1), b, tmp_path).resolved
    assert off.method_kwargs.get("loss", "attentionnce") == "attentionnce"  # the default
    assert off.method_kwargs.d_pos == off.method_kwargs.d_neg == 1e6


def test_a_moved_record_points_at_its_new_folder(tmp_path):
    old, new = tmp_path / "old" / "run", tmp_path / "committed" / "run"
    old.mkdir(parents=True)
    save_result(Result("k", "a", "attentionnce", "x", 0, 1, run_dir=str(old)), "d")
    new.parent.mkdir()
    old.rename(new)
    assert load_result(new).run_dir == str(new)


def test_digest_ignores_where_the_run_and_its_data_lie(tmp_path):
    def prep(out: str, cache: str, epochs: int = 1):
        c = tmp_path / cache
        data = Data("fashion_mnist", str(c / "fm" / "train"), str(c / "fm" / "val"), "", str(c))
        return prepare(Run("a", "simclr", "x", 0, epochs), Budget(data, 8, 0), tmp_path / out)

    here, there = prep("clone1", "cache1"), prep("clone2", "cache2")
    assert str(tmp_path / "clone1") in " ".join(here.command)  # the command itself is unchanged
    assert here.digest == there.digest  # a committed record is reused from another clone
    assert prep("clone1", "cache1", epochs=2).digest != here.digest
    kept = Budget(Data("fashion_mnist", "t", "v", ""), 8, 0, curve_every=1)
    plain = Budget(Data("fashion_mnist", "t", "v", ""), 8, 0)
    run = Run("a", "simclr", "x", 0, 3)
    # Keeping checkpoints changes nothing that is trained: the same digest.
    assert prepare(run, kept, tmp_path).digest == prepare(run, plain, tmp_path).digest


def test_the_runners_poll_reads_each_finished_epoch_line_once(tmp_path):
    path = tmp_path / "record.jsonl"
    tail = _Tail(path)
    assert tail.new_epochs() == []  # no file yet
    path.write_text('{"event": "step", "epoch": 1}\n{"event": "epoch", "epoch": 1}\n{"event": "ep')
    assert tail.new_epochs() == [{"event": "epoch", "epoch": 1}]
    with path.open("a") as fh:
        fh.write('och", "epoch": 2}\n')
    assert tail.new_epochs() == [{"event": "epoch", "epoch": 2}]
    assert tail.new_epochs() == []


def test_curve_checkpoints_come_after_every_other_override(tmp_path):
    budget = _budget(tmp_path)
    budget.overrides, budget.curve_every = ["++checkpoint.keep_prev=False"], 5
    ovr = prepare(Run("a", "simclr", "x", 0, 11), budget, tmp_path).overrides
    assert ovr[-2:] == ["++checkpoint.frequency=5", "++checkpoint.keep_prev=True"]
    assert epochs_at(Path("simclr-fashion_mnist-seed0-0-ep=10.ckpt")) == 11
    assert epochs_at(Path("last.ckpt")) == 0
    timed = Run("t", "simclr", "equal-time", 0, 7, matched_to="a")
    assert not any("frequency" in o for o in prepare(timed, budget, tmp_path).overrides)


def test_curve_epochs_must_end_on_a_saved_checkpoint():
    check_curve_epochs(
        [Run("a", "simclr", "x", 0, 21), Run("t", "simclr", "y", 0, 8, matched_to="b")], 10
    )
    with pytest.raises(BenchConfigError, match=r"epochs \[20\] would end between two \(e.g. 11"):
        check_curve_epochs([Run("a", "simclr", "x", 0, 20)], 10)


@pytest.mark.parametrize("cpus, expected", [(("A", "A"), 44), (("", "B"), 44), (("A", "B"), None)])
def test_equal_time_epochs_come_only_from_timings_on_one_cpu(cpus, expected):
    # MoCo v3 at 10 s per epoch against the MoCo form at 15 s: 29 x 15 / 10 = 43.5 -> 44 epochs.
    # An empty cpu is a record from before the field: its seconds are trusted, as they were.
    def timed(label: str, method: str, seconds: float, cpu: str) -> Result:
        return Result(
            label, label, method, "equal-epoch", 0, 29, seconds_per_epoch=seconds, cpu=cpu
        )

    done = [timed("MoCo v3", "mocov3", 10.0, cpus[0])]
    done.append(timed("MoCo v3 + AttentionNCE (M=4)", "mocov3_attentionnce", 15.0, cpus[1]))
    run = Run("t", "mocov3", "equal-time", 0, 0, matched_to="MoCo v3 + AttentionNCE (M=4)")
    got = _matched(run, done, {}, 0)
    if expected is None:
        assert got == (
            "'MoCo v3' trained on 'A' and 'MoCo v3 + AttentionNCE (M=4)' on 'B': their seconds do "
            "not compare, so the equal-time epochs are unknown (train both on one CPU)"
        )
    else:
        assert got == expected


def test_a_record_keeps_its_cpu_and_an_older_one_has_none(tmp_path):
    save_result(Result("k", "a", "simclr", "x", 0, 1, run_dir=str(tmp_path), cpu="AMD EPYC"), "d")
    assert load_result(tmp_path, "d").cpu == "AMD EPYC"
    data = json.loads((tmp_path / "result.json").read_text())
    del data["cpu"]  # a record written before the field
    (tmp_path / "result.json").write_text(json.dumps(data))
    assert load_result(tmp_path, "d").cpu == ""


def test_a_part_leaves_out_another_parts_row_that_cannot_be_time_matched(tmp_path):
    # MoCo v3 and the MoCo form timed on two CPUs: the part that owns the equal-time row shows
    # why it cannot run; any other part leaves that row out instead of failing over it.
    form = "MoCo v3 + AttentionNCE (M=4)"
    timed = [Run("MoCo v3", "mocov3", "equal-epoch", 0, 2), Run(form, "mocov3_attentionnce",
             "equal-epoch", 0, 2, settings=("++views.num_positives=4",))]  # fmt: skip
    budget = _budget(tmp_path)
    for run, cpu in zip(timed, ("A", "B")):
        prep = prepare(run, budget, tmp_path)
        prep.run_dir.mkdir(parents=True)
        done = Result(run.key, run.label, run.method, run.comparison, 0, 2,
                      seconds_per_epoch=1.0, run_dir=str(prep.run_dir), cpu=cpu)  # fmt: skip
        save_result(done, prep.digest)
    late = Run("MoCo v3 (time of it)", "mocov3", "equal-time", 0, 0, matched_to=form)
    runs = [*timed, late]
    others = execute(runs, budget, tmp_path, only={"elsewhere/seed0"})
    assert [(r.label, r.cpu) for r in others] == [("MoCo v3", "A"), (form, "B")]
    (own,) = [r for r in execute(runs, budget, tmp_path, only={late.key}) if r.label == late.label]
    assert own.status == "skipped" and "their seconds do not compare" in own.error


def test_a_gpu_run_records_the_gpu_it_timed(monkeypatch):
    import torch

    assert processor_name(OmegaConf.create({"accelerator": "cpu"})) == cpu_name()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
    assert processor_name(OmegaConf.create({"accelerator": "gpu"})) == "NVIDIA H200"
    assert processor_name(OmegaConf.create({"accelerator": "cpu"})) == cpu_name()


@pytest.mark.parametrize("cpus, skipped", [(("A", "A"), False), (("A", "B"), True)])
def test_report_only_says_why_an_equal_time_row_cannot_run(cpus, skipped):
    # --report-only trains nothing, so it must find the CPU mismatch in the records themselves.
    form = "MoCo v3 + AttentionNCE (M=4)"
    done = [
        Result(label, label, method, "equal-epoch", 0, 29, seconds_per_epoch=sec, cpu=cpu)
        for label, method, sec, cpu in zip(
            ("MoCo v3", form), ("mocov3", "mocov3_attentionnce"), (9.0, 13.5), cpus
        )
    ]
    late = [Run("MoCo v3 (time)", "mocov3", "equal-time", s, 0, matched_to=form) for s in (0, 1)]
    got = unmatchable([Run("MoCo v3", "mocov3", "equal-epoch", 0, 29), *late], done)
    want = [(r.key, "skipped") for r in late] if skipped else []
    assert [(r.key, r.status) for r in got] == want
    assert all("their seconds do not compare" in r.error for r in got)
    # A run that has a record (a failed one loads as a dict) is not listed again.
    again = unmatchable(late, [*done, {"key": late[0].key, "status": "failed"}])
    assert [r.key for r in again] == ([late[1].key] if skipped else [])
