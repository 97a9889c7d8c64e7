"""The plugin's patches of solo-learn (attnce_plugin/patches.py): what each relies on still holds
in the installed solo-learn, a broken reliance is named, and solo-learn's own entries are
untouched. FAILS, never skips, without solo-learn."""

from __future__ import annotations

import pytest

from attnce_plugin.solo_compat import require_solo

require_solo()

import attnce_plugin  # noqa: E402
from attnce_plugin import patches  # noqa: E402


def test_every_reliance_holds_in_the_installed_solo_learn() -> None:
    problems = patches.check_reliances()
    assert not problems, "solo-learn no longer has what the plugin relies on:\n" + "\n".join(
        problems
    )


def test_a_broken_reliance_is_named_with_its_patch_and_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A solo-learn whose main_pretrain.py no longer imports parse_cfg by name.
    original = patches._script_source
    monkeypatch.setattr(
        patches,
        "_script_source",
        lambda name: original(name).replace("from solo.args.pretrain import parse_cfg", "pass"),
    )
    problems = patches.check_reliances()
    assert len(problems) == 1
    assert problems[0].startswith("patch_pretrain_parse_cfg relies on main_pretrain.py:30,65,71-72")
    assert "from solo.args.pretrain import parse_cfg" in problems[0]


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
