"""AttentionNCE for solo-learn.

``import attnce_plugin`` registers the plugin's methods in ``solo.methods.METHODS`` when a
compatible solo-learn is installed (idempotent); the loss functions need only torch.
"""

from attnce_plugin.losses import attentionnce_loss_func, attentionnce_mocov3_loss_func
from attnce_plugin.solo_compat import solo_available

__version__ = "0.2.0"
__all__ = ["attentionnce_loss_func", "attentionnce_mocov3_loss_func", "__version__"]

if solo_available():
    from attnce_plugin.registration import register

    register()
