"""The CLI wrappers' checkpoint device (attnce_plugin/cli/__init__.py): solo-learn's
``main_knn.py`` / ``main_umap.py`` load without a map location and send ``.cuda()`` batches, so
the wrappers load the plugin's checkpoints onto the GPU when there is one.

Needs solo-learn >= 1.0.6; FAILS (not skips) without it.
"""

from __future__ import annotations

from typing import Any, List

import pytest
import torch

from attnce_plugin.solo_compat import require_solo

require_solo()

import attnce_plugin.cli as cli  # noqa: E402
from attnce_plugin.methods import AttentionNCE, MoCoV3AttentionNCE  # noqa: E402


@pytest.mark.parametrize("cuda,expected", [(True, "cuda"), (False, "cpu")])
def test_wrapper_loads_checkpoints_to_the_gpu_when_there_is_one(cuda, expected, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert cli.checkpoint_map_location() == expected
    seen: List[Any] = []

    def lightning_load(cls, path, map_location=None, *args, **kwargs):
        seen.append((cls, path, map_location, args, kwargs))

    # Lightning's loading stands in for the real one; the script itself is not run: what matters
    # is what main_knn.py's METHODS[...].load_from_checkpoint(path, strict=False, cfg=cfg) does.
    for cls in (AttentionNCE, MoCoV3AttentionNCE):
        monkeypatch.setattr(cls, "load_from_checkpoint", classmethod(lightning_load))

    def script(*args, **kwargs):
        AttentionNCE.load_from_checkpoint("a.ckpt", strict=False, cfg="c")
        MoCoV3AttentionNCE.load_from_checkpoint("b.ckpt", "cpu", strict=False)  # explicit wins

    monkeypatch.setattr(cli.runpy, "run_path", script)
    monkeypatch.setattr("sys.argv", ["attnce-knn"])
    cli.run_solo_script("main_knn.py", [])
    assert seen == [
        (AttentionNCE, "a.ckpt", expected, (), {"strict": False, "cfg": "c"}),
        (MoCoV3AttentionNCE, "b.ckpt", "cpu", (), {"strict": False}),
    ]
    # Only for the script's run: afterwards the classes' own loading again.
    seen.clear()
    AttentionNCE.load_from_checkpoint("a.ckpt")
    assert seen == [(AttentionNCE, "a.ckpt", None, (), {})]
