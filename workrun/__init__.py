"""Workrun: a local workflow runner that compensates App calls when a run finally fails.

The public surface is small; ``tests/test_house.py`` pins ``__all__`` against what the package exposes.
"""

from workrun.core.errors import ConfigError, WorkrunError

__all__ = ["ConfigError", "WorkrunError", "__version__"]
__version__ = "0.1.0"
