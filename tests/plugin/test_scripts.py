"""The plugin inside solo-learn's own, unmodified scripts (main_pretrain.py, main_linear.py), run as
subprocesses on a tiny image folder on the CPU (gloo for DDP). FAIL, never skip, without
solo-learn and its checkout."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Dict

import pytest
import torch

from attnce_plugin.install import require_solo, solo_checkout_dir
from benchmarks.recorder import read_records

require_solo()

from helpers.configs import pretrain_argv  # noqa: E402
from helpers.scripts import find_checkpoints, run_script  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from attnce_plugin.methods import METHODS  # noqa: E402
from attnce_plugin.seam import register  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cifar_run(tiny_image_folder, tmp_path_factory) -> Dict[str, Path]:
    """One paper-setting run (2 anchors + 4 positives at 32 px) with validation, shared by the
    resume and linear tests."""
    cwd = tmp_path_factory.mktemp("cifar_run")
    record = cwd / "run.jsonl"
    argv = pretrain_argv(
        "cifar", "attentionnce.yaml", tiny_image_folder, cwd / "ckpt", validate=True, record=record
    )
    run_script(argv + ["++method_kwargs.attention_log_every=1"], cwd)
    (ckpt,) = find_checkpoints(cwd / "ckpt")
    return {"ckpt": ckpt, "record": record}


def test_paper_setting_trains_and_logs_the_diagnostics(cifar_run):
    args = json.loads((cifar_run["ckpt"].parent / "args.json").read_text())
    assert args["method"] == "attentionnce"
    assert (args["data"]["num_large_crops"], args["data"]["num_small_crops"]) == (2, 4)
    assert (args["method_kwargs"]["d_pos"], args["method_kwargs"]["d_neg"]) == (1, 10)
    # The choices as plain strings, the defaults filled in (the config sets neither of these).
    assert (args["method_kwargs"]["loss"], args["method_kwargs"]["anchor"]) == (
        "attentionnce",
        "views",
    )
    records = read_records(cifar_run["record"])
    (epoch,) = [r for r in records if r["event"] == "epoch"]
    logged = [
        "train_nce_loss",
        "train_attn_eff_num_positives",
        "train_attn_max_beta",
        "train_attn_eff_num_negatives",
        "train_repr_alignment",
        "train_repr_mi_bound",
        "val_acc1",
        "val_repr_feats_eff_rank",
        "val_repr_z_uniformity",
    ]
    for key in logged:
        assert key in epoch, f"{key} not logged; logged: {sorted(epoch)}"
    # M = 4; K = 2 * 4 images - 2 = 6 negatives per anchor (batch 4).
    assert 1.0 <= epoch["train_attn_eff_num_positives"] <= 4.0 + 1e-4
    assert 1.0 <= epoch["train_attn_eff_num_negatives"] <= 6.0 + 1e-3
    losses = [r["loss"] for r in records if r["event"] == "step"]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)


def test_checkpoint_rebuilds_from_its_args_json_also_with_0_5s_compile_key(cifar_run):
    """As main_knn.py:124-133 and the benchmark's probes rebuild a method: from args.json."""
    register()
    args = json.loads((cifar_run["ckpt"].parent / "args.json").read_text())
    args["method_kwargs"]["compile"] = True  # 0.5 wrote this key; 0.6 has no such setting
    model = METHODS[args["method"]](OmegaConf.create(args))
    state = torch.load(cifar_run["ckpt"], map_location="cpu", weights_only=False)["state_dict"]
    model.load_state_dict(state)
    assert model.num_positive_crops == 4 and model.kwargs.d_neg == 10


def test_resume_from_checkpoint(cifar_run, tiny_image_folder, tmp_path):
    argv = pretrain_argv("cifar", "attentionnce.yaml", tiny_image_folder, tmp_path / "ckpt")
    run_script(argv + ["max_epochs=2", f"++resume_from_checkpoint='{cifar_run['ckpt']}'"], tmp_path)
    (ckpt,) = find_checkpoints(tmp_path / "ckpt")  # resumed after epoch 0: only epoch 1 here
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    assert state["epoch"] == 1 and state["global_step"] == 4


