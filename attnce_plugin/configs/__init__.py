"""The plugin's Hydra configs, shipped inside the package (solo-learn's layout).

* ``pretrain/<family>/<recipe>.yaml`` and ``linear/<family>/attentionnce.yaml``: the primary
  configs users pass to solo-learn's ``main_pretrain.py`` / ``main_linear.py``;
* the shared pieces they are composed from, each written once: ``trainer/`` (Lightning, checkpoint,
  the Hydra callback), ``data/`` (one per dataset family), ``data_format/`` (``image_folder`` or
  ``dali``), ``method/`` (network, loss and optimizer recipe of each method), ``views/`` (the crop
  pipelines, with crop sizes and probabilities interpolated from ``views.*``) and ``wandb/``.

Every primary config adds ``pkg://attnce_plugin.configs`` to Hydra's search path, so the pieces are
found wherever the package is installed. Two equivalent ways to point solo-learn's scripts at a
config::

    python main_pretrain.py --config-path pkg://attnce_plugin.configs \\
        --config-name pretrain/cifar/attentionnce.yaml
    python main_pretrain.py --config-path "$(attnce-configs)/pretrain/cifar" \\
        --config-name attentionnce.yaml
"""

from __future__ import annotations

from pathlib import Path

#: Hydra search-path entry of this folder.
SEARCH_PATH = "pkg://attnce_plugin.configs"


def config_dir() -> Path:
    """The folder holding the shipped configs (inside the installed package)."""
    return Path(__file__).resolve().parent
