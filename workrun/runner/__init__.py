"""Running App code: the :class:`AppRunner` contract (``base.py``) and its local implementation.

``env.py`` (uv environments, clean environment), ``process.py`` (spawn, process
groups, the watchdog), ``calldir.py`` (the call-directory file protocol),
``local.py`` (:class:`~workrun.runner.local.LocalRunner`, composing them; imported from there, so that reading
an App's config never loads processes and fork servers).
"""

from workrun.runner.base import AppRunner, Collected, Outcome, Started

__all__ = ["AppRunner", "Collected", "Outcome", "Started"]
