"""The plugin's Hydra configs, shipped inside the package in solo-learn's layout: the primary
configs ``pretrain/<family>/<recipe>.yaml`` and ``linear/<family>/*.yaml``, composed from pieces
each written once (``trainer/``, ``data/``, ``data_format/``, ``method/``, ``views/``, ``wandb/``,
``diagnostics/``). Every primary config adds ``pkg://attnce_plugin.configs`` to Hydra's search
path, so ``main_pretrain.py --config-path pkg://attnce_plugin.configs --config-name
pretrain/cifar/attentionnce.yaml`` finds them wherever the package is installed.
"""

from __future__ import annotations

from pathlib import Path


def config_dir() -> Path:
    """The folder holding the shipped configs (inside the installed package)."""
    return Path(__file__).resolve().parent
