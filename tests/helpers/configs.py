"""Shipped configs shrunk for tiny in-process CPU models and CPU smoke runs, and ready-made
batches."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch

#: Hydra overrides that shrink every test run: one epoch of batch 4 on the CPU, custom data.
SMALL_RUN = "data.dataset=custom trainer=cpu optimizer.batch_size=4 max_epochs=1".split()


def compose(path: str, overrides: Sequence[str] = ()):
    """The shipped config at ``path`` (in the configs folder) composed with ``overrides``, as
    solo-learn's scripts get it (not struct)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    from attnce_plugin.configs import config_dir

    with initialize_config_dir(str(config_dir() / Path(path).parent), version_base="1.2"):
        cfg = hydra_compose(Path(path).name, overrides=list(overrides))
    OmegaConf.set_struct(cfg, False)
    return cfg


def compose_pretrain_cfg(
    config_name: str, train_path: Path, overrides: Sequence[str] = (), family: str = "cifar"
):
    """The shipped ``pretrain/<family>/<config_name>`` for a tiny in-process CPU model (small
    projector, no validation, multicrop positives at 16 px; ``overrides`` last), through
    solo-learn's ``parse_cfg`` wrapped by the plugin (crop roles set)."""
    import solo.args.pretrain as solo_pretrain_args

    from attnce_plugin.seam import wrap_parse_cfg

    base = SMALL_RUN + [f"data.train_path={train_path}", "~data.val_path"]
    base += "method_kwargs.proj_hidden_dim=32 method_kwargs.proj_output_dim=16".split()
    base += ["++scheduler.warmup_epochs=0"]
    if "multicrop" in config_name and not any("positive_crop_size" in o for o in overrides):
        base.append("views.positive_crop_size=16")
    cfg = compose(f"pretrain/{family}/{config_name}", [*base, *overrides])
    return wrap_parse_cfg(solo_pretrain_args.parse_cfg)(cfg)


def batches(num_steps: int, num_crops: int, b: int = 4, size: int = 32, small: int = 16):
    """Fixed batches ``[indexes, [crops], targets]``: 2 anchors at ``size``, the rest ``small``."""
    g = torch.Generator().manual_seed(123)
    sizes, out = [size] * 2 + [small] * (num_crops - 2), []
    for step in range(num_steps):
        crops = [torch.randn(b, 3, s, s, generator=g) for s in sizes]
        out.append([torch.arange(b) + step * b, crops, torch.randint(0, 5, (b,), generator=g)])
    return out


def pretrain_argv(
    family: str,
    config_name: str,
    data: Dict[str, Path],
    ckpt_dir: Path,
    *,
    validate: bool = False,
    record: Optional[Path] = None,
    crop: int = 32,
) -> List[str]:
    """Command line of ``main_pretrain.py`` for a shipped config, shrunk to a CPU smoke run of 2
    steps; with ``record``, the benchmark's ``RunRecorder`` (``diagnostics.callbacks``, as the
    benchmark attaches it) writes the run's epochs to that JSON-lines file."""
    from attnce_plugin.configs import config_dir
    from attnce_plugin.install import solo_checkout_dir

    argv = [str(solo_checkout_dir() / "main_pretrain.py"), "--config-path"]
    argv += [str(config_dir() / "pretrain" / family), "--config-name", config_name, *SMALL_RUN]
    argv += [f"data.train_path={data['train']}", f"checkpoint.dir={ckpt_dir}"]
    argv += (
        "data.format=image_folder data.num_workers=0 auto_resume.enabled=False "
        "++limit_train_batches=2 ++limit_val_batches=1 ++log_every_n_steps=1 "
        "++scheduler.warmup_epochs=0 method_kwargs.proj_hidden_dim=64 "
        f"method_kwargs.proj_output_dim=32 views.crop_size={crop}"
    ).split()
    argv += ["views.positive_crop_size=16"] if "multicrop" in config_name else []
    argv += ["method_kwargs.pred_hidden_dim=64"] if "mocov3" in config_name else []
    if record is not None:
        rec = "++diagnostics.callbacks.record"
        argv += [f"{rec}._target_=benchmarks.recorder.RunRecorder", f"{rec}.path={record}"]
    return argv + [f"data.val_path={data['val']}" if validate else "~data.val_path"]
