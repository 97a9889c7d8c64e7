"""The plugin's patches of solo-learn (attnce_plugin/patches.py): solo-learn's own entries are
untouched (what the patches rely on: test_solo_reliances.py). FAILS, never skips, without
solo-learn."""

from __future__ import annotations

import pytest

from attnce_plugin.solo_compat import require_solo

require_solo()

import attnce_plugin  # noqa: E402
from attnce_plugin import patches  # noqa: E402


def test_registration_adds_new_names_only_and_is_idempotent() -> None:
    import solo.methods
    from solo.methods.base import BaseMethod

    methods_before = dict(solo.methods.METHODS)
    backbones_before = dict(BaseMethod._BACKBONES)
    attnce_plugin.register()
    attnce_plugin.register()
    for name, cls in methods_before.items():
        assert solo.methods.METHODS[name] is cls
    for name, factory in backbones_before.items():
        assert BaseMethod._BACKBONES[name] is factory
    added = set(BaseMethod._BACKBONES) - set(backbones_before)
    assert added <= {"cifar_resnet18", "cifar_resnet50"}
    assert {"cifar_resnet18", "cifar_resnet50"} <= set(BaseMethod._BACKBONES)


def test_someone_elses_entry_is_never_overwritten() -> None:
    class Other:
        __module__ = "thirdparty.methods"

    with pytest.raises(RuntimeError, match="will not overwrite"):
        patches.add_methods({"attentionnce": Other}, {"attentionnce": object})
    with pytest.raises(RuntimeError, match="will not overwrite"):
        patches.add_backbones({"cifar_resnet50": lambda *a: None}, {"cifar_resnet50": object})


def test_cifar_resnet_is_the_authors_stem() -> None:
    import torch

    from attnce_plugin.backbones import BACKBONES

    net = BACKBONES["cifar_resnet50"]("attentionnce")
    assert tuple(net.conv1.weight.shape) == (64, 3, 3, 3) and net.conv1.padding == (1, 1)
    assert isinstance(net.maxpool, torch.nn.Identity) and net.num_features == 2048
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 2048)
