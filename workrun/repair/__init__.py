"""What operators do when compensation could not: tickets and their actions (``tickets.py``) and the
compensation actions retry, resolve and skip (``operator.py``)."""
