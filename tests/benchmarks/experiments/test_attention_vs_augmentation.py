"""benchmarks.experiments.attention_vs_augmentation: the probe-attention measurement and CPU runs.

Needs solo-learn >= 1.0.6 (the script rebuilds solo-learn methods); FAILS, not skips, without it.
The checkpoints are built in-process from the shipped configs (no training: the weights are the
seeded initialisation, enough to exercise loading and both encoder layouts).
"""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path
from types import ModuleType
from typing import Dict, List

import numpy as np
import pytest
import torch

from attnce_plugin.solo_compat import require_solo

require_solo()  # loudly, at collection

from helpers.configs import compose_pretrain_cfg  # noqa: E402

from benchmarks.options import parse  # noqa: E402

SCALES = (1.0, 0.3, 0.08)


@pytest.fixture(scope="module")
def script() -> ModuleType:
    module = importlib.import_module("benchmarks.experiments.attention_vs_augmentation")
    return module


@pytest.fixture(scope="module")
def checkpoints(tiny_image_folder, tmp_path_factory) -> Dict[str, Path]:
    """``{method: ckpt}`` for attentionnce and mocov3_attentionnce, each with a solo-style
    args.json beside it (what solo's Checkpointer.save_args writes)."""
    from omegaconf import OmegaConf
    from solo.methods import METHODS

    import attnce_plugin

    attnce_plugin.register()

    root = tmp_path_factory.mktemp("attn_vs_aug_ckpts")
    out = {}
    for name, extra in (
        ("attentionnce.yaml", []),
        ("mocov3_attentionnce.yaml", ["method_kwargs.pred_hidden_dim=32"]),
    ):
        cfg = compose_pretrain_cfg(name, tiny_image_folder["train"], extra)
        torch.manual_seed(0)
        model = METHODS[cfg.method](cfg)
        folder = root / cfg.method
        folder.mkdir()
        torch.save({"state_dict": model.state_dict()}, folder / "run-ep=0.ckpt")
        with open(folder / "args.json", "w") as fh:
            json.dump(OmegaConf.to_container(cfg), fh, default=lambda o: "<not serializable>")
        out[cfg.method] = folder / "run-ep=0.ckpt"
    return out


def _argv(ckpt: Path, data: Path, out: Path, *extra: str) -> List[str]:
    return [
        "--experiment",
        "attention_vs_augmentation",
        "--ckpt",
        str(ckpt),
        "--data",
        str(data),
        "--out",
        str(out),
        "--num-images",
        "4",
        "--repeats",
        "2",
        "--scales",
        ",".join(map(str, SCALES)),
        "--batch-size",
        "8",
        *extra,
    ]


