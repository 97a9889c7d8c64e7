"""Opt-in Lightning callbacks of the plugin's methods, one module each, switched on by the keys of
the top-level config group ``diagnostics:``.

The methods' ``configure_callbacks()`` returns :func:`diagnostic_callbacks` of their config. A
config without the group gets none; the shipped configs set it (see the table in
docs/reliability.md). Keys:

* ``record``: a file path (absent, null or "" = off): :class:`attnce_plugin.callbacks.recorder.
  RunRecorder`, the run's timing and metrics as JSON lines.
"""

from __future__ import annotations

from typing import Any, List

from omegaconf import OmegaConf

#: The keys of ``diagnostics:`` and their allowed values, for messages.
DIAGNOSTICS_KEYS = {"record": "a file path, or null / '' for off"}


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
    if not OmegaConf.is_dict(group) and not isinstance(group, dict):
        raise DiagnosticsConfigError(
            f"diagnostics must be a group of keys ({', '.join(DIAGNOSTICS_KEYS)}), got {group!r}"
        )
    for key in group:
        if key not in DIAGNOSTICS_KEYS:
            allowed = "; ".join(f"{k}: {v}" for k, v in DIAGNOSTICS_KEYS.items())
            raise DiagnosticsConfigError(
                f"diagnostics.{key} is not a diagnostics key; allowed keys: {allowed}"
            )
    record = group.get("record")
    if record is not None and not isinstance(record, str):
        raise DiagnosticsConfigError(
            f"diagnostics.record must be {DIAGNOSTICS_KEYS['record']}, got {record!r} of type "
            f"{type(record).__name__}"
        )


def diagnostic_callbacks(cfg: Any) -> List[Any]:
    """The callbacks the config's ``diagnostics:`` group switches on (checked first)."""
    check_diagnostics(cfg)
    callbacks: List[Any] = []
    group = _group(cfg)
    record = None if group is None else group.get("record")
    if record:
        from attnce_plugin.callbacks.recorder import RunRecorder

        callbacks.append(RunRecorder(record))
    return callbacks
