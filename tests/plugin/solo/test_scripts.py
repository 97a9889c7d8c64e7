"""The plugin inside solo-learn: its own unmodified scripts, run as subprocesses on a tiny image folder.

These tests need solo-learn >= 1.0.6 with its checkout (main_pretrain.py, main_linear.py); they
FAIL, not skip, when it is missing. They run on CPU (gloo for the 2-process DDP run) and take a
few minutes on 2 cores.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Dict, List

import pytest
import torch
from omegaconf import OmegaConf

from attnce_plugin.callbacks.recorder import read_records
from attnce_plugin.configs import config_dir
from attnce_plugin.solo_compat import require_solo, solo_checkout_dir

require_solo()  # loudly, at collection: these tests are the integration, they must not skip

from helpers.configs import pretrain_argv  # noqa: E402
from helpers.scripts import find_checkpoints, read_metrics_csv, run_script  # noqa: E402

pytestmark = pytest.mark.integration  # trains through solo-learn or runs its scripts


PRETRAIN_CONFIGS = config_dir() / "pretrain"
LINEAR_CONFIGS = config_dir() / "linear"
FAMILIES = ("cifar", "stl10", "imagenet-100", "custom")

# --------------------------------------------------------------------------- shared pretrain run


@pytest.fixture(scope="module")
def cifar_run(tiny_image_folder, tmp_path_factory) -> Dict[str, Path]:
    """One paper-setting run (2 anchors + 4 positives at 32 px) with the online linear probe,
    shared by the metric, resume and linear tests."""
    cwd = tmp_path_factory.mktemp("cifar_run")
    ckpt_dir = cwd / "ckpt"
    record = cwd / "run.jsonl"
    argv = pretrain_argv(
        "cifar", "attentionnce.yaml", tiny_image_folder, ckpt_dir, validate=True, record=record
    )
    proc = run_script(argv, cwd)
    ckpts = find_checkpoints(ckpt_dir)
    assert len(ckpts) == 1, f"expected one checkpoint, found {ckpts}\n{proc.stdout[-3000:]}"
    return {"cwd": cwd, "ckpt_dir": ckpt_dir, "ckpt": ckpts[0], "record": record}


def test_paper_setting_trains_and_logs_attention(cifar_run):
    args = json.loads((cifar_run["ckpt"].parent / "args.json").read_text())
    assert args["method"] == "attentionnce"
    # The crop roles solo-learn saw: 2 anchors (large) and the 4 same-size positives as "small".
    assert args["data"]["num_large_crops"] == 2 and args["data"]["num_small_crops"] == 4
    assert args["method_kwargs"]["d_pos"] == 1 and args["method_kwargs"]["d_neg"] == 10

    records = read_records(cifar_run["record"])  # diagnostics.record, whatever logger is installed
    (epoch,) = [r for r in records if r["event"] == "epoch"]
    for key in (
        "train_nce_loss",
        "train_attn_eff_num_positives",
        "train_attn_max_beta",
        "train_class_loss",
        "train_repr_alignment",
        "val_acc1",
        "val_repr_feats_eff_rank",
    ):
        assert key in epoch, f"{key} not logged; logged: {sorted(epoch)}"
    eff = epoch["train_attn_eff_num_positives"]
    assert 1.0 <= eff <= 4.0 + 1e-4, eff  # 1 <= effective M <= M = 4
    losses = [r["loss"] for r in records if r["event"] == "step"]
    assert len(losses) == 2 and all(x is not None and math.isfinite(x) for x in losses)


def test_resume_from_checkpoint(cifar_run, tiny_image_folder, tmp_path):
    ckpt_dir = tmp_path / "ckpt"
    run_script(
        pretrain_argv(
            "cifar",
            "attentionnce.yaml",
            tiny_image_folder,
            ckpt_dir,
            extra=["max_epochs=2", f"++resume_from_checkpoint='{cifar_run['ckpt']}'"],
        ),
        tmp_path,
    )
    ckpts = find_checkpoints(ckpt_dir)
    # Resumed after epoch 0, so only epoch 1 was trained (and saved) here.
    assert [c.name.endswith("ep=1.ckpt") for c in ckpts] == [True], ckpts
    state = torch.load(ckpts[0], map_location="cpu", weights_only=False)
    assert state["epoch"] == 1 and state["global_step"] == 4


def test_main_linear_on_checkpoint(cifar_run, tiny_image_folder, tmp_path):
    proc = run_script(
        [
            str(solo_checkout_dir() / "main_linear.py"),
            "--config-path",
            str(LINEAR_CONFIGS / "cifar"),
            "--config-name",
            "attentionnce.yaml",
            # quoted: solo's checkpoint names contain '=', which Hydra's override grammar rejects bare
            f"pretrained_feature_extractor='{cifar_run['ckpt']}'",
            "data.dataset=custom",
            "data.format=image_folder",
            f"data.train_path={tiny_image_folder['train']}",
            f"data.val_path={tiny_image_folder['val']}",
            "data.num_workers=0",
            "optimizer.batch_size=4",
            "trainer=cpu",
            "max_epochs=1",
            "++limit_train_batches=1",
            "++limit_val_batches=1",
            f"checkpoint.dir={tmp_path / 'ckpt'}",
            "auto_resume.enabled=False",
        ],
        tmp_path,
        csv_logger=True,  # read_metrics_csv, with or without tensorboard installed
    )
    assert find_checkpoints(tmp_path / "ckpt"), proc.stdout[-3000:]
    rows = read_metrics_csv(tmp_path)
    assert rows and any(r.get("val_acc1") for r in rows)


@pytest.mark.gpu
def test_knn_wrapper_loads_our_checkpoint(cifar_run, tiny_image_folder, tmp_path):
    """main_knn.py through our wrapper: the method is found in METHODS and the model built.

    solo-learn's main_knn.py hard-codes .cuda(): without a GPU it must get as far as that call.
    With one, the CPU-trained checkpoint must be loaded onto the GPU (the wrapper's map location)
    and the kNN options not given (all but --k) get solo-learn's defaults: 2 feature types x
    (1 euclidean + 8 cosine temperatures) results. Needs torchmetrics < 1.0 (the wrapper refuses
    others, naming the fix).
    """
    proc = run_script(
        [
            "-m",
            "attnce_plugin.cli.knn",
            "--pretrained_checkpoint_dir",
            str(cifar_run["ckpt"].parent),
            "--dataset",
            "custom",
            "--train_data_path",
            str(tiny_image_folder["train"]),
            "--val_data_path",
            str(tiny_image_folder["val"]),
            "--num_workers",
            "0",
            "--batch_size",
            "4",
            "--k",
            "3",
        ],
        tmp_path,
        check=torch.cuda.is_available(),
    )
    if torch.cuda.is_available():
        assert proc.stdout.count("Result: acc@1") == 2 * (1 + 8), proc.stdout[-3000:]
    else:
        assert "KeyError" not in proc.stdout, proc.stdout[-3000:]
        assert (
            ".cuda(" in proc.stdout or "CUDA" in proc.stdout or "NVIDIA" in proc.stdout
        ), proc.stdout[-3000:]


def test_knn_wrapper_runs_main_knn_to_results_on_cpu(
    cifar_run, tiny_image_folder, monkeypatch, capsys
):
    """The whole of main_knn.py through the wrapper, in this process, with ``.cuda()`` made a
    no-op (no GPU here): with only the required arguments, the wrapper's defaults (solo-learn's
    knn.sh values) let it run every combination to the end instead of failing after the feature
    extraction (``args.feature_type`` is None in solo-learn's parser)."""
    from attnce_plugin.cli import knn as knn_cli

    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *args, **kwargs: self)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("sys.argv", ["attnce-knn"])  # restored after the wrapper rewrites it
    knn_cli.main(
        [
            "--pretrained_checkpoint_dir",
            str(cifar_run["ckpt"].parent),
            "--dataset",
            "custom",
            "--train_data_path",
            str(tiny_image_folder["train"]),
            "--val_data_path",
            str(tiny_image_folder["val"]),
            "--num_workers",
            "0",
            "--batch_size",
            "4",
        ]
    )
    out = capsys.readouterr()
    assert "not given, using solo-learn's values" in out.err
    assert "### BACKBONE ###" in out.out and "### PROJECTOR ###" in out.out
    # 2 feature types x 8 k x (1 euclidean + 8 cosine temperatures).
    assert out.out.count("Result: acc@1") == 2 * 8 * (1 + 8), out.out[-3000:]