def _linear(config: str, ckpt: Path, data: Dict[str, Path], cwd: Path) -> dict:
    argv = [
        str(solo_checkout_dir() / "main_linear.py"),
        "--config-path",
        "pkg://attnce_plugin.configs",
        "--config-name",
        config,
        f"pretrained_feature_extractor='{ckpt}'",  # quoted: '=' in names
        "data.dataset=custom",
        "data.format=image_folder",
        f"data.train_path={data['train']}",
        f"data.val_path={data['val']}",
        "data.num_workers=0",
        "optimizer.batch_size=4",
        "trainer=cpu",
        "max_epochs=1",
        "++limit_train_batches=1",
        "++limit_val_batches=1",
        f"checkpoint.dir={cwd / 'lin'}",
        "auto_resume.enabled=False",
    ]
    proc = run_script(argv, cwd)
    assert find_checkpoints(cwd / "lin"), proc.stdout[-3000:]
    return json.loads(next((cwd / "lin").rglob("args.json")).read_text())


def test_main_linear_on_a_checkpoint(cifar_run, tiny_image_folder, tmp_path):
    args = _linear("linear/cifar/attentionnce.yaml", cifar_run["ckpt"], tiny_image_folder, tmp_path)
    assert args["pretrain_method"] == "attentionnce"


def test_paper_recipe_pretrains_and_its_linear_config_evaluates(tiny_image_folder, tmp_path):
    """The authors' ResNet-50 stem registered in both scripts' processes by the Hydra callback."""
    argv = pretrain_argv(
        "stl10", "attentionnce_paper.yaml", tiny_image_folder, tmp_path / "ckpt", crop=16
    )
    run_script(argv, tmp_path)
    (ckpt,) = find_checkpoints(tmp_path / "ckpt")
    state = torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]
    assert state["backbone.conv1.weight"].shape == (64, 3, 3, 3)  # the authors' 3x3 stem
    assert "projector.0.bias" not in state and "projector.1.running_mean" in state  # mlp_bn
    args = _linear("linear/stl10/attentionnce_paper.yaml", ckpt, tiny_image_folder, tmp_path)
    assert args["backbone"]["name"] == "cifar_resnet50" and args["optimizer"]["name"] == "adam"


@pytest.mark.parametrize(
    "family,config",
    [("stl10", "attentionnce_multicrop.yaml"), ("imagenet-100", "mocov3_attentionnce.yaml")],
)
def test_other_families_train(family, config, tiny_image_folder, tmp_path):
    record = tmp_path / "run.jsonl"
    run_script(
        pretrain_argv(family, config, tiny_image_folder, tmp_path / "ckpt", record=record), tmp_path
    )
    (epoch,) = [r for r in read_records(record) if r["event"] == "epoch"]
    loss_key = "train_contrastive_loss" if "mocov3" in config else "train_nce_loss"
    assert math.isfinite(epoch[loss_key]) and epoch["train_attn_max_beta"] >= 1.0, epoch


def test_ddp_two_processes(tiny_image_folder, tmp_path):
    """The Hydra callback registers and wraps parse_cfg in the DDP child too, or it would fail at
    main_pretrain's METHODS lookup or its num_large_crops check."""
    argv = pretrain_argv("cifar", "mocov3_attentionnce.yaml", tiny_image_folder, tmp_path / "ckpt")
    proc = run_script(argv + ["strategy=ddp", 'devices="02"'], tmp_path, threads=1)
    (ckpt,) = find_checkpoints(tmp_path / "ckpt") or [None]
    assert ckpt is not None, proc.stdout[-3000:]
    args = json.loads((ckpt.parent / "args.json").read_text())
    assert args["devices"] == "02" and args["optimizer"]["lr"] == pytest.approx(0.3 * 4 * 2 / 256)


@pytest.mark.parametrize(
    "override,message",
    [
        ("++method_kwargs.d_negg=1", "method_kwargs.d_negg is not a setting"),
        ("++method_kwargs.neg_weighting=hcl", "method_kwargs.neg_weighting"),
        ("augmentations.0.num_crops=3", "the anchors are the first 2 crops"),
    ],
)
def test_bad_settings_refused_before_training(override, message, tiny_image_folder, tmp_path):
    argv = pretrain_argv("cifar", "attentionnce.yaml", tiny_image_folder, tmp_path / "ckpt")
    proc = run_script(argv + [override], tmp_path, check=False)
    assert proc.returncode != 0 and message in proc.stdout, proc.stdout[-3000:]
    assert "Epoch 0" not in proc.stdout and not find_checkpoints(tmp_path / "ckpt")
