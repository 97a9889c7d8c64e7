"""The methods in-process, against solo-learn's own SimCLR and MoCo v3 and the loss on their
forwards. Need solo-learn >= 1.0.6; they FAIL, not skip, without it."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import List

import lightning.pytorch as pl
import pytest
import solo.methods
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from helpers.configs import batches as make_batches
from helpers.configs import compose_pretrain_cfg
from solo.backbones.vit.vit_mocov3 import VisionTransformerMoCo

from attnce_plugin.losses import attentionnce_loss_func, gather
from attnce_plugin.methods import METHODS, AttentionNCE, MoCoV3AttentionNCE
from attnce_plugin.methods.common import AttentionNCECommon, bn_running_stats_frozen

pytestmark = pytest.mark.integration  # trains through solo-learn


@pytest.fixture
def pretrain_cfg(tiny_image_folder):
    """``compose_pretrain_cfg`` on the tiny image folder: ``pretrain_cfg(config, *overrides)``."""
    train = tiny_image_folder["train"]
    return lambda config, *overrides: compose_pretrain_cfg(config, train, overrides)


class _Steps(pl.Callback):
    """Each step's loss; the learnable parameters without a gradient (DDP runs with
    find_unused_parameters=False, so every one needs one)."""

    def __init__(self) -> None:
        self.losses: List[torch.Tensor] = []
        self.missing: List[str] = []

    def on_after_backward(self, trainer, module) -> None:
        self.missing += [
            g["name"] for g in module.learnable_params for p in g["params"] if p.grad is None
        ]

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.losses.append(outputs["loss"].detach().clone())


def _fit(model: pl.LightningModule, batches) -> _Steps:
    steps = _Steps()
    pl.seed_everything(5)
    loader = torch.utils.data.DataLoader(batches, batch_size=None)  # our batches, in order
    # One CPU process; nothing written or printed, whatever loggers are installed.
    off = ["logger", "enable_checkpointing", "enable_progress_bar", "enable_model_summary"]
    settings = dict.fromkeys(off, False) | dict(accelerator="cpu", devices=1, max_epochs=1)
    pl.Trainer(**settings, callbacks=[steps], deterministic=True).fit(model, loader)
    return steps


def _assert_trains_like_solo(ours, reference, batches, reference_crops: int) -> None:
    """Same initial weights, bit-identical losses at every step and weights after them."""
    for (k1, v1), (k2, v2) in zip(ours.state_dict().items(), reference.state_dict().items()):
        assert k1 == k2 and torch.equal(v1, v2), k1
    ours_steps = _fit(ours, batches)
    ref_steps = _fit(reference, [[i, crops[:reference_crops], y] for i, crops, y in batches])
    assert len(ref_steps.losses) == len(batches)
    for step, (a, b) in enumerate(zip(ours_steps.losses, ref_steps.losses)):
        assert torch.equal(a, b), f"step {step}: ours {a.item()} vs solo-learn {b.item()}"
    for (k1, v1), (k2, v2) in zip(ours.state_dict().items(), reference.state_dict().items()):
        assert torch.equal(v1, v2), f"after training, {k1} differs"


#: The same-views baseline: solo-learn's SimCLR whose small crops are the 4 positives; its small
#: crops update BatchNorm's running statistics.
ALL_VIEWS = ("attentionnce_multicrop.yaml", "simclr_all_views")
ALL_VIEWS_BN = ["method_kwargs.positives_update_bn=true"]


@pytest.mark.parametrize(
    "config,loss,overrides,small_crops",
    [
        ("mocov3_attentionnce.yaml", "mocov3", ["method_kwargs.pred_hidden_dim=32"], 0),
        ("attentionnce.yaml", "simclr", [], 0),
        (*ALL_VIEWS, ALL_VIEWS_BN, 4),
    ],
)
def test_solo_learns_loss_is_solo_learns_method_step_for_step(
    config, loss, overrides, small_crops, pretrain_cfg
):
    """Our method and solo-learn's, same weights; solo-learn's sees ``small_crops`` positives."""
    ours_cfg = pretrain_cfg(config, f"++method_kwargs.loss={loss}", *overrides)
    solo_cfg = copy.deepcopy(ours_cfg)
    solo_cfg.method = "mocov3" if loss == "mocov3" else "simclr"
    keep = ["proj_hidden_dim", "proj_output_dim", "temperature", "pred_hidden_dim"]
    solo_cfg.method_kwargs = {k: v for k, v in ours_cfg.method_kwargs.items() if k in keep}
    solo_cfg.data.num_small_crops = small_crops
    pl.seed_everything(5)
    ours = METHODS[ours_cfg.method](ours_cfg)
    pl.seed_everything(5)
    batches = make_batches(3, 6, small=16 if small_crops else 32)
    reference = solo.methods.METHODS[solo_cfg.method](solo_cfg)
    _assert_trains_like_solo(ours, reference, batches, 2 + small_crops)


ORACLE = ["+method_kwargs.neg_temperature=0.15", "+method_kwargs.exclude_same_class=true"]


@pytest.mark.parametrize(
    "anchor,weighting,oracle",
    [("views", "logit", False), ("mean", "logit", False), ("views", "importance", True)],
)
def test_attentionnce_step_is_the_loss_of_its_forwards(anchor, weighting, oracle, pretrain_cfg):
    """training_step's loss == the online classifier's + the loss of the anchors' ``forward`` and
    the positives' ``multicrop_forward`` with the settings by name (the batch's labels for
    ``exclude_same_class``); logged: the views' alignment and log(K + 1) - loss, K = V*b - V."""
    overrides = [f"+method_kwargs.anchor={anchor}", f"method_kwargs.neg_weighting={weighting}"]
    cfg = pretrain_cfg("attentionnce.yaml", *overrides, *(ORACLE if oracle else []))
    model = AttentionNCE(cfg).eval()  # eval: BatchNorm and the forwards are deterministic
    logged = {}
    model.log = lambda name, value, **kwargs: logged.update({name: value})
    indexes, crops, targets = make_batches(1, 6, small=32)[0]
    got = model.training_step([indexes, crops, targets], 1)
    with torch.no_grad():
        z = [F.normalize(model(c)["z"], dim=-1) for c in crops[:2]]
        positives = torch.stack([model.multicrop_forward(c)["z"] for c in crops[2:]], dim=1)
        anchors = torch.stack(z).mean(0) if anchor == "mean" else torch.cat(z)
        kw = cfg.method_kwargs
        options = dict(neg_temperature=0.15, labels=targets) if oracle else {}
        nce = attentionnce_loss_func(
            anchors, positives, indexes, kw.temperature, kw.d_pos, kw.d_neg, weighting, **options
        )
        logits = [model(c)["logits"] for c in crops[:2]]
        cls = sum(F.cross_entropy(x, targets, ignore_index=-1) for x in logits) / 2
    torch.testing.assert_close(got, nce + cls)
    views = 1 if anchor == "mean" else 2
    if oracle:  # K counts the negatives before the oracle drops some
        return
    mi_bound = math.log(views * len(indexes) - views + 1) - nce
    torch.testing.assert_close(logged["train_repr_mi_bound"], mi_bound)
    alignment = (z[0] - z[1]).pow(2).sum(1).mean()
    torch.testing.assert_close(logged["train_repr_alignment"], alignment)


