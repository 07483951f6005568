"""Talking to the outside world: HTTP requests (``http.py``: allow lists, templates, redaction,
sending once) and e-mail (``mail.py``: SMTP). Used by the runner and the effects; imports only ``core``."""
