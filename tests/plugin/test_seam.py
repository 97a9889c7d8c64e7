"""The seam (attnce_plugin/seam.py): registration, the parse_cfg wrapper, and the solo-learn lines
(commit 9187ea3) every patch relies on, checked in the installed solo-learn so that an upgrade
that breaks one fails here, named. FAILS, never skips, without solo-learn."""

from __future__ import annotations

import copy
import inspect

import pytest
import solo.args.linear
import solo.args.pretrain as pretrain_args
import solo.methods
import torch
from helpers.configs import compose
from omegaconf import OmegaConf
from solo.data.dali_dataloader import PretrainDALIDataModule
from solo.methods.base import BaseMethod, BaseMomentumMethod
from solo.methods.mocov3 import MoCoV3
from solo.methods.simclr import SimCLR

from attnce_plugin.backbones import BACKBONES
from attnce_plugin.install import solo_checkout_dir
from attnce_plugin.methods import METHODS
from attnce_plugin.seam import SoloLearnCallback, register, wrap_parse_cfg
from attnce_plugin.settings import MethodConfigError


def _script(name: str) -> str:
    return (solo_checkout_dir() / name).read_text()


#: solo-learn's source (commit 9187ea3) -> the snippets the plugin relies on there, by what relies.
RELIANCES = {
    "main_pretrain.py:30,39,65,71,74": (
        _script("main_pretrain.py"),
        [
            "from solo.methods import METHODS",  # register
            "model = METHODS[cfg.method](cfg)",
            "from solo.args.pretrain import parse_cfg",  # wrap_parse_cfg
            "cfg = parse_cfg(cfg)",
            "if cfg.data.num_large_crops != 2:",
        ],
    ),
    "main_knn.py:37,161-165, main_umap.py:28": (
        _script("main_knn.py") + _script("main_umap.py"),
        # attnce-knn and attnce-umap register; attnce-knn fills the options knn.py leaves None
        [
            "from solo.methods import METHODS",
            "for k in args.k:",
            "for distance_fx in args.distance_function:",
        ],
    ),
    "solo/methods/base.py:179,186-205,247-251,510-516": (
        inspect.getsource(BaseMethod),
        [
            "cfg = self.add_and_assert_specific_cfg(cfg)",  # the methods' settings
            "assert cfg.backbone.name in BaseMethod._BACKBONES",  # register (backbones)
            "self.base_model: Callable = self._BACKBONES[cfg.backbone.name]",
            'if self.backbone_name.startswith("resnet"):',
            "self.backbone.num_features",
            "self.num_crops: int = self.num_large_crops + self.num_small_crops",  # anchors alone
            "assert len(X) == self.num_crops",
            "if self.multicrop:",
        ],
    ),
    "solo/args/pretrain.py:138-146 (wrap_parse_cfg)": (
        inspect.getsource(pretrain_args.parse_cfg),
        ["if big_size == pipeline.crop_size:", "cfg.data.num_small_crops = num_small_crops"],
    ),
    "solo/data/dali_dataloader.py:797-800 (M positives as small crops)": (
        inspect.getsource(PretrainDALIDataModule.setup),
        ['[f"small{i}" for i in range(self.num_small_crops)]'],
    ),
    "solo/methods/simclr.py:117-147, mocov3.py:196-216 (the steps skipped)": (
        inspect.getsource(SimCLR.training_step) + inspect.getsource(MoCoV3.training_step),
        ['z = torch.cat(out["z"])', 'Q = out["q"]', 'K = out["momentum_k"]'],
    ),
}


@pytest.mark.parametrize("where", RELIANCES)
def test_solo_learn_still_has_what_the_plugin_relies_on(where):
    source, snippets = RELIANCES[where]
    missing = [s for s in snippets if s not in source]
    assert not missing, f"solo-learn's {where} no longer holds {missing}"


def test_register_adds_new_names_in_place_is_idempotent_and_never_overwrites(monkeypatch):
    registry, backbones = solo.methods.METHODS, BaseMethod._BACKBONES
    own = dict(registry)
    register()
    register()
    assert solo.methods.METHODS is registry and registry["simclr"] is SimCLR
    assert {k: registry[k] for k in own} == own  # solo-learn's own entries untouched
    assert registry["attentionnce"] is METHODS["attentionnce"]
    assert backbones["cifar_resnet50"] is BACKBONES["cifar_resnet50"]
    # The methods' steps skip to these.
    assert MoCoV3.__mro__[1] is BaseMomentumMethod and SimCLR.__mro__[1] is BaseMethod
    monkeypatch.setitem(registry, "attentionnce", SimCLR)  # someone else's entry
    with pytest.raises(RuntimeError, match="already.*not overwriting"):
        register()


def test_wrapper_sets_the_crop_roles_only_and_leaves_solo_learns_methods_alone(tiny_image_folder):
    train = f"data.train_path={tiny_image_folder['train']}"
    compose_cifar = lambda *o: compose(  # noqa: E731
        "pretrain/cifar/attentionnce.yaml", ["data.dataset=custom", train, *o]
    )
    wrapped = wrap_parse_cfg(pretrain_args.parse_cfg)
    assert wrap_parse_cfg(wrapped) is wrapped
    simclr = compose_cifar("~data.val_path")
    simclr.method = "simclr"
    assert wrapped(copy.deepcopy(simclr)) == pretrain_args.parse_cfg(copy.deepcopy(simclr))
    given = compose_cifar("++method_kwargs.d_negg=2")
    method_kwargs = OmegaConf.to_container(given.method_kwargs, resolve=True)
    cfg = wrapped(given)
    assert (cfg.data.num_large_crops, cfg.data.num_small_crops) == (2, 4)  # solo-learn: (6, 0)
    # The settings are the method's to read (its add_and_assert_specific_cfg), not the wrapper's.
    assert OmegaConf.to_container(cfg.method_kwargs) == method_kwargs
    with pytest.raises(MethodConfigError, match="method_kwargs.d_negg is not a setting"):
        METHODS[cfg.method](cfg)
    with pytest.raises(MethodConfigError, match="the anchors are the first 2 crops"):
        wrapped(compose_cifar("augmentations.0.num_crops=3"))


def test_callback_wraps_only_main_pretrains_parse_cfg():
    pretrain = {"parse_cfg": pretrain_args.parse_cfg}
    linear = {"parse_cfg": solo.args.linear.parse_cfg}
    callback = SoloLearnCallback()
    for namespace in (pretrain, linear):
        callback.on_job_start(None, task_function=type("F", (), {"__globals__": namespace})())
    assert pretrain["parse_cfg"].__wrapped__ is pretrain_args.parse_cfg
    assert linear["parse_cfg"] is solo.args.linear.parse_cfg


def test_cifar_resnet_is_the_authors_stem():
    net = BACKBONES["cifar_resnet18"]("attentionnce")
    assert net.conv1.kernel_size == (3, 3) and net.conv1.stride == (1, 1)
    assert isinstance(net.maxpool, torch.nn.Identity) and net.num_features == 512
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 512)
