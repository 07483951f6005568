"""What App code imports inside its own process: ``process``, ``compensation``, ``tool``.

Standard library only, so it works in any App environment; it never imports
``workrun``. The runner puts a copy of this package on ``PYTHONPATH`` of every
App process it starts, so App projects need not declare it as a dependency.
"""

# Submodules load on first use (``from workrun_sdk import process`` imports only that one):
# App start-up time is paid on every call.
from types import ModuleType

from workrun_sdk.errors import NotInAppError, SDKError


def __getattr__(name: str) -> ModuleType:  # PEP 562: workrun_sdk.process etc. without importing all eagerly
    if name in ("compensation", "process", "tool"):
        import sys

        __import__(f"workrun_sdk.{name}")  # not importlib: ~1 ms of every spawned call's start-up
        return sys.modules[f"workrun_sdk.{name}"]
    raise AttributeError(f"module 'workrun_sdk' has no attribute {name!r}")

__all__ = ["NotInAppError", "SDKError", "compensation", "process", "tool", "__version__"]
__version__ = "0.1.0"
