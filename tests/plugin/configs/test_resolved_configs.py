"""The shipped configs, composed by Hydra from shared pieces, resolve to what the copies resolved to
in 0.2.0 (tests/data/resolved_configs_0.2.0.json), up to the differences listed here.

Each config is composed both ways the docs show: from the package root
(``--config-path pkg://attnce_plugin.configs --config-name pretrain/<family>/<recipe>``) and from
the family folder (``--config-path <dir>/pretrain/<family> --config-name <recipe>``). The former
``*_dali.yaml`` twins are the same configs with the one override ``data_format=dali``.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import pytest
from helpers.scripts import REPO_ROOT  # noqa: E402
from hydra import compose, initialize_config_dir, initialize_config_module
from omegaconf import OmegaConf, open_dict

from attnce_plugin.configs import config_dir

SNAPSHOT = REPO_ROOT / "tests" / "data" / "resolved_configs_0.2.0.json"
OLD: Dict[str, Dict[str, Any]] = json.loads(SNAPSHOT.read_text())

#: Every difference between a 0.2.0 config and its composed successor: (config name or "*" or a
#: prefix ending in "/", the change as printed by :func:`diff`).
ALLOWED: Tuple[Tuple[str, str], ...] = (
    # The opt-in callbacks of the methods (diagnostics/default.yaml, composed by method/*.yaml).
    ("pretrain/", "+ diagnostics"),
    # The interpolation source of crop sizes, blur probabilities and M (views/*.yaml).
    ("pretrain/", "+ views"),
    # DALI configs give real dataset indexes (unique across nodes): data_format/dali.yaml.
    ("pretrain/custom/attentionnce_dali", "+ dali"),
    ("pretrain/custom/attentionnce_multicrop_dali", "+ dali"),
    ("pretrain/custom/mocov3_attentionnce_dali", "+ dali"),
    ("pretrain/imagenet-100/attentionnce_dali", "+ dali"),
    ("pretrain/imagenet-100/attentionnce_multicrop_dali", "+ dali"),
    ("pretrain/imagenet-100/mocov3_attentionnce_dali", "+ dali"),
    # main_linear.py needs no plugin hook: pretrain_method=mocov3 selects MoCo v3's ViT.
    ("linear/", "- __hydra_callbacks__.attnce"),
    # The shared custom-data piece carries solo-learn's own default.
    ("linear/custom/attentionnce", "+ data.no_labels"),
)


def diff(old: Any, new: Any, path: str = "") -> Iterator[str]:
    """Lines ``+ key`` (added), ``- key`` (removed) and ``~ key: old -> new`` (changed)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if key not in old:
                yield f"+ {path}{key}"
            elif key not in new:
                yield f"- {path}{key}"
            else:
                yield from diff(old[key], new[key], f"{path}{key}.")
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            yield from diff(a, b, f"{path}{i}.")
    elif old != new or type(old) is not type(new):
        yield f"~ {path[:-1]}: {old!r} -> {new!r}"


def _plain(cfg: Any) -> Dict[str, Any]:
    callbacks = OmegaConf.to_container(cfg.hydra.callbacks, resolve=True)
    with open_dict(cfg):
        del cfg["hydra"]
    out = OmegaConf.to_container(cfg, resolve=True)
    out["__hydra_callbacks__"] = callbacks
    return out


def compose_from_package(name: str, overrides: Sequence[str] = ()) -> Dict[str, Any]:
    with initialize_config_module("attnce_plugin.configs", version_base="1.2"):
        return _plain(compose(name, overrides=list(overrides), return_hydra_config=True))


def compose_from_folder(name: str, overrides: Sequence[str] = ()) -> Dict[str, Any]:
    folder, _, file = name.rpartition("/")
    with initialize_config_dir(str(config_dir() / folder), version_base="1.2"):
        return _plain(compose(file, overrides=list(overrides), return_hydra_config=True))


def successor(old_name: str) -> Tuple[str, List[str]]:
    """The composed config (and overrides) that replaces a 0.2.0 config."""
    if old_name.endswith("_dali"):
        return old_name[: -len("_dali")], ["data_format=dali"]
    return old_name, []


def allowed(name: str, line: str) -> bool:
    for who, change in ALLOWED:
        matches = who == name or (who.endswith("/") and name.startswith(who))
        if matches and (line == change or line.startswith(change + ".")):
            return True
    return False


@pytest.mark.parametrize("old_name", sorted(OLD))
@pytest.mark.parametrize("how", ["package", "folder"])
def test_composed_config_resolves_as_before(old_name: str, how: str) -> None:
    name, overrides = successor(old_name)
    composer = compose_from_package if how == "package" else compose_from_folder
    new = composer(name, overrides)
    unexpected = [line for line in diff(OLD[old_name], new) if not allowed(old_name, line)]
    assert not unexpected, f"{old_name} ({how}) changed:\n" + "\n".join(unexpected)


def test_every_shipped_config_is_covered() -> None:
    """A new primary config needs no snapshot, but none of the old ones may disappear."""
    shipped = {
        str(p.relative_to(config_dir()).with_suffix(""))
        for kind in ("pretrain", "linear")
        for p in (config_dir() / kind).glob("*/*.yaml")
    }
    missing = {successor(n)[0] for n in OLD} - shipped
    assert not missing, f"0.2.0 configs without a successor: {sorted(missing)}"


def test_attnce_configs_prints_the_folder_to_pass_as_config_path(capsys) -> None:
    from attnce_plugin.cli.configs import main

    assert main(["pretrain/cifar"]) == 0
    assert capsys.readouterr().out.strip() == str(config_dir() / "pretrain" / "cifar")
    assert main(["--list"]) == 0
    listed = capsys.readouterr().out.split()
    assert "pretrain/cifar/attentionnce_paper.yaml" in listed
    assert "linear/stl10/attentionnce_paper.yaml" in listed
    assert main(["nowhere"]) == 2
