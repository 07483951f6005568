"""Many workers on one PostgreSQL journal: the worker loop (``workers.py``: claims, leases, fencing,
takeover) and the queued transport (``dispatch.py``: App calls and requests handed to executors)."""
