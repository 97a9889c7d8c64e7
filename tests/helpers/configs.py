"""Shipped configs shrunk for tiny in-process CPU models, and ready-made batches."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch


def compose_pretrain_cfg(
    config_name: str, train_path: Path, overrides: Sequence[str] = (), family: str = "cifar"
):
    """Compose the shipped ``pretrain/<family>/<config_name>`` for a tiny in-process CPU model and run
    it through solo-learn's ``parse_cfg`` wrapped by the plugin (crop roles set).

    ``trainer=cpu``, small projector, batch 4, 1 epoch, custom data at ``train_path`` without
    validation; the multicrop configs' positive crops shrink to 16 px. ``overrides`` come last.
    """
    import solo.args.pretrain as solo_pretrain_args
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from attnce_plugin.configs import config_dir
    from attnce_plugin.seam import wrap_parse_cfg

    base = [
        "data.dataset=custom",
        f"data.train_path={train_path}",
        "~data.val_path",
        "method_kwargs.proj_hidden_dim=32",
        "method_kwargs.proj_output_dim=16",
        "optimizer.batch_size=4",
        "trainer=cpu",
        "++scheduler.warmup_epochs=0",
        "max_epochs=1",
    ]
    if "multicrop" in config_name and not any(
        o.startswith("views.positive_crop_size") for o in overrides
    ):
        base.append("views.positive_crop_size=16")
    with initialize_config_dir(
        config_dir=str(config_dir() / "pretrain" / family), version_base="1.2"
    ):
        cfg = compose(config_name, overrides=[*base, *overrides])
    OmegaConf.set_struct(cfg, False)
    return wrap_parse_cfg(solo_pretrain_args.parse_cfg)(cfg)


def batches(num_steps: int, num_crops: int, b: int = 4, size: int = 32, small: int = 16):
    """Fixed batches ``[indexes, [crops], targets]``: 2 anchors at ``size``, the rest ``small``."""
    g = torch.Generator().manual_seed(123)
    out = []
    for step in range(num_steps):
        crops = [
            torch.randn(b, 3, size if i < 2 else small, size if i < 2 else small, generator=g)
            for i in range(num_crops)
        ]
        out.append([torch.arange(b) + step * b, crops, torch.randint(0, 5, (b,), generator=g)])
    return out


#: Test crop sizes: the anchors' size becomes LARGE, smaller crops SMALL (CPU budget).
LARGE, SMALL = 32, 16


def _tiny_crop_overrides(config_name: str, crop: int = LARGE) -> List[str]:
    """Hydra overrides that shrink a shipped config's crops, keeping its layout and order."""
    out = [f"views.crop_size={crop}"]
    if "multicrop" in config_name:
        out.append(f"views.positive_crop_size={SMALL}")
    return out


def pretrain_argv(
    family: str,
    config_name: str,
    data: Dict[str, Path],
    ckpt_dir: Path,
    *,
    extra: List[str] = (),
    validate: bool = False,
    record: Optional[Path] = None,
    crop: int = LARGE,
) -> List[str]:
    """Command line of ``main_pretrain.py`` for a shipped config, shrunk to a CPU smoke run
    (``trainer=cpu``); with ``record``, the run's steps and epochs go to that JSON-lines file
    (the benchmark's recorder, attached through ``diagnostics.callbacks``; ``benchmarks.recorder.read_records``).
    """
    from attnce_plugin.configs import config_dir
    from attnce_plugin.install import solo_checkout_dir

    argv = [
        str(solo_checkout_dir() / "main_pretrain.py"),
        "--config-path",
        str(config_dir() / "pretrain" / family),
        "--config-name",
        config_name,
        "data.dataset=custom",
        "data.format=image_folder",
        f"data.train_path={data['train']}",
        "data.num_workers=0",
        "trainer=cpu",
        "optimizer.batch_size=4",
        "max_epochs=1",
        "++limit_train_batches=2",
        "++limit_val_batches=1",
        "++log_every_n_steps=1",
        "++scheduler.warmup_epochs=0",
        f"checkpoint.dir={ckpt_dir}",
        "auto_resume.enabled=False",
        "method_kwargs.proj_hidden_dim=64",
        "method_kwargs.proj_output_dim=32",
        *_tiny_crop_overrides(config_name, crop),
    ]
    if "mocov3" in config_name:
        argv.append("method_kwargs.pred_hidden_dim=64")
    if record is not None:
        argv += [
            "++diagnostics.callbacks.record._target_=benchmarks.recorder.RunRecorder",
            f"++diagnostics.callbacks.record.path={record}",
        ]
    if validate:
        argv.append(f"data.val_path={data['val']}")
    else:
        argv.append("~data.val_path")
    return argv + list(extra)
