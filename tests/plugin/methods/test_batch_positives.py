"""``method_kwargs.batch_positives`` and ``attention_log_every`` of both methods.

References: the positive crops forwarded one by one through the same network (what solo-learn
does), and ``torch.cat`` + one forward written out here. Need solo-learn >= 1.0.6; FAIL (not
skip) without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Sequence

import pytest
import torch
import torch.nn as nn

from attnce_plugin.solo_compat import require_solo

require_solo()

from helpers.configs import compose_pretrain_cfg  # noqa: E402

from attnce_plugin.losses import attentionnce_loss_func  # noqa: E402
from attnce_plugin.methods import AttentionNCE, MethodConfigError, MoCoV3AttentionNCE  # noqa: E402
from attnce_plugin.methods.positives import (  # noqa: E402
    bn_running_stats_frozen,
    forward_crops,
    group_by_shape,
)


class _Net(nn.Module):
    """conv + BatchNorm + pooling: a BatchNorm whose batch statistics batching changes."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        feats = self.bn(self.conv(x)).mean(dim=(2, 3))
        return {"feats": feats, "z": feats * 2}


def _crops(sizes: Sequence[int], b: int = 3) -> List[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randn(b, 3, s, s, generator=g) for s in sizes]


def test_group_by_shape_keeps_first_appearance_order():
    assert group_by_shape(_crops([8, 8, 6, 8, 6])) == [[0, 1, 3], [2, 4]]
    assert group_by_shape([]) == []


def test_unbatched_is_one_call_per_crop():
    net = _Net().train()
    crops = _crops([8, 6, 8])
    got = forward_crops(net, crops, batched=False)
    for crop, out in zip(crops, got):
        want = _Net().train()(crop)
        torch.testing.assert_close(out["z"], want["z"])


def test_batched_equals_one_forward_of_the_concatenation_per_size():
    crops = _crops([8, 6, 8, 8])
    got = forward_crops(_Net().train(), crops, batched=True)
    big = _Net().train()(torch.cat([crops[0], crops[2], crops[3]]))
    small = _Net().train()(crops[1])
    for i, j in ((0, 0), (2, 1), (3, 2)):
        torch.testing.assert_close(got[i]["feats"], big["feats"][3 * j : 3 * j + 3])
        torch.testing.assert_close(got[i]["z"], big["z"][3 * j : 3 * j + 3])
    torch.testing.assert_close(got[1]["z"], small["z"])
    # Train-mode BatchNorm: batching changes the statistics, hence the outputs (the documented
    # trade-off); in eval mode (running statistics) both are the same function.
    per_crop = forward_crops(_Net().train(), crops, batched=False)
    assert not torch.allclose(per_crop[0]["z"], got[0]["z"])
    eval_batched = forward_crops(_Net().eval(), crops, batched=True)
    eval_single = forward_crops(_Net().eval(), crops, batched=False)
    for a, b in zip(eval_batched, eval_single):
        torch.testing.assert_close(a["z"], b["z"])


# --------------------------------------------------------------------------- the methods


def _batch(sizes: Sequence[int], b: int = 4):
    g = torch.Generator().manual_seed(2)
    crops = [torch.randn(b, 3, s, s, generator=g) for s in sizes]
    return [torch.arange(b), crops, torch.randint(0, 5, (b,), generator=g)]


