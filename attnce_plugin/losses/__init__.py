"""AttentionNCE loss functions, pure functions in the style of solo-learn's ``*_loss_func``.

Each form has a function returning the loss and a ``*_loss_with_attention`` twin that also returns
the attention weights of the call (for logging and analysis).
"""

from attnce_plugin.attention import AttentionWeights, LossWithAttention
from attnce_plugin.losses.attentionnce import (
    attentionnce_loss_func,
    attentionnce_loss_with_attention,
)
from attnce_plugin.losses.attentionnce_mocov3 import (
    attentionnce_mocov3_loss_func,
    attentionnce_mocov3_loss_with_attention,
)

__all__ = [
    "AttentionWeights",
    "LossWithAttention",
    "attentionnce_loss_func",
    "attentionnce_loss_with_attention",
    "attentionnce_mocov3_loss_func",
    "attentionnce_mocov3_loss_with_attention",
]