def test_positives_batched_or_per_crop_and_their_batchnorm_statistics(pretrain_cfg):
    """positives_update_bn=false keeps BatchNorm's running statistics to the anchors; in eval
    mode, batch_positives gives the per-crop forwards' values, one forward per crop size."""
    model = AttentionNCE(pretrain_cfg("attentionnce_multicrop.yaml"))
    bn = model.backbone.bn1
    before = bn.running_mean.clone()
    with bn_running_stats_frozen(model, True):
        out = model.multicrop_forward(torch.randn(4, 3, 16, 16) * 5 + 3)
    assert torch.equal(bn.running_mean, before) and out["z"].requires_grad
    model.multicrop_forward(torch.randn(4, 3, 16, 16) * 5 + 3)
    assert not torch.equal(bn.running_mean, before)  # unfrozen: solo-learn's behaviour
    model.eval()
    crops = make_batches(1, 6, small=16)[0][1][2:]
    crops[1] = crops[1][:, :, :12, :12]  # two sizes: one forward per size
    calls: List[tuple] = []
    forward = lambda x: calls.append(tuple(x.shape)) or model.multicrop_forward(x)  # noqa: E731
    with torch.no_grad():
        per_crop = model.forward_positives(forward, crops, "z")
        model.kwargs.batch_positives = True
        calls.clear()
        batched = model.forward_positives(forward, crops, "z")
    assert sorted(calls) == [(4, 3, 12, 12), (12, 3, 16, 16)]
    torch.testing.assert_close(batched, per_crop)


