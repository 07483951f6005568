"""``workrun check``: every check ``run`` makes, creating nothing (R-L1), without the journal, the runner or the
engine (SPEC §24: ``check`` is quick)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workrun.app.results import Finished, _inputs

__all__ = ["check"]


def check(workflow: Path | str, inputs: Mapping[str, Any] | list[str] | None = None) -> Finished:
    """Every check ``run`` makes before anything runs, creating nothing (R-L1): no journal, no data directory
    (an existing one is checked as ``run`` checks it).

    Returns:
        :class:`Finished`: ``{"ok": true, "nodes": N, "compensable": M}`` (M: nodes whose calls would have a
        compensation: a script, a reverse action, or an App's ``compensation``), 0; ``note`` is the text
        line ``ok: N nodes, M compensable``.

    Raises:
        ConfigError: every error found (exit 2; :class:`~workrun.core.errors.ConfigErrors` when several).
    """
    from workrun.config.workflow import compensable_nodes, load_workflow
    from workrun.core.errors import ConfigError, ConfigErrors
    from workrun.core.paths import check_data_dir
    from workrun.nodes import default_checkers

    try:  # the WORKRUN_* settings and the data directory `run` would use (a group-writable one is refused)
        check_data_dir()
        home_error = None
    except ConfigError as exc:
        home_error = exc
    try:
        spec, _ = load_workflow(Path(workflow), _inputs(inputs), default_checkers())
    except ConfigError as exc:
        if home_error is None:
            raise
        # the setting's error first, as `run` says it (a bad WORKRUN_HTTP_ALLOW is the workflow's error too: once)
        found = [e for e in (exc.errors if isinstance(exc, ConfigErrors) else [exc])
                 if (e.file, e.field) != (home_error.file, home_error.field)]
        raise ConfigErrors.of([home_error, *found]) from None
    if home_error is not None:
        raise home_error
    count = len(compensable_nodes(spec.nodes))
    return Finished({"ok": True, "nodes": len(spec.nodes), "compensable": count}, 0,
                    f"ok: {len(spec.nodes)} nodes, {count} compensable")