def test_checkpoint_loads_to_the_arranged_map_location(cifar_run):
    """What the knn/umap wrappers arrange reaches Lightning's loading (a recording map location
    stands in for "cuda"), an explicit map_location wins, and a config with compile and
    sync_batchnorm, refused for training, still loads for evaluation."""
    from attnce_plugin.cli import checkpoints_loaded_to
    from attnce_plugin.methods import AttentionNCE, MethodConfigError

    cfg = OmegaConf.create(json.loads((cifar_run["ckpt"].parent / "args.json").read_text()))
    seen: List[str] = []

    def record(storage, location):
        seen.append(location)
        return storage

    with checkpoints_loaded_to(record):
        model = AttentionNCE.load_from_checkpoint(cifar_run["ckpt"], strict=False, cfg=cfg)
    assert seen and set(seen) == {"cpu"}  # every tensor went through the arranged location
    assert model.device.type == "cpu"
    seen.clear()
    with checkpoints_loaded_to(record):
        AttentionNCE.load_from_checkpoint(
            cifar_run["ckpt"], map_location="cpu", strict=False, cfg=cfg
        )
    assert seen == []

    both = OmegaConf.merge(cfg, {"sync_batchnorm": True, "method_kwargs": {"compile": True}})
    with pytest.raises(MethodConfigError, match="method_kwargs.compile=true cannot be combined"):
        AttentionNCE(both.copy()).setup("fit")
    model = AttentionNCE.load_from_checkpoint(cifar_run["ckpt"], strict=False, cfg=both.copy())
    assert model.cfg.method_kwargs.compile is True


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed"])
def test_pretrain_at_mixed_precision(precision, device, tiny_image_folder, tmp_path):
    """A shipped config through main_pretrain.py at the GPU precisions: on CUDA with the shipped
    trainer (trainer/gpu.yaml: DDP, SyncBatchNorm) on one device, on the CPU in one process. The
    precision Lightning used (the run recorder's), every step's loss finite, a checkpoint."""
    if device.type == "cpu" and precision == "16-mixed":
        pytest.skip("16-mixed is fp16 autocast with a GradScaler, CUDA's; `--device cuda` runs it")
    ckpt_dir = tmp_path / "ckpt"
    argv = pretrain_argv("cifar", "attentionnce.yaml", tiny_image_folder, ckpt_dir)
    if device.type == "cuda":  # pretrain_argv's smoke trainer=cpu would keep the CPU accelerator
        argv = ["trainer=gpu" if a == "trainer=cpu" else a for a in argv]
    argv += [f"precision={precision}"]
    record = tmp_path / "record.jsonl"
    run_script(argv + [f"++diagnostics.record={record}"], tmp_path)
    start = [r for r in read_records(record) if r["event"] == "fit_start"]
    assert [r["precision"] for r in start] == [precision], start
    assert (start[0]["sync_batchnorm_layers"] > 0) == (device.type == "cuda"), start
    ckpts = find_checkpoints(ckpt_dir)
    assert len(ckpts) == 1, ckpts
    args = json.loads((ckpts[0].parent / "args.json").read_text())
    assert args["precision"] == precision
    losses = [r["loss"] for r in read_records(record) if r["event"] == "step"]
    assert losses and all(x is not None and math.isfinite(x) for x in losses), losses


