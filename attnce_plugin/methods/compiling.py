"""``method_kwargs.compile``: ``torch.compile`` of a method's networks, checkpoints unchanged.

``nn.Module.compile()`` compiles a module's ``forward`` in place, so ``state_dict`` keys stay
those of the eager module (``torch.compile(module)`` would wrap it and prefix every key with
``_orig_mod.``): a checkpoint written with ``compile: true`` loads into ``main_linear.py``, the
kNN/UMAP wrappers and an eager model, and vice versa. The loss is not compiled: it is one fused
autograd node already, and its index matching has data-dependent shapes that would break the graph.
Measured effect: docs/performance.md.
"""

from __future__ import annotations

from typing import List, Sequence

import torch.nn as nn


def compile_submodules(owner: nn.Module, names: Sequence[str]) -> List[str]:
    """Compile ``owner.<name>`` in place for each name that exists and is an ``nn.Module``.

    Args:
        owner: the method (a LightningModule).
        names: attribute names, e.g. ``("backbone", "projector")``; absent ones are skipped (the
            MoCo form has momentum networks, the SimCLR form has none).

    Returns:
        The names that were compiled, in order.
    """
    compiled = []
    for name in names:
        module = getattr(owner, name, None)
        if isinstance(module, nn.Module):
            module.compile()
            compiled.append(name)
    return compiled
