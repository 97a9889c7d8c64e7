"""The plugin inside solo-learn's own, unmodified scripts (main_pretrain.py, main_linear.py), run as
subprocesses on a tiny image folder on the CPU (gloo for DDP). FAIL, never skip, without
solo-learn and its checkout."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import List, Sequence

import pytest
import torch
from helpers.configs import SMALL_RUN, pretrain_argv
from omegaconf import OmegaConf

from attnce_plugin.install import solo_checkout_dir
from attnce_plugin.methods import METHODS
from attnce_plugin.seam import register
from benchmarks.recorder import read_records

pytestmark = pytest.mark.integration

#: This checkout, first on the scripts' PYTHONPATH, so that they test this code even when the
#: editable install points at another clone; then its tests/ (helpers.resume's callbacks).
REPO = Path(__file__).resolve().parents[2]


def run_script(argv: Sequence[str], cwd: Path, *, threads: int = 2, check: bool = True):
    """``python <argv...>`` in ``cwd`` with quiet warnings, bounded threads and no wandb; stdout
    and stderr together; with ``check``, a failure shows the output's tail."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "WANDB_MODE": "disabled"}
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), HYDRA_FULL_ERROR="1")
    paths = [str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    command = [sys.executable, *argv]
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    proc.stdout += proc.stderr  # what the tests search, in one string
    if check and proc.returncode != 0:
        head = " ".join(argv[:3])
        pytest.fail(f"{head} ... exited with {proc.returncode}:\n{proc.stdout[-6000:]}")
    return proc


def test_paper_setting_trains_logs_the_diagnostics_and_rebuilds_from_args_json(
    tiny_image_folder, tmp_path
):
    """2 anchors + 4 positives at 32 px, with validation; the checkpoint rebuilds from its
    args.json as main_knn.py:124-133 and the benchmark's probes rebuild a method."""
    record = tmp_path / "run.jsonl"
    argv = pretrain_argv(
        "cifar",
        "attentionnce.yaml",
        tiny_image_folder,
        tmp_path / "ckpt",
        validate=True,
        record=record,
    )
    run_script(argv + ["++method_kwargs.attention_log_every=1"], tmp_path)
    (ckpt,) = (tmp_path / "ckpt").rglob("*.ckpt")
    args = json.loads((ckpt.parent / "args.json").read_text())
    assert (args["data"]["num_large_crops"], args["data"]["num_small_crops"]) == (2, 4)
    kw = args["method_kwargs"]
    # The choices as plain strings, the defaults filled in (the config sets no loss, no anchor).
    assert (kw["d_pos"], kw["d_neg"], kw["loss"], kw["anchor"]) == (1, 10, "attentionnce", "views")
    (epoch,) = read_records(record, "epoch")
    logged = "train_nce_loss train_attn_eff_num_positives train_attn_max_beta val_acc1 "
    logged += "train_attn_eff_num_negatives train_repr_alignment train_repr_mi_bound "
    logged += "val_repr_feats_eff_rank val_repr_z_uniformity"
    missing = set(logged.split()) - set(epoch)
    assert not missing, f"{missing} not logged; logged: {sorted(epoch)}"
    # M = 4; K = 2 * 4 images - 2 = 6 negatives per anchor (batch 4).
    assert 1.0 <= epoch["train_attn_eff_num_positives"] <= 4.0 + 1e-4
    assert 1.0 <= epoch["train_attn_eff_num_negatives"] <= 6.0 + 1e-3
    assert math.isfinite(epoch["train_nce_loss"])  # null in the record if not
    register()
    model = METHODS[args["method"]](OmegaConf.create(args))
    model.load_state_dict(torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"])
    assert model.num_positive_crops == 4 and model.kwargs.d_neg == 10


def test_paper_recipe_pretrains_and_its_linear_config_evaluates(tiny_image_folder, tmp_path):
    """The authors' ResNet-50 stem registered in both scripts' processes by the Hydra callback."""
    argv = pretrain_argv(
        "stl10", "attentionnce_paper.yaml", tiny_image_folder, tmp_path / "ckpt", crop=16
    )
    run_script(argv, tmp_path)
    (ckpt,) = (tmp_path / "ckpt").rglob("*.ckpt")
    state = torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]
    assert state["backbone.conv1.weight"].shape == (64, 3, 3, 3)  # the authors' 3x3 stem
    assert "projector.0.bias" not in state and "projector.1.running_mean" in state  # mlp_bn
    argv = [str(solo_checkout_dir() / "main_linear.py"), "--config-path"]
    argv += ["pkg://attnce_plugin.configs", "--config-name", "linear/stl10/attentionnce_paper.yaml"]
    # The checkpoint quoted: its name holds '='.
    argv += [*SMALL_RUN, f"pretrained_feature_extractor='{ckpt}'", f"checkpoint.dir={tmp_path}/lin"]
    argv += [f"data.{k}_path={tiny_image_folder[k]}" for k in ("train", "val")]
    argv += "data.format=image_folder data.num_workers=0 auto_resume.enabled=False".split()
    run_script(argv + ["++limit_train_batches=1", "++limit_val_batches=1"], tmp_path)
    assert any((tmp_path / "lin").rglob("*.ckpt"))
    args = json.loads(next((tmp_path / "lin").rglob("args.json")).read_text())
    assert args["backbone"]["name"] == "cifar_resnet50" and args["optimizer"]["name"] == "adam"


def test_small_positive_crops_train(tiny_image_folder, tmp_path):
    """Multi-crop positives through solo-learn's own loader (another family's config)."""
    record = tmp_path / "run.jsonl"
    config = "attentionnce_multicrop.yaml"
    run_script(pretrain_argv("stl10", config, tiny_image_folder, tmp_path, record=record), tmp_path)
    (epoch,) = read_records(record, "epoch")
    assert math.isfinite(epoch["train_nce_loss"]) and epoch["train_attn_max_beta"] >= 1.0, epoch


def test_ddp_two_processes(tiny_image_folder, tmp_path):
    """The Hydra callback registers and wraps parse_cfg in the DDP child too, or it would fail at
    main_pretrain's METHODS lookup or its num_large_crops check."""
    argv = pretrain_argv("cifar", "mocov3_attentionnce.yaml", tiny_image_folder, tmp_path / "ckpt")
    run_script(argv + ["strategy=ddp", 'devices="02"'], tmp_path, threads=1)
    (ckpt,) = (tmp_path / "ckpt").rglob("*.ckpt")
    args = json.loads((ckpt.parent / "args.json").read_text())
    assert args["devices"] == "02" and args["optimizer"]["lr"] == pytest.approx(0.3 * 4 * 2 / 256)


def _tensors_equal(a, b) -> bool:
    """Nested dicts and lists of tensors and numbers, equal leaf by leaf."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_tensors_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_tensors_equal(x, y) for x, y in zip(a, b))
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


@pytest.mark.parametrize("config", ["attentionnce.yaml", "mocov3_attentionnce.yaml"])
def test_a_killed_run_resumes_from_its_checkpoint(config, tiny_image_folder, tmp_path):
    """SIGKILL after epoch 1's checkpoint, then solo-learn's resume_from_checkpoint: the fit
    starts at epoch 2 from exactly the checkpoint's weights (MoCo's momentum encoder included),
    optimizer and scheduler, and the record holds each epoch once. The uninterrupted run's weights
    after epoch 1 are the killed run's; after epoch 2 they differ (docs/design.md says why)."""
    helpers = "++diagnostics.callbacks"

    def argv(name: str, *extra: str) -> List[str]:
        out = tmp_path / name
        line = pretrain_argv("cifar", config, tiny_image_folder, out / "ckpt", record=out / "rec")
        return line + ["++max_epochs=2", "++checkpoint.keep_prev=True", *extra]

    run_script(argv("full"), tmp_path)
    kill = [
        f"{helpers}.kill._target_=helpers.resume.KillOnce",
        f"{helpers}.kill.marker={tmp_path}/k",
    ]
    killed = run_script(argv("part", *kill), tmp_path, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-3000:]
    (ckpt,) = (tmp_path / "part" / "ckpt").rglob("*-ep=0.ckpt")
    start = [f"{helpers}.start._target_=helpers.resume.StateAtStart"]
    start += [f"{helpers}.start.path={tmp_path}/start.pt", f"++resume_from_checkpoint='{ckpt}'"]
    run_script(argv("part", *kill, *start), tmp_path)

    saved = torch.load(ckpt, map_location="cpu", weights_only=False)
    began = torch.load(tmp_path / "start.pt", weights_only=False)
    assert (began["epoch"], began["global_step"]) == (1, saved["global_step"]) == (1, 2)
    for key in ("state_dict", "optimizer_states", "lr_schedulers"):
        assert _tensors_equal(began[key], saved[key]), key
    assert any("momentum" in k for k in saved["state_dict"]) == ("mocov3" in config)
    # The killed run recorded epoch 1, the resumed one epoch 2 only.
    assert [r["epoch"] for r in read_records(tmp_path / "part" / "rec", "epoch")] == [1, 2]

    def weights(name: str, epoch: int):
        (path,) = (tmp_path / name / "ckpt").rglob(f"*-ep={epoch}.ckpt")
        return torch.load(path, map_location="cpu", weights_only=False)["state_dict"]

    assert _tensors_equal(weights("part", 0), weights("full", 0))
    full, resumed = weights("full", 1), weights("part", 1)
    gaps = {k: float((full[k].double() - resumed[k].double()).abs().max()) for k in full}
    gaps = {k: v for k, v in gaps.items() if full[k].is_floating_point()}
    worst = max(gaps, key=gaps.get)
    print(
        f"\n{config}: after epoch 2, {sum(v > 0 for v in gaps.values())} of {len(gaps)} "
        f"float tensors differ; largest |difference| {gaps[worst]:.3g} in {worst}"
    )
