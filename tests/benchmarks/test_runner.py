"""The runner (benchmarks/runner.py): each run is a shipped config that differs only where its
visible overrides say, with the run recorder attached by the benchmark's Hydra callback; its
record names no machine's folder; finished runs are reused, found by what they are, not by their
folder's name; equal-time epochs come from timings on one CPU. Composes configs; trains
nothing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from benchmarks import runner
from benchmarks.runs import METHODS, Preset, Row, Run, label_of


def _budget(tmp_path: Path, *sets: str, crop_min_scale=None) -> runner.Budget:
    chosen = Preset(1, 1, 1, 8, (0,), sets=sets, crop_min_scale=crop_min_scale)
    return runner.Budget("fashion-mnist", tmp_path / "data" / "subset", "", chosen)


def _flat(node, prefix="") -> dict:
    """``{"a.b": leaf}`` of a config's container; lists are leaves."""
    if not isinstance(node, dict):
        return {prefix[:-1]: node}
    return {k: v for key, val in node.items() for k, v in _flat(val, f"{prefix}{key}.").items()}


LOSSES = dict(simclr="simclr", mocov3="mocov3", simclr_views="simclr_all_views")


@pytest.mark.parametrize("method", sorted(METHODS))
def test_a_run_differs_from_its_shipped_config_only_where_its_overrides_say(tmp_path, method):
    m = 0 if method in ("simclr", "mocov3") else 4  # as the run table makes them
    prep = runner.prepare(Run(Row(method, m), 3, 2), _budget(tmp_path), tmp_path)
    assert prep.config == f"pretrain/cifar/{METHODS[method].config}.yaml"
    with initialize_config_module("attnce_plugin.configs", version_base="1.2"):
        shipped = _flat(OmegaConf.to_container(compose(prep.config), resolve=True))
    run = _flat(OmegaConf.to_container(prep.resolved, resolve=True))
    keys = {o.lstrip("+~").split("=")[0] for o in prep.overrides}
    changed = {k for k in shipped.keys() | run.keys() if shipped.get(k) != run.get(k)}
    explained = {k for k in changed if any(k == o or k.startswith(o + ".") for o in keys)}
    trainer_cpu = "accelerator devices strategy sync_batchnorm precision num_sanity_val_steps"
    rest = {k for k in changed - explained - set(trainer_cpu.split())}
    assert {k for k in rest if not k.startswith("augmentations")} == set()
    assert run["seed"] == 3 and run["max_epochs"] == 2 and run["accelerator"] == "cpu"
    assert run.get("method_kwargs.loss", "attentionnce") == LOSSES.get(method, "attentionnce")
    assert run["views.num_positives"] == m
    if method == "attentionnce_off":
        assert run["method_kwargs.d_pos"] == run["method_kwargs.d_neg"] == 1e6
    hook = "+hydra.callbacks.bench"
    assert f"{hook}._target_=benchmarks.hooks.Bench" in prep.command
    assert f"{hook}.record={prep.run_dir / 'record.jsonl'}" in prep.command
    assert f"{hook}.size=32" in prep.command


def test_the_record_names_no_machine_folder_and_its_command_runs_with_them_named(tmp_path):
    out = tmp_path / "out dir"  # a space: the command quotes its folders
    prep = runner.prepare(Run(Row("attentionnce", 4), 0, 1), _budget(out), out)
    prep.write()
    script, cfg = (prep.run_dir / "command.sh").read_text(), prep.run_dir / "config.yaml"
    for text in (script, cfg.read_text()):
        assert str(tmp_path) not in text and str(runner.REPO_ROOT) not in text
    assert "++data.train_path=<data>/train" in cfg.read_text()
    assert "  dir: <out>/runs/equal-epoch/attentionnce-M4/seed0/ckpt\n" in cfg.read_text()
    assert OmegaConf.load(cfg).views.num_positives == 4  # the report reads it back
    # this machine's folders named again, and echo for python3: the command runs
    folders = {"<out>": str(out), "<data>": "/d", "<solo-learn>": "/s", "<repo>": "/r"}
    for placeholder, folder in {**folders, " python3 ": " echo "}.items():
        script = script.replace(placeholder, folder)
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "/s/main_pretrain.py" in done.stdout and "++data.val_path=/d/val" in done.stdout
    assert f"++checkpoint.dir={out}/runs/{prep.run.key}/ckpt" in done.stdout


