"""Running a workflow: ``driver.py`` (:class:`~workrun.engine.driver.driver.Engine`: the ready set, node
threads, the failure policies) and ``recovery.py`` (driving a run from the journal to its end:
settling what a crash left, then compensation)."""
