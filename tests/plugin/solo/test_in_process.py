"""In-process checks of the solo-learn methods: MoCo v3 equivalence, config validation, configs.

Need solo-learn >= 1.0.6; FAIL (not skip) without it.
"""

from __future__ import annotations

import copy
from typing import List

import pytest
import torch
from omegaconf import OmegaConf

from attnce_plugin.solo_compat import require_solo

require_solo()

import lightning.pytorch as pl  # noqa: E402
import solo.args.pretrain as solo_pretrain_args  # noqa: E402
import solo.methods  # noqa: E402
from helpers.configs import batches as _batches  # noqa: E402
from helpers.configs import compose_pretrain_cfg as _tiny_cfg  # noqa: E402
from helpers.trainer import cpu_trainer  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from attnce_plugin.configs import config_dir  # noqa: E402
from attnce_plugin.methods import (  # noqa: E402
    AttentionNCE,
    CropLayoutError,
    MethodConfigError,
    MoCoV3AttentionNCE,
)
from attnce_plugin.patches import patch_pretrain_parse_cfg, wrap_pretrain_parse_cfg  # noqa: E402
from attnce_plugin.registration import register  # noqa: E402

pytestmark = pytest.mark.integration  # trains through solo-learn or runs its scripts


PRETRAIN_CONFIGS = config_dir() / "pretrain"
PAPER_D = {"cifar": (1, 10), "stl10": (2, 0.5)}


def _compose(family: str, name: str, overrides: List[str] = (), with_hydra: bool = False):
    with initialize_config_dir(config_dir=str(PRETRAIN_CONFIGS / family), version_base="1.2"):
        return compose(name, overrides=list(overrides), return_hydra_config=with_hydra)


# --------------------------------------------------------------------------- registration


def test_register_is_idempotent_and_in_place():
    registry = solo.methods.METHODS
    before = id(registry)
    register()
    register()
    assert id(solo.methods.METHODS) == before
    assert registry["attentionnce"] is AttentionNCE
    assert registry["mocov3_attentionnce"] is MoCoV3AttentionNCE
    assert registry["mocov3"] is solo.methods.MoCoV3  # solo's own entries untouched


def test_parse_cfg_patch_wraps_only_the_pretrain_scripts_global():
    import solo.args.linear as solo_linear_args

    namespace = {"parse_cfg": solo_pretrain_args.parse_cfg}
    assert patch_pretrain_parse_cfg(namespace)
    assert patch_pretrain_parse_cfg(namespace)  # idempotent: no double wrapping
    wrapped = namespace["parse_cfg"]
    assert wrapped.__attnce_original__ is solo_pretrain_args.parse_cfg
    assert not hasattr(solo_pretrain_args.parse_cfg, "__attnce_original__")  # module untouched
    linear = {"parse_cfg": solo_linear_args.parse_cfg}  # main_linear.py's global
    assert (
        not patch_pretrain_parse_cfg(linear) and linear["parse_cfg"] is solo_linear_args.parse_cfg
    )


# --------------------------------------------------------------------------- shipped configs


def _shipped_configs():
    return sorted((p.parent.name, p.name) for p in PRETRAIN_CONFIGS.glob("*/*.yaml"))


@pytest.mark.parametrize("family,name", _shipped_configs())
def test_shipped_config_composes_and_builds(family, name, tiny_image_folder):
    cfg = _compose(
        family, name, [f"data.train_path={tiny_image_folder['train']}", "~data.val_path"], True
    )
    assert cfg.hydra.callbacks.attnce._target_ == "attnce_plugin.registration.SoloLearnCallback"
    assert cfg.wandb.enabled is False
    assert cfg.method in ("attentionnce", "mocov3_attentionnce")
    baseline = cfg.method_kwargs.get("loss") in ("simclr", "mocov3")  # solo-learn's own loss
    if family in PAPER_D and not baseline:
        assert (cfg.method_kwargs.d_pos, cfg.method_kwargs.d_neg) == PAPER_D[family]
    if cfg.method == "attentionnce":
        assert cfg.method_kwargs.temperature == 0.5
    # Small positives must not set the BatchNorm statistics that evaluation uses.
    assert ("multicrop" in name) == (cfg.method_kwargs.get("positives_update_bn", True) is False)
    assert ("dali" in name) == (cfg.data.format == "dali")
    task_cfg = OmegaConf.to_container(cfg)
    del task_cfg["hydra"]  # the task function does not see the hydra node
    cfg = OmegaConf.create(task_cfg)
    OmegaConf.set_struct(cfg, False)
    cfg = wrap_pretrain_parse_cfg(solo_pretrain_args.parse_cfg)(cfg)
    assert cfg.data.num_large_crops == 2 and cfg.data.num_small_crops == (0 if baseline else 4)
    sizes = [p.crop_size for p in cfg.augmentations]
    assert ("multicrop" in name) == (min(sizes) < max(sizes))


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "override,message",
    [
        ("+method_kwargs.d_negative=3", "did you mean 'd_neg'"),
        ("method_kwargs.d_neg=0", "method_kwargs.d_neg must be a finite number > 0"),
        ("method_kwargs.d_pos=-1", "method_kwargs.d_pos must be a finite number > 0"),
        ("method_kwargs.temperature=.nan", "method_kwargs.temperature must be a finite number > 0"),
        ("method_kwargs.d_pos=inf", "method_kwargs.d_pos must be a finite number > 0"),
    ],
)
def test_attentionnce_kwargs_refused(override, message, tiny_image_folder):
    cfg = _tiny_cfg("attentionnce.yaml", tiny_image_folder["train"], [override])
    with pytest.raises(MethodConfigError, match=message.replace("(", r"\(")):
        AttentionNCE(cfg)