def test_set_values_come_late_and_yield_to_a_rows_own_settings(tmp_path):
    sets = [runner.parse_set("optimizer.lr=0.3"), runner.parse_set("+method_kwargs.d_neg=1")]
    b = _budget(tmp_path, *sets, "+extra=2", "trainer=cpu")  # raw ones as given: a group too
    att = runner.prepare(Run(Row("attentionnce", 4), 0, 1), b, tmp_path)
    row = runner.prepare(Run(Row("attentionnce", 4, (("d_neg", 3.0),)), 0, 1), b, tmp_path)
    assert att.resolved.optimizer.lr == row.resolved.optimizer.lr == 0.3
    assert att.resolved.method_kwargs.d_neg == 1 and row.resolved.method_kwargs.d_neg == 3
    ovr = att.overrides  # after the budget's, before the row's; a raw override as given
    assert ovr.index("++max_epochs=1") < ovr.index("++method_kwargs.d_neg=1") < len(ovr) - 1
    assert att.resolved.extra == 2 and row.overrides[-1] == "++method_kwargs.d_neg=3.0"
    for bad in ("no_equals", "=1", "+=1"):
        with pytest.raises(ValueError, match="--set"):
            runner.parse_set(bad)


@pytest.mark.parametrize("method", ["attentionnce", "mocov3_attentionnce"])
def test_the_crop_scale_reaches_every_pipeline_and_bad_overrides_are_refused(tmp_path, method):
    run = Run(Row(method, 4), 0, 1)
    cfg = runner.prepare(run, _budget(tmp_path, crop_min_scale=0.5), tmp_path).resolved
    assert {p.rrc.crop_min_scale for p in cfg.augmentations} == {0.5}
    with pytest.raises(ValueError, match=f"pretrain/cifar/{METHODS[method].config}.yaml"):
        runner.prepare(run, _budget(tmp_path, "+x=["), tmp_path)


def _finish(out: Path, run: Run, seconds: float, cpu: str = "A") -> None:
    folder = out / "runs" / run.key
    folder.mkdir(parents=True)
    result = runner.new_result(run, seconds_per_epoch=seconds, cpu=cpu, run_dir=str(folder))
    runner.save_result(result)


def _launches(monkeypatch) -> list:
    """The runs that execute() trains, recorded instead of trained."""
    runs: list = []
    done = {"status": "", "error": ""}
    monkeypatch.setattr(runner, "launch", lambda prep, _: runs.append(prep) or done)
    return runs


def test_finished_runs_are_reused_and_time_matched_from_their_lowest_seed(tmp_path, monkeypatch):
    base, target = Run(Row("simclr"), 1, 10), Run(Row("attentionnce", 4), 1, 10)
    _finish(tmp_path, base, 10.0)
    _finish(tmp_path, target, 25.0)
    _finish(tmp_path, Run(Row("simclr"), 2, 10), 99.0)  # seed 2 has no target: not used
    timed = Run(Row("simclr", comparison="equal-time", time_of=Row("attentionnce", 4)), 2, 0)
    launched = _launches(monkeypatch)
    results = runner.execute([base, target, timed], _budget(tmp_path), tmp_path)
    assert [r["key"] for r in results[:2]] == [base.key, target.key]  # reused
    assert [p.run.key for p in launched] == [timed.key] and "++max_epochs=25" in launched[0].command
    assert runner.equal_time_epochs(timed, tmp_path) == 25


def test_a_record_in_a_folder_of_another_name_is_found_by_its_row(tmp_path, monkeypatch):
    """Records filed under the older keys (a label's words) are reused: a row's label may be
    reworded without orphaning them."""
    run = Run(Row("attentionnce", 4, (("d_neg", 1.0),), "ablation"), 0, 29)
    old = tmp_path / "runs" / "ablation" / "AttentionNCE-M-4-d-neg-1" / "seed0"
    old.mkdir(parents=True)
    runner.save_result(runner.new_result(run, key="", label="reworded", run_dir=str(old)))
    launched = _launches(monkeypatch)
    (result,) = runner.execute([run], _budget(tmp_path), tmp_path)
    assert launched == [] and result["run_dir"] == str(old)
    assert label_of(result) == "AttentionNCE (M=4, d_neg=1)" != result["label"]


def test_no_time_match_across_two_cpus_and_a_failed_record_is_trained_again(tmp_path, monkeypatch):
    _finish(tmp_path, Run(Row("mocov3"), 0, 29), 10.0, "A")
    _finish(tmp_path, Run(Row("mocov3_attentionnce", 4), 0, 29), 15.0, "B")
    timed = Run(Row("mocov3", comparison="equal-time", time_of=Row("mocov3_attentionnce", 4)), 0, 0)
    assert "seconds do not compare" in str(runner.equal_time_epochs(timed, tmp_path))
    path = tmp_path / "runs" / "equal-epoch/mocov3/seed0/result.json"
    data = json.loads(path.read_text())
    assert data["cpu"] == "A" and data["run_dir"] == ""  # a record names no machine's path
    assert str(path.parent) in [r["run_dir"] for r in runner.read_results(tmp_path)]
    path.write_text(json.dumps(dict(data, status="failed")))
    launched = _launches(monkeypatch)
    runner.execute([Run(Row("mocov3"), 0, 29)], _budget(tmp_path), tmp_path)
    assert [p.run.key for p in launched] == ["equal-epoch/mocov3/seed0"]


