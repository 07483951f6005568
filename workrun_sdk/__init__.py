"""What App code imports inside its own process: ``process``, ``compensation``, ``tool``.

Standard library only, so it works in any App environment; it never imports
``workrun``. The runner puts a copy of this package on ``PYTHONPATH`` of every
App process it starts, so App projects need not declare it as a dependency.
"""

from workrun_sdk import compensation, process, tool
from workrun_sdk.errors import NotInAppError, SDKError

__all__ = ["NotInAppError", "SDKError", "compensation", "process", "tool", "__version__"]
__version__ = "0.1.0"