def test_mocov3_loss_flag_refused(tiny_image_folder):
    cfg = _tiny_cfg(
        "mocov3_attentionnce.yaml", tiny_image_folder["train"], ["method_kwargs.loss=infonce"]
    )
    with pytest.raises(MethodConfigError, match="must be one of mocov3, attentionnce"):
        MoCoV3AttentionNCE(cfg)


def test_layout_refused_by_method_without_hook(tiny_image_folder):
    """The method reads the crop roles the parse_cfg hook recorded, and refuses what it cannot
    train: no positive crop, or solo-learn's own count (the hook bypassed)."""
    cfg = _tiny_cfg("attentionnce.yaml", tiny_image_folder["train"])
    cfg.data.num_small_crops = 0  # anchors only
    with pytest.raises(CropLayoutError, match="no positive crop"):
        AttentionNCE(cfg.copy())
    cfg.data.num_large_crops = 6  # what solo-learn's parse_cfg counts for the paper's layout
    with pytest.raises(CropLayoutError, match="wrap_pretrain_parse_cfg"):
        AttentionNCE(cfg)


# --------------------------------------------------------------------------- training in-process


class _Recorder(pl.Callback):
    """Records each step's loss, and checks every learnable parameter got a gradient (DDP runs
    with find_unused_parameters=False)."""

    def __init__(self) -> None:
        self.losses: List[torch.Tensor] = []
        self.missing_grads: List[str] = []

    def on_after_backward(self, trainer, module) -> None:
        for group in module.learnable_params:
            for p in group["params"]:
                if p.grad is None:
                    self.missing_grads.append(group["name"])

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.losses.append(outputs["loss"].detach().clone())


def _fit(model: pl.LightningModule, batches, seed: int = 5) -> _Recorder:
    recorder = _Recorder()
    trainer = cpu_trainer(
        callbacks=[recorder],
        deterministic=True,
    )
    pl.seed_everything(seed)
    # batch_size=None: the loader yields our ready-made batches as they are, in order.
    trainer.fit(model, train_dataloaders=torch.utils.data.DataLoader(batches, batch_size=None))
    return recorder


def _assert_trains_like_solo(
    ours: pl.LightningModule, reference: pl.LightningModule, batches, reference_crops: int = 2
):
    """Same initial weights, then bit-identical losses at each of 3 steps and weights after them;
    solo-learn's method sees the first ``reference_crops`` crops of each batch (the 2 anchors)."""
    for (k1, v1), (k2, v2) in zip(ours.state_dict().items(), reference.state_dict().items()):
        assert k1 == k2 and torch.equal(v1, v2), k1

    ours_rec = _fit(ours, batches)
    ref_rec = _fit(reference, [[i, crops[:reference_crops], y] for i, crops, y in batches])
    assert len(ref_rec.losses) == 3
    for step, (a, b) in enumerate(zip(ours_rec.losses, ref_rec.losses)):
        assert torch.equal(a, b), f"step {step}: ours {a.item()} vs solo {b.item()}"
    for (k1, v1), (k2, v2) in zip(ours.state_dict().items(), reference.state_dict().items()):
        assert torch.equal(v1, v2), f"after training, {k1} differs"


def test_mocov3_flag_reproduces_solo_mocov3_step_for_step(tiny_image_folder):
    """loss=mocov3 with 4 extra positive crops in every batch == solo's MoCoV3 on the anchors."""
    ours_cfg = _tiny_cfg(
        "mocov3_attentionnce.yaml",
        tiny_image_folder["train"],
        ["method_kwargs.loss=mocov3", "method_kwargs.pred_hidden_dim=32"],
    )
    solo_cfg = copy.deepcopy(ours_cfg)
    solo_cfg.method = "mocov3"
    solo_cfg.method_kwargs = {
        k: v for k, v in solo_cfg.method_kwargs.items() if k not in ("loss", "d_pos", "d_neg")
    }
    solo_cfg.augmentations = solo_cfg.augmentations[:2]
    solo_cfg.data.num_small_crops = 0

    batches = _batches(num_steps=3, num_crops=6)
    pl.seed_everything(5)
    ours = MoCoV3AttentionNCE(ours_cfg)
    pl.seed_everything(5)
    reference = solo.methods.MoCoV3(solo_cfg)
    _assert_trains_like_solo(ours, reference, batches)