def _table(text: str) -> List[Dict[str, float]]:
    """Rows of the printed markdown table, as {column: value}."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(head, (float(c) for c in line.strip("|").split("|")))) for line in lines[1:]]


def _check_rows(rows: List[Dict[str, float]], num_p: int) -> None:
    assert [r["scale"] for r in rows] == list(SCALES)
    for r in rows:
        assert math.isfinite(r["alpha*P"]) and 0.0 < r["alpha*P"] < num_p, r
        assert r["alpha*P"] == pytest.approx(r["alpha_probe"] * num_p, abs=2e-4)
        assert 0.0 <= r["frac lowest"] <= 1.0 and math.isfinite(r["stderr"])


# --------------------------------------------------------------------------- the measurement


def _reference(anchor, refs, probe, d_pos):
    """softmax_m(cos(anchor, p_m) / d_pos) with the probe last, in float64 numpy."""
    a = anchor.numpy().astype(np.float64)
    p = np.concatenate([refs.numpy(), probe.numpy()[:, None]], axis=1).astype(np.float64)
    a /= np.linalg.norm(a, axis=-1, keepdims=True)
    p /= np.linalg.norm(p, axis=-1, keepdims=True)
    cos = np.einsum("nd,npd->np", a, p)
    e = np.exp((cos - cos.max(axis=1, keepdims=True)) / d_pos)
    alpha = e / e.sum(axis=1, keepdims=True)
    probe_ref = np.einsum("nd,nrd->nr", p[:, -1], p[:, :-1]).mean(axis=1)
    return alpha, cos, probe_ref


@pytest.mark.parametrize("d_pos", [0.05, 1.0, 4.0])
def test_probe_attention_matches_float64_softmax(script, d_pos):
    g = torch.Generator().manual_seed(3)
    n, num_refs, dim = 9, 3, 6
    # Unnormalised inputs of varied norm: the function must normalise as the loss does.
    anchor = torch.randn(n, dim, generator=g) * 3
    refs = torch.randn(n, num_refs, dim, generator=g) * torch.rand(n, num_refs, 1, generator=g) * 5
    probe = torch.randn(n, dim, generator=g) * 0.1
    out = script.probe_attention(anchor, refs, probe, d_pos)
    alpha, cos, probe_ref = _reference(anchor, refs, probe, d_pos)
    num_p = num_refs + 1
    np.testing.assert_allclose(out["alpha"].numpy(), alpha[:, -1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["alpha_p"].numpy(), alpha[:, -1] * num_p, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["cos_anchor_probe"].numpy(), cos[:, -1], atol=1e-6)
    np.testing.assert_allclose(out["cos_anchor_refs"].numpy(), cos[:, :-1].mean(1), atol=1e-6)
    np.testing.assert_allclose(out["cos_probe_refs"].numpy(), probe_ref, atol=1e-6)
    lowest = (alpha[:, -1] <= alpha[:, :-1].min(axis=1)).astype(np.float32)
    np.testing.assert_array_equal(out["lowest"].numpy(), lowest)


# --------------------------------------------------------------------------- end to end


def test_attentionnce_checkpoint(script, checkpoints, tiny_image_folder, tmp_path, capsys):
    out = tmp_path / "out"
    argv = _argv(checkpoints["attentionnce"], tiny_image_folder["val"], out)
    assert script.main(parse(argv), "cmd") == 0
    text = capsys.readouterr().out
    assert "M = 4 positives, P = 4 attention entries" in text
    assert "d_pos = 1," in text and "images = 4 x 2 draws" in text
    rows = _table(text)
    _check_rows(rows, num_p=4)
    assert (out / "plot.png").stat().st_size > 0
    assert _table((out / "table.md").read_text()) == rows
    saved = json.loads((out / "results.json").read_text())
    assert saved["meta"]["method"] == "attentionnce" and len(saved["rows"]) == len(SCALES)
    assert (out / "results.csv").read_text().startswith("scale,")


def test_moco_form_counts_the_other_anchor_key(
    script, checkpoints, tiny_image_folder, tmp_path, capsys
):
    out = tmp_path / "out"
    argv = _argv(checkpoints["mocov3_attentionnce"], tiny_image_folder["val"], out)
    assert script.main(parse(argv + ["--probe-photometric", "none"]), "cmd") == 0
    text = capsys.readouterr().out
    assert "P = 5 attention entries" in text and "other anchor view's momentum key" in text
    assert "no colour, blur or flip" in text
    _check_rows(_table(text), num_p=5)
    assert (out / "plot.png").is_file()


def test_refuses_bad_scales_other_methods_and_single_positive(
    script, checkpoints, tiny_image_folder, tmp_path
):
    base = _argv(checkpoints["attentionnce"], tiny_image_folder["val"], tmp_path / "out")
    with pytest.raises(ValueError, match=r"--scales=\[1.5\]: allowed values are numbers in"):
        script.check(parse(base + ["--scales", "1.5"]))
    run = json.loads((checkpoints["attentionnce"].parent / "args.json").read_text())
    byol_args = tmp_path / "args.json"
    byol_args.write_text(json.dumps({**run, "method": "byol"}))
    with pytest.raises(ValueError, match="'byol' checkpoint; allowed methods"):
        script.check(parse(base + ["--args", str(byol_args)]))
    with pytest.raises(ValueError, match="--num-positives=1: allowed values are >= 2"):
        script.check(parse(base + ["--num-positives", "1"]))
    assert not (tmp_path / "out").exists()
