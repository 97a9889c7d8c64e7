"""The shipped configs: every primary config composes, passes the parse_cfg wrapper and builds its
method; the paper recipe holds the authors' values (docs/paper-recipe.md). Training
through solo-learn's scripts is in test_scripts.py. FAILS, never skips, without solo-learn."""

from __future__ import annotations

import pytest
import solo.args.pretrain as pretrain_args
import torch
from helpers.configs import compose
from omegaconf import OmegaConf

from attnce_plugin.configs import config_dir
from attnce_plugin.methods import METHODS
from attnce_plugin.seam import register, wrap_parse_cfg

PRETRAIN = sorted(p.relative_to(config_dir()) for p in (config_dir() / "pretrain").glob("*/*.yaml"))
LINEAR = sorted(p.relative_to(config_dir()) for p in (config_dir() / "linear").glob("*/*.yaml"))
#: The authors' attention scales (d_pos, d_neg) per dataset family.
PAPER_SCALES = {"cifar": (1, 10), "stl10": (2, 0.5)}


def test_every_family_has_the_config_matrix():
    names = {(p.parent.name, p.stem) for p in PRETRAIN}
    for family in ("cifar", "stl10", "imagenet-100", "custom"):
        for recipe in ("attentionnce", "attentionnce_multicrop", "mocov3_attentionnce"):
            assert (family, recipe) in names
    assert {("cifar", "attentionnce_paper"), ("stl10", "simclr_paper")} <= names


@pytest.mark.parametrize("path", PRETRAIN, ids=str)
def test_pretrain_config_builds_its_method(path, tiny_image_folder):
    register()
    overrides = "data.dataset=custom ~data.val_path data.format=image_folder".split()
    overrides.append(f"data.train_path={tiny_image_folder['train']}")
    cfg = compose(str(path), overrides)
    assert OmegaConf.select(cfg, "hydra.callbacks") is None  # composed without Hydra's own node
    cfg = wrap_parse_cfg(pretrain_args.parse_cfg)(cfg)
    model = METHODS[cfg.method](cfg)
    assert torch.isfinite(sum(p.sum() for p in model.parameters()))
    kw = model.kwargs
    assert cfg.data.num_large_crops == 2
    assert cfg.data.num_small_crops == sum(p.num_crops for p in cfg.augmentations) - 2
    assert cfg.diagnostics.enabled is True
    if path.stem.endswith("_paper"):
        opt = (cfg.optimizer.name, cfg.optimizer.weight_decay, cfg.scheduler.name)
        assert opt == ("adam", 1e-6, "none") and cfg.backbone.name == "cifar_resnet50"
        head = (kw.projector, kw.proj_hidden_dim, kw.proj_output_dim, kw.temperature)
        assert head == ("mlp_bn", 512, 128, 0.5) and str(cfg.precision) == "32"
        assert kw.loss == ("simclr" if path.stem.startswith("simclr") else "attentionnce")
        assert {p.crop_size for p in cfg.augmentations} == {32}
    if path.parent.name in PAPER_SCALES and kw.loss == "attentionnce" and "mocov3" not in path.stem:
        assert (kw.d_pos, kw.d_neg) == PAPER_SCALES[path.parent.name]
    if "multicrop" in path.stem:
        assert kw.positives_update_bn is False
        assert cfg.augmentations[1].crop_size < cfg.augmentations[0].crop_size


@pytest.mark.parametrize("path", LINEAR, ids=str)
def test_linear_config_composes(path):
    cfg = compose(str(path), ["data.dataset=custom"])
    assert cfg.pretrain_method == "attentionnce"
    if path.stem.endswith("_paper"):
        lr = 1e-2 if path.parent.name == "stl10" else 1e-3
        want = ("adam", lr, "cifar_resnet50")
        assert (cfg.optimizer.name, cfg.optimizer.lr, cfg.backbone.name) == want


def test_the_docs_say_what_the_gpu_count_changes():
    """docs/usage.md names the config families that ask for several GPUs, what ``devices=[0]``
    changes, and a multi-node example where each node has its own rank (a hard-coded NODE_RANK=0
    gives two nodes the same ranks); docs/design.md says each process ranks its own at most 2,048
    validation images."""
    usage = (config_dir().parents[1] / "docs" / "usage.md").read_text()
    several = set()
    for path in PRETRAIN:
        cfg = compose(str(path), [])
        if len(cfg.devices) > 1:
            several.add(path.parent.name)
            assert f"`{path.parent.name}`" in usage, path
    assert several and "`'devices=[0]'`" in usage and "halve" in usage
    assert "++num_nodes=2" in usage and "NODE_RANK=$THIS_NODE" in usage
    assert "NODE_RANK=0 " not in usage
    design = (config_dir().parents[1] / "docs" / "design.md").read_text()
    row = next(line for line in design.splitlines() if line.startswith("| `val_repr_{feats,z}_eff"))
    assert "2,048" in row and "GPU count" in row and "same number of GPUs" in row
