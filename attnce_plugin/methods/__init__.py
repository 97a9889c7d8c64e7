"""The AttentionNCE methods for solo-learn (needs solo-learn >= 1.0.6): ``METHODS`` maps the
``method:`` names of the configs to the classes; :func:`attnce_plugin.register` adds them to
``solo.methods.METHODS``."""

from attnce_plugin.install import require_solo

require_solo()  # install instructions instead of "No module named 'solo'"

from attnce_plugin.methods.attentionnce import AttentionNCE  # noqa: E402
from attnce_plugin.methods.mocov3_attentionnce import MoCoV3AttentionNCE  # noqa: E402

METHODS = {"attentionnce": AttentionNCE, "mocov3_attentionnce": MoCoV3AttentionNCE}

__all__ = ["AttentionNCE", "MoCoV3AttentionNCE", "METHODS"]
