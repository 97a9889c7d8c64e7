"""AttentionNCE methods for solo-learn (importing this needs solo-learn >= 1.0.6).

``METHODS`` maps the names used as ``method:`` in configs to the classes;
:func:`attnce_plugin.register` adds them to ``solo.methods.METHODS``.

Layout: ``attentionnce.py`` and ``mocov3_attentionnce.py`` are the two methods (what differs);
``core.py`` is what both add to their solo-learn base; ``settings.py`` declares their
``method_kwargs``; ``crops.py`` the crop roles; ``indexes.py`` sample indexes unique across
nodes (DALI without index encoding); ``positives.py`` the positive forwards; ``compiling.py``
``method_kwargs.compile``. The opt-in callbacks (health, guard, images, recorder) live in
:mod:`attnce_plugin.callbacks`.
"""

from attnce_plugin.solo_compat import require_solo

require_solo()  # a clear install hint instead of "No module named 'solo'"

from attnce_plugin.methods.attentionnce import AttentionNCE  # noqa: E402
from attnce_plugin.methods.crops import (
    CropLayout,
    CropLayoutError,
    resolve_crop_layout,
)  # noqa: E402
from attnce_plugin.methods.mocov3_attentionnce import MoCoV3AttentionNCE  # noqa: E402
from attnce_plugin.methods.settings import MethodConfigError  # noqa: E402

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
    "resolve_crop_layout",
]
