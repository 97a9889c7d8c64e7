"""AttentionNCE loss functions, pure functions in the style of solo-learn's ``*_loss_func``."""

from attnce_plugin.losses.attentionnce import attentionnce_loss_func
from attnce_plugin.losses.attentionnce_mocov3 import attentionnce_mocov3_loss_func

__all__ = ["attentionnce_loss_func", "attentionnce_mocov3_loss_func"]
