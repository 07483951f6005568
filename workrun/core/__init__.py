"""Foundations every layer may use: errors, settings, paths, the workflow models, outcomes and the
state machine, templates, redaction, metrics, logs and traces, fault points, the data-directory lock.
Nothing here imports another Workrun package (docs/design/development.md, the house)."""
