"""Opt-in Lightning callbacks of the plugin's methods, one module each, switched on by the keys of
the top-level config group ``diagnostics:``.

The methods' ``configure_callbacks()`` returns :func:`diagnostic_callbacks` of their config. A
config without the group gets none; the shipped configs compose ``diagnostics/default.yaml``
(through their method piece), which switches on all but the recorder:

============================  ==========================  =========================================
key                           values (shipped)            callback
============================  ==========================  =========================================
``representation_health``     bool (true)                 :class:`.health.RepresentationHealth`
``finite_loss_guard``         bool (true)                 :class:`.guard.FiniteLossGuard`
``finite_check_every``        integer >= 1 (50)           batches between two guard checks
``name_unreadable_images``    bool (true)                 :class:`.images.NameUnreadableImages`
``record``                    file path, null / "" = off  :class:`.recorder.RunRecorder`
============================  ==========================  =========================================
"""

from __future__ import annotations

from typing import Any, Dict, List

from omegaconf import OmegaConf

from attnce_plugin.checks import check_int_at_least

#: The keys of ``diagnostics:`` and their allowed values, for messages.
DIAGNOSTICS_KEYS: Dict[str, str] = {
    "representation_health": "true or false",
    "finite_loss_guard": "true or false",
    "finite_check_every": "an integer >= 1",
    "name_unreadable_images": "true or false",
    "record": "a file path, or null / '' for off",
}
#: The guard's interval when ``finite_check_every`` is not given.
DEFAULT_FINITE_CHECK_EVERY = 50


class DiagnosticsConfigError(ValueError):
    """A ``diagnostics.<key>`` is unknown or has a value it does not allow."""


def _group(cfg: Any) -> Any:
    """``cfg.diagnostics`` (a DictConfig or a plain dict config), None when absent."""
    group = cfg.get("diagnostics") if hasattr(cfg, "get") else None
    return OmegaConf.create(group) if isinstance(group, dict) else group


def check_diagnostics(cfg: Any) -> None:
    """Refuse unknown ``diagnostics`` keys and bad values, before any training step.

    Raises:
        DiagnosticsConfigError: naming the key and its allowed values.
    """
    group = _group(cfg)
    if group is None:
        return
    if not OmegaConf.is_dict(group):
        raise DiagnosticsConfigError(
            f"diagnostics must be a group of keys ({', '.join(DIAGNOSTICS_KEYS)}), got {group!r}"
        )
    for key in group:
        if key not in DIAGNOSTICS_KEYS:
            allowed = "; ".join(f"{k}: {v}" for k, v in DIAGNOSTICS_KEYS.items())
            raise DiagnosticsConfigError(
                f"diagnostics.{key} is not a diagnostics key; allowed keys: {allowed}"
            )
        value = group[key]
        if value is None:
            continue
        bad = (key == "record" and not isinstance(value, str)) or (
            key not in ("record", "finite_check_every") and not isinstance(value, bool)
        )
        if bad:
            raise DiagnosticsConfigError(
                f"diagnostics.{key} must be {DIAGNOSTICS_KEYS[key]}, got {value!r} of type "
                f"{type(value).__name__}"
            )
    every = group.get("finite_check_every")
    if every is not None:
        check_int_at_least("diagnostics.finite_check_every", every, 1, DiagnosticsConfigError)


def diagnostic_callbacks(cfg: Any) -> List[Any]:
    """The callbacks the config's ``diagnostics:`` group switches on (checked first)."""
    check_diagnostics(cfg)
    group = _group(cfg)
    if group is None:
        return []
    on = {key: group.get(key) for key in DIAGNOSTICS_KEYS}
    callbacks: List[Any] = []
    if on["representation_health"]:
        from attnce_plugin.callbacks.health import RepresentationHealth

        callbacks.append(RepresentationHealth())
    if on["finite_loss_guard"]:
        from attnce_plugin.callbacks.guard import FiniteLossGuard, describe_settings

        every = on["finite_check_every"] or DEFAULT_FINITE_CHECK_EVERY
        method = str(cfg.get("method", "the method"))
        callbacks.append(FiniteLossGuard(method, every, lambda: describe_settings(cfg)))
    if on["name_unreadable_images"]:
        from attnce_plugin.callbacks.images import NameUnreadableImages

        callbacks.append(NameUnreadableImages())
    if on["record"]:
        from attnce_plugin.callbacks.recorder import RunRecorder

        callbacks.append(RunRecorder(on["record"]))
    return callbacks