def test_simclr_flag_reproduces_solo_simclr_step_for_step(tiny_image_folder):
    """loss=simclr with 4 extra positive crops in every batch == solo's SimCLR on the anchors
    (the bench's SimCLR row and the paper's SimCLR baseline rely on it)."""
    ours_cfg = _tiny_cfg(
        "attentionnce.yaml", tiny_image_folder["train"], ["+method_kwargs.loss=simclr"]
    )
    solo_cfg = copy.deepcopy(ours_cfg)
    solo_cfg.method = "simclr"
    solo_cfg.method_kwargs = {
        k: ours_cfg.method_kwargs[k] for k in ("proj_hidden_dim", "proj_output_dim", "temperature")
    }
    solo_cfg.augmentations = solo_cfg.augmentations[:1]
    solo_cfg.data.num_small_crops = 0

    batches = _batches(num_steps=3, num_crops=6, small=32)
    pl.seed_everything(5)
    ours = AttentionNCE(ours_cfg)
    pl.seed_everything(5)
    reference = solo.methods.SimCLR(solo_cfg)
    _assert_trains_like_solo(ours, reference, batches)


def test_simclr_all_views_reproduces_solo_simclr_with_small_crops_step_for_step(
    tiny_image_folder,
):
    """loss=simclr_all_views == solo's SimCLR whose small crops are the 4 positives: its loss on
    all 6 views (the same-views baseline of docs/results.md)."""
    ours_cfg = _tiny_cfg(
        "attentionnce_multicrop.yaml",
        tiny_image_folder["train"],
        # positives_update_bn as solo's SimCLR, whose small crops update BatchNorm's statistics
        ["+method_kwargs.loss=simclr_all_views", "views.positive_crop_size=16",
         "method_kwargs.positives_update_bn=true"],
    )  # fmt: skip
    assert (ours_cfg.data.num_large_crops, ours_cfg.data.num_small_crops) == (2, 4)
    solo_cfg = copy.deepcopy(ours_cfg)
    solo_cfg.method = "simclr"
    solo_cfg.method_kwargs = {
        k: ours_cfg.method_kwargs[k] for k in ("proj_hidden_dim", "proj_output_dim", "temperature")
    }

    batches = _batches(num_steps=3, num_crops=6, small=16)
    pl.seed_everything(5)
    ours = AttentionNCE(ours_cfg)
    pl.seed_everything(5)
    reference = solo.methods.SimCLR(solo_cfg)
    _assert_trains_like_solo(ours, reference, batches, reference_crops=6)


@pytest.mark.parametrize(
    "method_cls,config_name,overrides",
    [
        (AttentionNCE, "attentionnce_multicrop.yaml", ["views.positive_crop_size=16"]),
        (
            MoCoV3AttentionNCE,
            "mocov3_attentionnce.yaml",
            ["method_kwargs.pred_hidden_dim=32", "augmentations.2.crop_size=16"],
        ),
        (
            MoCoV3AttentionNCE,
            "mocov3_attentionnce.yaml",
            [
                "method_kwargs.pred_hidden_dim=32",
                "augmentations.2.crop_size=16",
                "+method_kwargs.key_in_prototype=false",
            ],
        ),
    ],
)
def test_attentionnce_trains_with_all_params_getting_gradients(
    method_cls, config_name, overrides, tiny_image_folder
):
    cfg = _tiny_cfg(config_name, tiny_image_folder["train"], overrides)
    pl.seed_everything(5)
    model = method_cls(cfg)
    rec = _fit(model, _batches(num_steps=2, num_crops=6))
    assert len(rec.losses) == 2 and all(torch.isfinite(x) for x in rec.losses)
    assert (
        not rec.missing_grads
    ), f"parameters without gradient in: {sorted(set(rec.missing_grads))}"


def test_mocov3_variant_builds_mocov3_vit(tiny_image_folder):
    """ViT backbones must be solo's MoCo v3 variant, as for method 'mocov3'."""
    from solo.backbones.vit.vit_mocov3 import VisionTransformerMoCo

    cfg = _tiny_cfg(
        "mocov3_attentionnce.yaml",
        tiny_image_folder["train"],
        [
            "backbone.name=vit_tiny",
            "method_kwargs.pred_hidden_dim=32",
            "++backbone.kwargs.img_size=32",
        ],
    )
    model = MoCoV3AttentionNCE(cfg)
    assert isinstance(model.backbone, VisionTransformerMoCo)
    assert isinstance(model.momentum_backbone, VisionTransformerMoCo)
