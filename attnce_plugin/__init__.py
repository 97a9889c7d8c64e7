"""AttentionNCE ("Contrastive Learning with Instance Attention") for solo-learn.

The losses (:mod:`attnce_plugin.losses`) import with torch alone; solo-learn is imported only by
:func:`register`, :mod:`attnce_plugin.methods`, the shipped configs' Hydra callback and the CLI.
"""

from typing import Dict

from attnce_plugin.losses import attentionnce_loss_func, attentionnce_mocov3_loss_func

__version__ = "0.7.0"
__all__ = ["attentionnce_loss_func", "attentionnce_mocov3_loss_func", "register", "__version__"]


def register() -> Dict[str, type]:
    """Add ``attentionnce`` and ``mocov3_attentionnce`` to ``solo.methods.METHODS`` (and the
    plugin's backbones to solo-learn's); idempotent. solo-learn's scripts get this from the
    shipped configs' Hydra callback or the ``attnce-knn`` / ``attnce-umap`` wrappers."""
    from attnce_plugin.seam import register as _register

    return _register()