# --------------------------------------------------------------------------- the other families


@pytest.mark.parametrize(
    "family,config_name",
    [
        ("stl10", "attentionnce_multicrop.yaml"),
        ("imagenet-100", "mocov3_attentionnce.yaml"),
        ("custom", "attentionnce.yaml"),
    ],
)
def test_pretrain_config_family(family, config_name, tiny_image_folder, tmp_path):
    ckpt_dir, record = tmp_path / "ckpt", tmp_path / "run.jsonl"
    run_script(
        pretrain_argv(family, config_name, tiny_image_folder, ckpt_dir, record=record), tmp_path
    )
    ckpts = find_checkpoints(ckpt_dir)
    assert len(ckpts) == 1, ckpts
    args = json.loads((ckpts[0].parent / "args.json").read_text())
    assert args["data"]["num_large_crops"] == 2 and args["data"]["num_small_crops"] == 4
    records = read_records(record)
    (epoch,) = [r for r in records if r["event"] == "epoch"]
    loss_key = "train_contrastive_loss" if "mocov3" in config_name else "train_nce_loss"
    assert math.isfinite(epoch[loss_key]) and epoch["train_attn_max_beta"] >= 1.0, epoch
    losses = [r["loss"] for r in records if r["event"] == "step"]
    assert losses and all(x is not None and math.isfinite(x) for x in losses), records


