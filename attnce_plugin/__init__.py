"""AttentionNCE ("Contrastive Learning with Instance Attention") for solo-learn.

Importing the package, its losses (:mod:`attnce_plugin.losses`) or the attention head
(:mod:`attnce_plugin.attention`) needs torch alone. solo-learn is imported only where it is used: :func:`register` (which adds the
plugin's methods to ``solo.methods.METHODS``), :mod:`attnce_plugin.methods`, the Hydra callback the
shipped configs declare, and the ``attnce-knn`` / ``attnce-umap`` commands.
"""

from typing import Dict

from attnce_plugin.losses import attentionnce_loss_func, attentionnce_mocov3_loss_func

__version__ = "0.5.0"
__all__ = ["attentionnce_loss_func", "attentionnce_mocov3_loss_func", "register", "__version__"]


def register() -> Dict[str, type]:
    """Add ``attentionnce`` and ``mocov3_attentionnce`` to ``solo.methods.METHODS``; idempotent.

    Needed before looking a checkpoint's method up in solo-learn's registry from your own code;
    solo-learn's scripts get it from the shipped configs' Hydra callback or from the
    ``attnce-knn`` / ``attnce-umap`` wrappers.

    Returns:
        The name -> class mapping that was registered.

    Raises:
        SoloLearnMissingError: solo-learn >= 1.0.6 is not installed.
    """
    from attnce_plugin.registration import register as _register

    return _register()
