"""Use cases: what a person asks Workrun to do, outside any surface (issue 27, SPEC §22 R-V2).

Each use case is a function that returns a typed result (:class:`~workrun.app.runs.Finished`: the
JSON the CLI's ``--json`` prints, and the exit code the CLI exits with) and raises
:class:`~workrun.core.errors.WorkrunError` for what the CLI reports as one error line. The CLI
(``workrun.cli``), the dashboard (``workrun.ui``) and the Python API (``workrun.api``) are thin
adapters over them: they print, render or return what a use case returned, and never decide
an outcome by reading a message.

- :mod:`workrun.app.session`: the data directory, the scheduler lock or a run's claim, signals.
- :mod:`workrun.app.runs`: run, rerun, resume, compensate (also as a dry run), stop, runs, show, check.
"""
