"""AttentionNCE methods for solo-learn (importing this needs solo-learn >= 1.0.6).

``METHODS`` maps the names used as ``method:`` in configs to the classes;
:func:`attnce_plugin.registration.register` adds them to ``solo.methods.METHODS``.
"""

from attnce_plugin.solo_compat import require_solo

require_solo()  # a clear install hint instead of "No module named 'solo'"

from attnce_plugin.methods.attentionnce import AttentionNCE  # noqa: E402
from attnce_plugin.methods.crops import CropLayout, CropLayoutError, resolve_crop_layout  # noqa: E402
from attnce_plugin.methods.common import MethodConfigError, NonFiniteLossError  # noqa: E402
from attnce_plugin.methods.mocov3_attentionnce import MoCoV3AttentionNCE  # noqa: E402

METHODS = {
    AttentionNCE.METHOD_NAME: AttentionNCE,
    MoCoV3AttentionNCE.METHOD_NAME: MoCoV3AttentionNCE,
}

__all__ = [
    "AttentionNCE",
    "MoCoV3AttentionNCE",
    "METHODS",
    "CropLayout",
    "CropLayoutError",
    "MethodConfigError",
    "NonFiniteLossError",
    "resolve_crop_layout",
]
