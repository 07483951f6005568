"""Launcher the runner starts instead of the bare entry script (``WORKRUN_LAUNCH=spawn``, non-Linux).

``python <sdk>/workrun_sdk/_launch.py ENTRY [ARGS...]``, started in its own
session with the call's cwd, environment, stdin and stdout/stderr files, runs
:func:`workrun_sdk._supervise.supervise` — the same supervisor the fork server
forks for each call (claim, subreaper, the App in a child, exit record, every
descendant ended). Run as a script, not with ``-m``, which would import runpy
(~9 ms on every call).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    if sys.path and os.path.basename(sys.path[0]) == "workrun_sdk":
        del sys.path[0]  # run as a script: its own folder must not shadow anything
    from workrun_sdk import _supervise

    _supervise.supervise(os.path.realpath(sys.argv[1]), sys.argv[2:])
