"""AttentionNCECore (attnce_plugin/methods/core.py), what both methods add to solo-learn: refusals
before any training step (online kNN with a torchmetrics that breaks it; ``compile`` with
``sync_batchnorm`` when fitting, still loadable for evaluation) and the crop roles it reads.

Need solo-learn >= 1.0.6; FAIL (not skip) without it.
"""

from __future__ import annotations

import pytest

from attnce_plugin.solo_compat import require_solo

require_solo()

pytestmark = pytest.mark.integration  # builds the methods through solo-learn

from helpers.configs import compose_pretrain_cfg  # noqa: E402

from attnce_plugin.callbacks import DiagnosticsConfigError  # noqa: E402
from attnce_plugin.callbacks.guard import FiniteLossGuard  # noqa: E402
from attnce_plugin.callbacks.health import RepresentationHealth  # noqa: E402
from attnce_plugin.callbacks.images import NameUnreadableImages  # noqa: E402
from attnce_plugin.methods import (  # noqa: E402
    AttentionNCE,
    CropLayoutError,
    MethodConfigError,
    MoCoV3AttentionNCE,
)
from attnce_plugin.solo_compat import IncompatibleTorchmetricsError  # noqa: E402

METHOD_CONFIGS = [
    (AttentionNCE, "attentionnce.yaml"),
    (MoCoV3AttentionNCE, "mocov3_attentionnce.yaml"),
]


@pytest.mark.parametrize("cls,config", METHOD_CONFIGS)
def test_online_knn_refused_at_start_with_new_torchmetrics(
    cls, config, tiny_image_folder, monkeypatch
):
    import torchmetrics

    train = tiny_image_folder["train"]
    real = cls(compose_pretrain_cfg(config, train, ["++knn_eval.enabled=True", "++knn_eval.k=3"]))
    assert real.knn_eval and real.knn.k == 3  # the installed torchmetrics runs solo's kNN
    monkeypatch.setattr(torchmetrics, "__version__", "1.9.0")
    cfg = compose_pretrain_cfg(config, train, ["++knn_eval.enabled=True"])
    with pytest.raises(IncompatibleTorchmetricsError) as err:
        cls(cfg)  # main_pretrain.py builds the method before the Trainer and the data
    for text in (
        "knn_eval.enabled=True",
        "torchmetrics 1.9.0",
        "pip install torchmetrics==0.11.4",
        "set knn_eval.enabled=False",
    ):
        assert text in str(err.value)
    # Without online kNN nothing needs solo-learn's kNN.
    assert not cls(compose_pretrain_cfg(config, train, ["++knn_eval.enabled=False"])).knn_eval


@pytest.mark.parametrize("cls,config", METHOD_CONFIGS)
def test_compile_with_sync_batchnorm_refused(cls, config, tiny_image_folder):
    train = tiny_image_folder["train"]
    cfg = compose_pretrain_cfg(config, train, ["+method_kwargs.compile=true", "trainer=gpu"])
    assert cfg.sync_batchnorm is True  # what every shipped (GPU) config sets
    model = cls(cfg)  # builds, so that a checkpoint saved with both loads for evaluation
    model.setup("validate")
    with pytest.raises(MethodConfigError) as err:
        model.setup("fit")  # Lightning calls it before any training step
    for text in (
        "method_kwargs.compile=true",
        "sync_batchnorm=True",
        "SyncBatchNorm",
        "Allowed: method_kwargs.compile=false with sync_batchnorm=True",
    ):
        assert text in str(err.value)
    # Either one alone is accepted.
    gpu = ["+method_kwargs.compile=false", "trainer=gpu"]
    cls(compose_pretrain_cfg(config, train, gpu)).setup("fit")
    cls(
        compose_pretrain_cfg(config, train, ["+method_kwargs.compile=true", "sync_batchnorm=False"])
    ).setup("fit")


@pytest.mark.parametrize("cls,config", METHOD_CONFIGS)
def test_callbacks_are_the_ones_the_diagnostics_group_switches_on(cls, config, tiny_image_folder):
    train = tiny_image_folder["train"]
    shipped = cls(compose_pretrain_cfg(config, train)).configure_callbacks()
    assert [type(c) for c in shipped] == [
        RepresentationHealth,
        FiniteLossGuard,
        NameUnreadableImages,
    ]
    assert shipped[1].check_every == 50
    none = cls(compose_pretrain_cfg(config, train, ["~diagnostics"])).configure_callbacks()
    assert none == []  # a config without the group gets none
    some = ["diagnostics.representation_health=false", "diagnostics.finite_check_every=3"]
    some_cbs = cls(compose_pretrain_cfg(config, train, some)).configure_callbacks()
    assert [type(c) for c in some_cbs] == [FiniteLossGuard, NameUnreadableImages]
    assert some_cbs[0].check_every == 3


@pytest.mark.parametrize(
    "override,message",
    [
        (
            "diagnostics.finite_loss_guard=yes",
            "diagnostics.finite_loss_guard must be true or false, got 'yes' of type str",
        ),
        (
            "diagnostics.finite_check_every=0",
            "diagnostics.finite_check_every must be an integer >= 1, got 0 of type int",
        ),
        ("+diagnostics.health=true", "diagnostics.health is not a diagnostics key; allowed keys:"),
    ],
)
def test_bad_diagnostics_refused_before_training(override, message, tiny_image_folder):
    cfg = compose_pretrain_cfg("attentionnce.yaml", tiny_image_folder["train"], [override])
    with pytest.raises(DiagnosticsConfigError) as err:
        AttentionNCE(cfg)
    assert message in str(err.value)


def test_crop_roles_are_read_from_what_parse_cfg_recorded(tiny_image_folder):
    cfg = compose_pretrain_cfg("attentionnce.yaml", tiny_image_folder["train"])
    assert (cfg.data.num_large_crops, cfg.data.num_small_crops) == (2, 4)
    model = AttentionNCE(cfg)
    # loss: attentionnce, per crop, BatchNorm updated: solo-learn's own small-crop path.
    assert not model.hides_positives and model.num_small_crops == 4 and model.multicrop
    assert model.num_positive_crops == 4
    batched = AttentionNCE(
        compose_pretrain_cfg(
            "attentionnce.yaml", tiny_image_folder["train"], ["+method_kwargs.batch_positives=true"]
        )
    )
    assert batched.hides_positives and batched.num_small_crops == 0 and not batched.multicrop
    assert batched.num_positive_crops == 4 and batched.num_crops == 2
    del cfg.data.num_small_crops
    with pytest.raises(CropLayoutError, match="wrap_pretrain_parse_cfg"):
        AttentionNCE(cfg)