def _positive_z(model, crops: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.stack([model.multicrop_forward(x)["z"] for x in crops], dim=1)


@pytest.mark.parametrize("config", ["attentionnce.yaml", "attentionnce_multicrop.yaml"])
def test_attentionnce_batched_loss_matches_concatenated_forward(config, tiny_image_folder):
    train = tiny_image_folder["train"]
    model = AttentionNCE(
        compose_pretrain_cfg(config, train, ["+method_kwargs.batch_positives=true"])
    )
    assert model.batch_positives is True
    model.train()
    batch = _batch([32, 32] + [32 if config == "attentionnce.yaml" else 16] * 4)
    torch.manual_seed(0)
    snapshot = {k: v.clone() for k, v in model.state_dict().items()}
    loss = model.training_step(batch, 1)

    # Reference: same weights, anchors one crop at a time, the 4 positives as ONE forward call.
    model.load_state_dict(snapshot)
    anchors = torch.cat([model(x)["z"] for x in batch[1][:2]])
    pos = model.multicrop_forward(torch.cat(batch[1][2:]))["z"].reshape(4, 4, -1).transpose(0, 1)
    want = attentionnce_loss_func(
        anchors, pos, batch[0], model.temperature, model.d_pos, model.d_neg
    )
    classifier = (
        sum(nn.functional.cross_entropy(model(x)["logits"], batch[2]) for x in batch[1][:2]) / 2
    )
    model.load_state_dict(snapshot)
    assert loss.item() == pytest.approx((want + classifier).item(), rel=1e-5)


def test_attentionnce_batched_equals_per_crop_in_eval_mode(tiny_image_folder):
    """With BatchNorm on running statistics, batching is only a scheduling change."""
    train = tiny_image_folder["train"]
    losses = []
    for flag in ("false", "true"):
        torch.manual_seed(0)
        cfg = compose_pretrain_cfg(
            "attentionnce.yaml", train, [f"+method_kwargs.batch_positives={flag}"]
        )
        model = AttentionNCE(cfg).eval()
        with torch.no_grad():
            losses.append(model.training_step(_batch([32] * 6), 0).item())
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)


def test_moco_form_batches_the_momentum_positives(tiny_image_folder, monkeypatch):
    train = tiny_image_folder["train"]
    cfg = compose_pretrain_cfg(
        "mocov3_attentionnce.yaml", train, ["+method_kwargs.batch_positives=true"]
    )
    model = MoCoV3AttentionNCE(cfg).train()
    calls: List[int] = []
    original = model.momentum_forward

    def counting(x: torch.Tensor):
        calls.append(int(x.shape[0]))
        return original(x)

    monkeypatch.setattr(model, "momentum_forward", counting)
    loss = model.training_step(_batch([32] * 6), 0)
    assert torch.isfinite(loss)
    # 2 anchor keys of 4 images each, then the 4 positives as one call of 16 images.
    assert calls == [4, 4, 16]


@pytest.mark.parametrize(
    "cls,config",
    [(AttentionNCE, "attentionnce.yaml"), (MoCoV3AttentionNCE, "mocov3_attentionnce.yaml")],
)
def test_attention_diagnostics_every_k_batches(cls, config, tiny_image_folder, monkeypatch):
    train = tiny_image_folder["train"]
    model = cls(
        compose_pretrain_cfg(config, train, ["+method_kwargs.attention_log_every=3"])
    ).train()
    assert model.attention_log_every == 3
    logged: List[str] = []
    monkeypatch.setattr(model, "log", lambda name, *a, **k: logged.append(name))
    monkeypatch.setattr(model, "log_dict", lambda d, *a, **k: logged.extend(d))
    for batch_idx in range(4):
        logged.clear()
        model.training_step(_batch([32] * 6), batch_idx)
        has_attention = any(name.startswith("train_attn_") for name in logged)
        assert has_attention == (batch_idx % 3 == 0), (batch_idx, logged)
        assert "train_attn_eff_num_positives" in logged or not has_attention


def test_defaults_and_refusals(tiny_image_folder):
    train = tiny_image_folder["train"]
    model = AttentionNCE(compose_pretrain_cfg("attentionnce.yaml", train))
    assert model.batch_positives is False and model.attention_log_every == 10
    cfg = compose_pretrain_cfg("attentionnce.yaml", train, ["+method_kwargs.batch_positives=yes"])
    with pytest.raises(
        MethodConfigError, match="method_kwargs.batch_positives must be true or false, got 'yes'"
    ):
        AttentionNCE(cfg)
    for key, value in (("positives_update_bn", "1"), ("compile", "yes")):
        cfg = compose_pretrain_cfg("attentionnce.yaml", train, [f"+method_kwargs.{key}={value}"])
        with pytest.raises(MethodConfigError, match=f"method_kwargs.{key} must be true or false"):
            AttentionNCE(cfg)
    cfg = compose_pretrain_cfg(
        "mocov3_attentionnce.yaml", train, ["+method_kwargs.attention_log_every=0"]
    )
    with pytest.raises(
        MethodConfigError, match="method_kwargs.attention_log_every must be an integer >= 1"
    ):
        MoCoV3AttentionNCE(cfg)


def test_wrong_crop_count_is_named(tiny_image_folder):
    model = AttentionNCE(
        compose_pretrain_cfg("attentionnce.yaml", Path(tiny_image_folder["train"]))
    )
    with pytest.raises(
        ValueError, match="holds 5 crops, but the augmentations configure 2 anchors \\+ 4 positives"
    ):
        model.training_step(_batch([32] * 5), 0)


