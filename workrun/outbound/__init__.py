"""Talking to the outside world: HTTP requests (``http.py``: allow lists, templates, redaction,
sending once) and e-mail (``mail.py``: SMTP, which uses the HTTP module's guard). Imports only ``core``."""