MOCO_SMALL = ["augmentations.2.crop_size=16", "method_kwargs.pred_hidden_dim=32"]
MOCO_NO_KEY = MOCO_SMALL + ["+method_kwargs.key_in_prototype=false"]


@pytest.mark.parametrize(
    "cls,config,overrides",
    [
        (AttentionNCE, "attentionnce_multicrop.yaml", ["+method_kwargs.batch_positives=true"]),
        (MoCoV3AttentionNCE, "mocov3_attentionnce.yaml", MOCO_SMALL),
        (MoCoV3AttentionNCE, "mocov3_attentionnce.yaml", MOCO_NO_KEY),
    ],
)
def test_every_learnable_parameter_gets_a_gradient(cls, config, overrides, pretrain_cfg):
    """And, for MoCo, solo-learn's momentum update (BaseMomentumMethod.on_train_batch_end) still
    runs after our training_step."""
    model = cls(pretrain_cfg(config, *overrides))
    momentum = getattr(model, "momentum_backbone", None)
    before = [p.clone() for p in momentum.parameters()] if momentum is not None else []
    steps = _fit(model, make_batches(2, 6))
    assert len(steps.losses) == 2 and all(torch.isfinite(x) for x in steps.losses)
    assert not steps.missing, sorted(set(steps.missing))
    if momentum is not None:
        assert not all(torch.equal(a, b) for a, b in zip(before, momentum.parameters()))


def test_attention_logged_every_k_batches_and_callbacks_built(pretrain_cfg):
    timer = "+diagnostics.callbacks.steps._target_=lightning.pytorch.callbacks.Timer"
    cfg = pretrain_cfg("attentionnce.yaml", "+method_kwargs.attention_log_every=2", timer)
    model = AttentionNCE(cfg)
    kinds = sorted(type(c).__name__ for c in model.configure_callbacks())
    assert kinds == ["AttentionDiagnostics", "Timer"]
    batch = make_batches(1, 6, small=32)[0]
    seen = []
    for batch_idx in range(4):
        names: List[str] = []
        model.log = lambda name, *args, **kwargs: names.append(name)
        model.training_step(batch, batch_idx)
        seen.append({n for n in names if n.startswith("train_attn_")})
    assert not seen[1] and not seen[3] and seen[0] == seen[2]
    mechanism = {"push_ratio", "top1_push_share", "argmax_same_class", "num_negatives"}
    assert {f"train_attn_{k}" for k in mechanism} <= seen[0]


@pytest.mark.parametrize("config", ["attentionnce.yaml", "mocov3_attentionnce.yaml"])
def test_the_oracle_refuses_unlabeled_images_naming_the_key(config, pretrain_cfg):
    model = METHODS[config[:-5]](pretrain_cfg(config, "+method_kwargs.exclude_same_class=true"))
    indexes, crops, targets = make_batches(1, 6, small=32)[0]
    targets[1] = -1  # solo-learn's label of an unlabeled image
    with pytest.raises(ValueError, match="exclude_same_class=True needs every image's class"):
        model.training_step([indexes, crops, targets], 0)