@pytest.mark.integration
def test_compile_option_matches_eager_and_keeps_checkpoint_keys(tiny_image_folder):
    """``method_kwargs.compile: true`` (a real torch.compile on this CPU; the slowest test here)."""
    train = tiny_image_folder["train"]
    torch.manual_seed(0)
    eager = AttentionNCE(compose_pretrain_cfg("attentionnce.yaml", train)).train()
    # The shipped configs set sync_batchnorm (GPU DDP), which compile refuses (tests/plugin/test_gpu_paths.py).
    compiled = AttentionNCE(
        compose_pretrain_cfg(
            "attentionnce.yaml", train, ["+method_kwargs.compile=true", "sync_batchnorm=False"]
        )
    ).train()
    # Same keys as an eager model, so checkpoints load either way; then the same weights.
    assert list(compiled.state_dict()) == list(eager.state_dict())
    compiled.load_state_dict(eager.state_dict())
    batch = _batch([32] * 6)
    losses, grads = [], []
    for model in (eager, compiled):
        loss = model.training_step(batch, 1)
        loss.backward()
        losses.append(loss.item())
        grads.append(model.backbone.conv1.weight.grad.clone())
    assert losses[1] == pytest.approx(losses[0], rel=1e-4)
    # Inductor reorders fp32 sums; through train-mode BatchNorm on 4 images of an untrained
    # network (gradient norm ~100) that moves the gradient by ~1e-3 of its norm, so compare the
    # whole gradient's direction and size rather than single entries.
    g0, g1 = grads[0].flatten().double(), grads[1].flatten().double()
    assert float((g1 - g0).norm() / g0.norm()) < 1e-2
    assert float(torch.nn.functional.cosine_similarity(g0, g1, dim=0)) > 0.9999


def test_bn_running_stats_frozen_restores_running_statistics_only():
    net = _Net().train()
    before = {k: v.clone() for k, v in net.bn.state_dict().items()}
    x = _crops([8])[0]
    with bn_running_stats_frozen(net):
        inside = net(x)["z"]
    for k, v in net.bn.state_dict().items():
        torch.testing.assert_close(v, before[k])
    # Training-mode normalisation inside the block is the usual batch-statistics one.
    torch.testing.assert_close(inside, _Net().train()(x)["z"])
    net(x)  # outside the block the running statistics move again
    assert not torch.allclose(net.bn.running_mean, before["running_mean"])


@pytest.mark.parametrize(
    "cls,config",
    [
        (AttentionNCE, "attentionnce_multicrop.yaml"),
        (MoCoV3AttentionNCE, "mocov3_attentionnce.yaml"),
    ],
)
def test_positives_update_bn_false_leaves_running_stats_to_the_anchors(
    cls, config, tiny_image_folder
):
    """Reference: the same weights, the 2 anchor crops forwarded alone (train mode)."""
    train = tiny_image_folder["train"]
    model = cls(
        compose_pretrain_cfg(config, train, ["++method_kwargs.positives_update_bn=false"])
    ).train()
    snapshot = {k: v.clone() for k, v in model.state_dict().items()}
    sizes = [32, 32] + [16 if "multicrop" in config else 32] * 4
    batch = _batch(sizes)
    model.training_step(batch, 1).backward()  # the restore must not break the step's backward
    stats = {k: v.clone() for k, v in model.state_dict().items() if "running" in k}

    model.load_state_dict(snapshot)
    with torch.no_grad():
        for x in batch[1][:2]:
            model(x)
            if hasattr(model, "momentum_forward"):
                model.momentum_forward(x)
    for k, v in model.state_dict().items():
        if "running" in k:
            torch.testing.assert_close(stats[k], v, msg=k)
    # And with true (solo-learn's behaviour), the positives do move them.
    model.load_state_dict(snapshot)
    default = cls(
        compose_pretrain_cfg(config, train, ["++method_kwargs.positives_update_bn=true"])
    ).train()
    default.load_state_dict(snapshot)
    default.training_step(batch, 1)
    moved = [
        k
        for k, v in default.state_dict().items()
        if "running_mean" in k and not torch.allclose(v, model.state_dict()[k])
    ]
    assert moved
