"""The loss and the attention head import with torch alone."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("solo", "lightning", "pytorch_lightning", "hydra", "omegaconf", "timm", "torchvision")


def test_loss_and_head_import_with_torch_alone() -> None:
    code = (
        "import json, sys\n"
        "from attnce_plugin.losses import attentionnce_loss_func, attentionnce_mocov3_loss_func\n"
        "import attnce_plugin.attention, attnce_plugin\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert "torch" in loaded and "attnce_plugin" in loaded
    heavy = sorted(loaded & set(HEAVY))
    assert not heavy, f"importing the loss also imported {heavy}"