def test_ddp_two_processes(tiny_image_folder, tmp_path):
    """2 processes (gloo): the Hydra callback must register and set crop roles in the DDP child
    too, or the child would fail at main_pretrain's num_large_crops check / METHODS lookup."""
    ckpt_dir = tmp_path / "ckpt"
    argv = pretrain_argv("cifar", "mocov3_attentionnce.yaml", tiny_image_folder, ckpt_dir)
    proc = run_script(argv + ["strategy=ddp", 'devices="02"'], tmp_path, threads=1)
    ckpts = find_checkpoints(ckpt_dir)
    assert len(ckpts) == 1, proc.stdout[-3000:]
    # gloo's rendezvous waits for both ranks, so a finished run means the child trained too;
    # solo scaled the learning rate by len(devices) == 2 processes.
    args = json.loads((ckpts[0].parent / "args.json").read_text())
    assert args["devices"] == "02" and args["strategy"] == "ddp"
    assert args["optimizer"]["lr"] == pytest.approx(0.3 * 4 * 2 / 256)
    assert args["data"]["num_large_crops"] == 2 and args["data"]["num_small_crops"] == 4


# --------------------------------------------------------------------------- refusals


def _write_augmentations(extra_dir: Path, name: str, pipelines: List[Dict[str, int]]) -> None:
    """A group option ``augmentations/<name>.yaml``: the shipped anchor recipe with other sizes."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(PRETRAIN_CONFIGS / "cifar"), version_base="1.2"):
        base = compose("attentionnce.yaml").augmentations[0]
    out = []
    for spec in pipelines:
        p = OmegaConf.to_container(base, resolve=True)
        p.update(spec)
        out.append(p)
    (extra_dir / "augmentations").mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create(out), extra_dir / "augmentations" / f"{name}.yaml")


def test_bad_layout_refused_before_training(tiny_image_folder, tmp_path):
    """One layout through main_pretrain.py: the refusal is wired in before training starts (each
    refused layout and its message: test_crops.py, in-process)."""
    name, message = "small_first", "a small pipeline comes before a large one"
    pipelines = [{"crop_size": 16, "num_crops": 2}, {"crop_size": 32, "num_crops": 4}]
    extra_dir = tmp_path / "extra_configs"
    _write_augmentations(extra_dir, name, pipelines)
    argv = pretrain_argv("cifar", "attentionnce.yaml", tiny_image_folder, tmp_path / "ckpt")
    argv = [a for a in argv if not a.startswith("views.")]
    # argparse wants the option before Hydra's positional overrides; the new group option comes
    # last in the defaults list, so its list replaces the shipped one.
    argv = [argv[0], "--config-dir", str(extra_dir), *argv[1:], f"+augmentations={name}"]
    proc = run_script(argv, tmp_path, check=False)
    assert proc.returncode != 0
    assert "CropLayoutError" in proc.stdout and message in proc.stdout, proc.stdout[-3000:]
    assert not find_checkpoints(tmp_path / "ckpt")
    assert "Epoch 0" not in proc.stdout  # refused before training
