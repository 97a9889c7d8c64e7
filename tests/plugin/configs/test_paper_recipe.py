"""The paper-recipe configs (pretrain/{cifar,stl10}/{attentionnce,simclr}_paper.yaml) train for 2
steps through solo-learn's own main_pretrain.py, and their checkpoints evaluate through
main_linear.py with the paper's linear config.

Shrunk for the CPU by overrides only (custom image folder, 16 px crops, batch 4, 2 steps); the
network, optimizer and view layout are the configs' own and are checked in what solo-learn saved
(args.json) and in the checkpoint's tensors. FAILS, never skips, without solo-learn.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest
import torch

from attnce_plugin.solo_compat import require_solo, solo_checkout_dir

require_solo()

from helpers.scripts import find_checkpoints, run_script  # noqa: E402

pytestmark = pytest.mark.integration  # trains through solo-learn or runs its scripts


#: (family, config) -> (d_pos, d_neg, positive crops)
PAPER = {
    ("cifar", "attentionnce_paper"): (1, 10, 4),
    ("cifar", "simclr_paper"): (None, None, 0),
    ("stl10", "attentionnce_paper"): (2, 0.5, 4),
    ("stl10", "simclr_paper"): (None, None, 0),
}

#: Overrides that shrink a run for the CPU; nothing about the recipe.
CPU = [
    "data.dataset=custom",
    "data.num_workers=0",
    "trainer=cpu",
    "optimizer.batch_size=4",
    "max_epochs=1",
    "++limit_train_batches=2",
    "auto_resume.enabled=False",
    "views.crop_size=16",
    "~data.val_path",
]


def _pretrain(family: str, name: str, data: Dict[str, Path], cwd: Path) -> Path:
    ckpt_dir = cwd / "ckpt"
    cwd.mkdir(parents=True, exist_ok=True)
    argv = [
        str(solo_checkout_dir() / "main_pretrain.py"),
        "--config-path",
        "pkg://attnce_plugin.configs",
        "--config-name",
        f"pretrain/{family}/{name}.yaml",
        *CPU,
        f"data.train_path={data['train']}",
        f"checkpoint.dir={ckpt_dir}",
    ]
    run_script(argv, cwd, threads=2)
    (ckpt,) = find_checkpoints(ckpt_dir)
    return ckpt


@pytest.fixture(scope="module")
def pretrained(tiny_image_folder, tmp_path_factory) -> Callable[[str, str], Path]:
    """Each paper config pretrained once: the linear test evaluates the checkpoint checked here."""
    done: Dict[Tuple[str, str], Path] = {}

    def get(family: str, name: str) -> Path:
        if (family, name) not in done:
            cwd = tmp_path_factory.mktemp(f"{family}-{name}")
            done[(family, name)] = _pretrain(family, name, tiny_image_folder, cwd)
        return done[(family, name)]

    return get


@pytest.mark.parametrize("family,name", sorted(PAPER))
def test_paper_config_trains_with_the_authors_recipe(family, name, pretrained):
    ckpt = pretrained(family, name)
    args = json.loads((ckpt.parent / "args.json").read_text())
    d_pos, d_neg, m = PAPER[(family, name)]
    # Optimizer: Adam, lr 1e-3 at batch 256 (solo scales it: 4 images -> 1e-3 * 4 / 256),
    # weight decay 1e-6, constant learning rate, fp32.
    opt = args["optimizer"]
    assert (opt["name"], opt["weight_decay"], args["scheduler"]["name"]) == ("adam", 1e-6, "none")
    assert opt["lr"] == pytest.approx(1e-3 * 4 / 256)
    assert str(args["precision"]) == "32" and args["backbone"]["name"] == "cifar_resnet50"
    kwargs = args["method_kwargs"]
    assert (kwargs["projector"], kwargs["proj_hidden_dim"], kwargs["proj_output_dim"]) == (
        "mlp_bn",
        512,
        128,
    )
    assert kwargs["temperature"] == 0.5
    assert kwargs["loss"] == ("simclr" if "simclr" in name else "attentionnce")
    if d_pos is not None:
        assert (kwargs["d_pos"], kwargs["d_neg"]) == (d_pos, d_neg)
    # Views: 2 anchors + M positives, one recipe with blur probability 0.5.
    assert (args["data"]["num_large_crops"], args["data"]["num_small_crops"]) == (2, m)
    assert [p["num_crops"] for p in args["augmentations"]] == [2, m]
    assert {p["gaussian_blur"]["prob"] for p in args["augmentations"]} == {0.5}
    # The tensors: the authors' 3x3 stem without max-pool, their projector (no bias, BN).
    state = torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]
    assert state["backbone.conv1.weight"].shape == (64, 3, 3, 3)
    assert state["projector.0.weight"].shape == (512, 2048) and "projector.0.bias" not in state
    assert state["projector.1.running_mean"].shape == (512,)
    assert state["projector.3.weight"].shape == (128, 512) and "projector.3.bias" in state


def test_paper_linear_config_evaluates_a_paper_checkpoint(pretrained, tiny_image_folder, tmp_path):
    """main_linear.py with linear/stl10/attentionnce_paper.yaml: the Hydra callback registers
    cifar_resnet50 in that process too, and the checkpoint's backbone loads into it."""
    ckpt = pretrained("stl10", "attentionnce_paper")
    argv: List[str] = [
        str(solo_checkout_dir() / "main_linear.py"),
        "--config-path",
        "pkg://attnce_plugin.configs",
        "--config-name",
        "linear/stl10/attentionnce_paper.yaml",
        f"pretrained_feature_extractor='{ckpt}'",
        "data.dataset=custom",
        "data.num_workers=0",
        f"data.train_path={tiny_image_folder['train']}",
        f"data.val_path={tiny_image_folder['val']}",
        "optimizer.batch_size=4",
        "trainer=cpu",
        "max_epochs=1",
        "++limit_train_batches=1",
        "++limit_val_batches=1",
        f"checkpoint.dir={tmp_path / 'lin'}",
        "auto_resume.enabled=False",
    ]
    proc = run_script(argv, tmp_path, threads=2)
    assert find_checkpoints(tmp_path / "lin"), proc.stdout[-3000:]
    args = json.loads(next((tmp_path / "lin").rglob("args.json")).read_text())
    assert (args["optimizer"]["name"], args["optimizer"]["lr"]) == (
        "adam",
        pytest.approx(1e-2 * 4 / 256),
    )
    assert args["backbone"]["name"] == "cifar_resnet50"
