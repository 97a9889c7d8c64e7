"""The solo-learn lines (commit 9187ea3) that the plugin's patches, methods and CLI wrappers rely
on, checked in the installed solo-learn: an upgrade that breaks one fails here, named with the
plugin piece and the line. FAILS, never skips, without solo-learn."""

from __future__ import annotations

import inspect
from typing import Callable, Tuple

import pytest

from attnce_plugin.solo_compat import require_solo, solo_checkout_dir

require_solo()

import solo.args.pretrain as pretrain_args  # noqa: E402
import solo.methods  # noqa: E402
from solo.args.knn import parse_args_knn  # noqa: E402
from solo.methods.base import BaseMethod, BaseMomentumMethod  # noqa: E402
from solo.methods.mocov3 import MoCoV3  # noqa: E402


def _script(name: str) -> Callable[[], str]:
    return lambda: (solo_checkout_dir() / name).read_text()


def _source(obj: object) -> Callable[[], str]:
    return lambda: inspect.getsource(obj)


#: (plugin piece, solo-learn file:line, its source, the snippets that piece relies on).
RELIANCES: Tuple[Tuple[str, str, Callable[[], str], Tuple[str, ...]], ...] = (
    (
        "patches.add_methods",
        "main_pretrain.py:39,74",
        _script("main_pretrain.py"),
        ("from solo.methods import METHODS", "model = METHODS[cfg.method](cfg)"),
    ),
    (
        "patches.add_methods (attnce-knn, attnce-umap)",
        "main_knn.py:37, main_umap.py:28",
        lambda: _script("main_knn.py")() + _script("main_umap.py")(),
        ("from solo.methods import METHODS",),
    ),
    (
        "patches.add_backbones",
        "solo/methods/base.py:186-205",
        _source(BaseMethod.__init__),
        (
            "assert cfg.backbone.name in BaseMethod._BACKBONES",
            'if self.backbone_name.startswith("resnet"):',
            "self.features_dim: int = self.backbone.num_features",
        ),
    ),
    (
        "patches.add_backbones",
        "main_linear.py:59-69",
        _script("main_linear.py"),
        (
            "backbone_model = BaseMethod._BACKBONES[cfg.backbone.name]",
            'if cfg.backbone.name.startswith("resnet"):',
        ),
    ),
    (
        "patches.patch_pretrain_parse_cfg",
        "main_pretrain.py:30,65,71",
        _script("main_pretrain.py"),
        (
            "from solo.args.pretrain import parse_cfg",
            "cfg = parse_cfg(cfg)",
            "if cfg.data.num_large_crops != 2:",
        ),
    ),
    (
        "patches.wrap_pretrain_parse_cfg",
        "solo/args/pretrain.py:138-146",
        _source(pretrain_args.parse_cfg),
        (
            "big_size = cfg.augmentations[0].crop_size",
            "cfg.data.num_large_crops = num_large_crops",
            "cfg.data.num_small_crops = num_small_crops",
        ),
    ),
    (
        "MoCoV3AttentionNCE._BACKBONES",
        "solo/methods/base.py:187,193",
        _source(BaseMethod.__init__),
        ("self._BACKBONES[cfg.backbone.name]", "self.base_model(method, **kwargs)"),
    ),
    (
        "crops.hide_positive_crops",
        "solo/methods/base.py:247-251",
        _source(BaseMethod.__init__),
        (
            "self.num_crops: int = self.num_large_crops + self.num_small_crops",
            "self.multicrop: bool = self.num_small_crops != 0",
        ),
    ),
    (
        "crops.hide_positive_crops, AttentionNCE.training_step (solo-learn's small-crop path)",
        "solo/methods/base.py:510-517",
        _source(BaseMethod.training_step),
        (
            "assert len(X) == self.num_crops",
            "outs = [self.base_training_step(x, targets) for x in X[: self.num_large_crops]]",
            "if self.multicrop:",
            "multicrop_outs = [self.multicrop_forward(x) for x in X[self.num_large_crops :]]",
        ),
    ),
    (
        "MoCoV3AttentionNCE.training_step",
        "solo/methods/mocov3.py:208-216",
        _source(MoCoV3.training_step),
        (
            "out = super().training_step(batch, batch_idx)",
            'Q = out["q"]',
            'K = out["momentum_k"]',
            "mocov3_loss_func(",
        ),
    ),
    (
        "cli.knn.KNN_DEFAULTS",
        "solo/args/knn.py:19-22,29",
        _source(parse_args_knn),
        (
            "args = parser.parse_args()",
            'parser.add_argument("--k", type=int, nargs="+")',
            'parser.add_argument("--temperature", type=float, nargs="+")',
            'parser.add_argument("--distance_function", type=str, nargs="+")',
            'parser.add_argument("--feature_type", type=str, nargs="+")',
        ),
    ),
    (
        "cli.knn.KNN_DEFAULTS",
        "main_knn.py:120,161-165",
        _script("main_knn.py"),
        (
            "args = parse_args_knn()",
            "for feat_type in args.feature_type:",
            "for k in args.k:",
            "for distance_fx in args.distance_function:",
        ),
    ),
    (
        "cli.checkpoints_loaded_to",
        "main_knn.py:56,133",
        _script("main_knn.py"),
        (
            'model = METHODS[method_args["method"]].load_from_checkpoint('
            "ckpt_path, strict=False, cfg=cfg)",
            "im = im.cuda(non_blocking=True)",
        ),
    ),
)


@pytest.mark.parametrize(
    "piece,where,source,snippets", RELIANCES, ids=[f"{r[0]} @ {r[1]}" for r in RELIANCES]
)
def test_solo_learn_still_has_what_the_plugin_relies_on(piece, where, source, snippets) -> None:
    text = source()
    missing = [s for s in snippets if s not in text]
    assert (
        not missing
    ), f"{piece} relies on solo-learn's {where}, which no longer contains {missing}"


def test_registries_are_plain_dicts_and_moco_v3_is_a_momentum_method() -> None:
    # add_methods / add_backbones add keys in place: rebinding would not reach the scripts.
    assert type(solo.methods.METHODS) is dict
    assert type(BaseMethod._BACKBONES) is dict
    # MoCoV3AttentionNCE.training_step calls BaseMomentumMethod.training_step directly.
    assert MoCoV3.__mro__[1] is BaseMomentumMethod
