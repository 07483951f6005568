"""Running App code: the :class:`AppRunner` contract (``base.py``) and its local implementation.

``env.py`` (uv environments, clean environment), ``process.py`` (spawn, process
groups, the watchdog), ``calldir.py`` (the call-directory file protocol),
``local.py`` (:class:`~workrun.runner.local.LocalRunner`, composing them). Each is imported from its own module
(the contract from ``workrun.runner.base``), so that reading an App's config (``apps.py``) loads nothing else
(SPEC §24: ``check`` is quick).
"""

__all__: list[str] = []