def test_a_half_written_or_missing_result_reads_as_incomplete_and_the_report_says_so(tmp_path):
    """A kill at any moment: result.json is replaced whole (a leftover .part is ignored), and a
    folder whose result never got written, or does not parse, reads as an incomplete run."""
    from benchmarks import report

    done = tmp_path / "runs" / "equal-epoch" / "simclr" / "seed0"
    torn = tmp_path / "runs" / "ablation" / "AttentionNCE-M-4-d-neg-1" / "seed1"
    never = tmp_path / "runs" / "equal-epoch" / "MoCo-v3" / "seed2"
    for folder in (done, torn, never):
        folder.mkdir(parents=True)
        (folder / "record.jsonl").write_text('{"event": "epoch", "epoch": 1}\n')
    result = runner.new_result(Run(Row("simclr"), 0, 1), run_dir=str(done), status="ok")
    runner.save_result(result)
    (done / "result.json.part").write_text('{"key": ')  # a write a kill stopped
    (torn / "result.json").write_text('{"key": "ablation/AttentionNCE-M-4-d-neg-1/seed1", ')
    results = {r["key"]: r for r in runner.read_results(tmp_path)}
    assert results["equal-epoch/simclr/seed0"]["status"] == "ok"
    for key in ("ablation/AttentionNCE-M-4-d-neg-1/seed1", "equal-epoch/MoCo-v3/seed2"):
        assert results[key]["status"] == "incomplete" and results[key]["seed"] == int(key[-1])
    md = report.bench_markdown(list(results.values()), [])
    assert "- INCOMPLETE: equal-epoch/MoCo-v3/seed2: no result" in md


def test_resume_only_from_a_loadable_checkpoint_of_the_same_config(tmp_path):
    """The newest checkpoint that loads (a torn newer one skipped), and only for the config the
    folder's config.yaml holds: another epoch budget trains from the start."""
    import dataclasses

    import torch

    run = Run(Row("attentionnce", 4), 0, 2)
    prep = runner.prepare(run, _budget(tmp_path), tmp_path)
    prep.write()
    other = runner.prepare(dataclasses.replace(run, epochs=3), _budget(tmp_path), tmp_path)
    assert other.run_dir == prep.run_dir and prep.written() and not other.written()
    ckpts = prep.run_dir / "ckpt" / "attentionnce" / "v1"
    ckpts.mkdir(parents=True)
    torch.save({"epoch": 0}, ckpts / "name-v1-ep=0.ckpt")
    (ckpts / "name-v1-ep=1.ckpt").write_bytes(b"PK\x03\x04 torn")
    assert runner.last_checkpoint(prep.run_dir) == (ckpts / "name-v1-ep=0.ckpt", 1)


@pytest.mark.parametrize("gpus, dali", [(1, False), (2, True)])
def test_on_gpus_every_run_takes_them_all_in_bf16(tmp_path, monkeypatch, gpus, dali):
    """The GPU branch, composed on a CPU machine: every visible GPU (DDP and SyncBatchNorm where
    several), bf16, loader workers, the config's data format where DALI is installed."""
    import importlib.util

    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    find = importlib.util.find_spec
    spec = lambda name: (dali or None) if name == "nvidia.dali" else find(name)  # noqa: E731
    monkeypatch.setattr(importlib.util, "find_spec", spec)
    budget = runner.Budget("imagenet100", tmp_path, "", Preset(1, 1, 1, 8, (0,)))
    cfg = runner.prepare(Run(Row("attentionnce", 4), 0, 1), budget, tmp_path).resolved
    assert cfg.accelerator == "gpu" and list(cfg.devices) == list(range(gpus))
    assert (cfg.strategy, cfg.sync_batchnorm) == (("ddp", True) if gpus > 1 else ("auto", False))
    assert cfg.precision == "bf16-mixed" and cfg.data.num_workers > 0
    assert cfg.data.format == "image_folder"  # as our config says
    byol = runner.prepare(Run(Row("byol"), 0, 1), budget, tmp_path).resolved  # solo's asks DALI
    assert byol.data.format == ("dali" if dali else "image_folder")
