"""Running App code: the :class:`AppRunner` contract (``base.py``) and its local implementation.

``env.py`` (uv environments, clean environment), ``process.py`` (spawn, process
groups, the watchdog), ``calldir.py`` (the call-directory file protocol),
``local.py`` (:class:`LocalRunner`, composing them).
"""

from workrun.runner.base import AppRunner, Collected, Outcome, Started
from workrun.runner.local import LocalRunner

__all__ = ["AppRunner", "Collected", "LocalRunner", "Outcome", "Started"]