def _log_attention_worker(rank, world, store, out):
    """Rank 1's images are all unlabeled: both ranks must log the same keys and values."""
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        g = torch.Generator().manual_seed(rank)
        a, p, idx = torch.randn(8, 16, generator=g), torch.randn(4, 3, 16, generator=g), rank * 4
        _, weights = attentionnce_loss_func(a, p, torch.arange(idx, idx + 4), return_attention=True)
        labels = torch.tensor([0, 1, 1, 2] if rank == 0 else [-1] * 4).repeat(2)
        logged = {}
        fake = type("Fake", (), {})()
        fake.log = lambda name, value, **kw: logged.update({name: float(value)})
        AttentionNCECommon.log_attention(fake, [weights], labels, gather(labels, False))
        torch.save(logged, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_every_process_logs_the_same_attention_keys(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2]))  # spawn imports tests.plugin.*
    mp.spawn(_log_attention_worker, (2, str(tmp_path / "store"), str(tmp_path)), nprocs=2)
    logged = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    assert set(logged[0]) == set(logged[1])
    key = "train_attn_argmax_same_class"
    assert key in logged[0] and logged[0][key] == logged[1][key]


def test_checkpoints_load_onto_the_current_device(pretrain_cfg, tmp_path, monkeypatch):
    """main_knn.py (attnce-knn) moves each batch to the current device and loads the model with no
    map_location: ours then load there (the current GPU, else the CPU), not where they were
    saved; a map_location given is kept. The weights come back as saved."""
    import lightning.pytorch.core.module as module

    cfg = pretrain_cfg("attentionnce.yaml")
    model, path = AttentionNCE(cfg), tmp_path / "saved.ckpt"
    pl.Trainer(logger=False, accelerator="cpu").strategy.connect(model)
    torch.save(
        {"state_dict": model.state_dict(), "pytorch-lightning_version": pl.__version__}, path
    )
    seen, load = [], module._load_from_checkpoint

    def spy(cls, checkpoint, map_location=None, *args, **kw):  # Lightning's own loader, watched
        seen.append(map_location)
        return load(cls, checkpoint, map_location, *args, **kw)

    monkeypatch.setattr(module, "_load_from_checkpoint", spy)
    fresh = lambda: pretrain_cfg("attentionnce.yaml")  # noqa: E731 (as args.json gives it)
    loaded = AttentionNCE.load_from_checkpoint(path, strict=False, cfg=fresh())
    keep = lambda storage, location: storage  # noqa: E731 (torch.load's form of "as saved")
    AttentionNCE.load_from_checkpoint(path, map_location=keep, strict=False, cfg=fresh())
    cuda = torch.cuda.is_available()
    assert seen == [torch.device("cuda", torch.cuda.current_device()) if cuda else "cpu", keep]
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key].cpu(), value), key


def test_wrong_crop_count_is_named(pretrain_cfg):
    model = AttentionNCE(pretrain_cfg("attentionnce.yaml"))
    with pytest.raises(ValueError, match="5 crops.*2 anchors.*4 positives"):
        model.training_step(make_batches(1, 5, small=32)[0], 0)


def test_moco_form_builds_solo_learns_mocov3_vit(pretrain_cfg):
    vit = "backbone.name=vit_tiny ++backbone.kwargs.img_size=32 method_kwargs.pred_hidden_dim=32"
    model = MoCoV3AttentionNCE(pretrain_cfg("mocov3_attentionnce.yaml", *vit.split()))
    assert isinstance(model.backbone, VisionTransformerMoCo)
    assert isinstance(model.momentum_backbone, VisionTransformerMoCo)
