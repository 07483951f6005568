"""Running a workflow: ``scheduler.py`` (pure: which nodes may start, what ended ones mean), ``driver.py``
(:class:`~workrun.engine.driver.Engine`: node threads, the failure policies, the journal) and
``recovery.py`` (driving a run from the journal to its end: settling what a crash left, then compensation)."""
