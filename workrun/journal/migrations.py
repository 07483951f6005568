"""Journal schema migrations: an append-only list whose position is the version (R-J3).

Never edit a released step; append a new one. ``PRAGMA user_version`` (SQLite) or
``workrun_schema.version`` (PostgreSQL) holds the number of steps applied. A journal
newer than this list is refused. The steps are written in SQLite's dialect and kept
to what :func:`workrun.journal.postgres.to_postgres` translates (REAL, BLOB,
AUTOINCREMENT), so both backends share one list and one version number (R-S1).
"""

from __future__ import annotations

__all__ = ["MIGRATIONS"]

MIGRATIONS: list[str] = [
    # 1: runs, nodes, messages, operations, compensations, attempts, events
    """
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        workflow TEXT NOT NULL,
        workflow_path TEXT NOT NULL,
        spec TEXT NOT NULL,
        inputs TEXT NOT NULL,
        status TEXT NOT NULL,
        eval INTEGER NOT NULL DEFAULT 0,
        rerun_of TEXT,
        reason TEXT,
        stop_requested INTEGER NOT NULL DEFAULT 0,
        compensate_requested INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        ended_at REAL
    );
    CREATE TABLE nodes (
        run_id TEXT NOT NULL REFERENCES runs(run_id),
        node_key TEXT NOT NULL,
        position INTEGER NOT NULL,
        status TEXT NOT NULL,
        handled INTEGER NOT NULL DEFAULT 0,
        result TEXT,
        started_at REAL,
        ended_at REAL,
        PRIMARY KEY (run_id, node_key)
    );
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        node_key TEXT,
        at REAL NOT NULL,
        level TEXT NOT NULL,
        text TEXT NOT NULL
    );
    CREATE INDEX messages_run ON messages(run_id, id);
    CREATE TABLE operations (
        operation_id TEXT PRIMARY KEY,
        run_id TEXT,
        node_key TEXT,
        tool_call_index INTEGER,
        app TEXT NOT NULL,
        project TEXT NOT NULL,
        kind TEXT NOT NULL,
        tool_name TEXT,
        config TEXT NOT NULL,
        input TEXT NOT NULL,
        result TEXT,
        resources TEXT NOT NULL DEFAULT '[]',
        fingerprint TEXT NOT NULL,
        fingerprint_files TEXT NOT NULL,
        snapshot TEXT,
        depends_on TEXT NOT NULL DEFAULT '[]',
        status TEXT NOT NULL,
        error TEXT,
        call_dir TEXT NOT NULL,
        pid INTEGER,
        proc_start TEXT,
        deadline REAL,
        created_at REAL NOT NULL,
        started_at REAL,
        ended_at REAL,
        exit_code INTEGER,
        signal INTEGER,
        stdout_tail TEXT,
        stderr_tail TEXT,
        standalone INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX operations_run ON operations(run_id, created_at);
    CREATE INDEX operations_status ON operations(status);
    CREATE TABLE compensations (
        compensation_id TEXT PRIMARY KEY,
        operation_id TEXT NOT NULL UNIQUE REFERENCES operations(operation_id),
        run_id TEXT NOT NULL,
        node_key TEXT,
        status TEXT NOT NULL,
        reason TEXT,
        result TEXT,
        context TEXT,
        max_attempts INTEGER NOT NULL,
        timeout REAL NOT NULL,
        backoff REAL NOT NULL,
        idempotent INTEGER NOT NULL DEFAULT 0,
        accept_code_change INTEGER NOT NULL DEFAULT 0,
        held_back_by TEXT,
        next_attempt_at REAL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE INDEX compensations_run ON compensations(run_id);
    CREATE INDEX compensations_status ON compensations(status);
    CREATE TABLE attempts (
        compensation_id TEXT NOT NULL REFERENCES compensations(compensation_id),
        number INTEGER NOT NULL,
        trigger TEXT NOT NULL,
        status TEXT NOT NULL,
        call_dir TEXT NOT NULL,
        pid INTEGER,
        proc_start TEXT,
        deadline REAL,
        started_at REAL NOT NULL,
        ended_at REAL,
        exit_code INTEGER,
        signal INTEGER,
        stdout_tail TEXT,
        stderr_tail TEXT,
        result TEXT,
        error TEXT,
        PRIMARY KEY (compensation_id, number)
    );
    CREATE INDEX attempts_status ON attempts(status);
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        compensation_id TEXT,
        run_id TEXT,
        at REAL NOT NULL,
        actor TEXT NOT NULL,
        action TEXT NOT NULL,
        args TEXT NOT NULL DEFAULT '{}',
        text TEXT,
        attachment TEXT
    );
    CREATE INDEX events_compensation ON events(compensation_id, id);
    """,
    # 2: remote A2A tasks and their single best-effort cancel (R-C10)
    """
    CREATE TABLE remote_tasks (
        run_id TEXT NOT NULL,
        node_key TEXT NOT NULL,
        url TEXT NOT NULL,
        task_id TEXT,
        context_id TEXT,
        state TEXT,
        cancel_status TEXT,
        cancel_answer TEXT,
        cancel_at REAL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (run_id, node_key)
    );
    """,
    # 3: the kind of a failure, as data (workrun.core.outcomes.Failure); rows written before it get theirs from the
    # messages those versions wrote (a one-time backfill: nothing reads messages to decide anything afterwards)
    """
    ALTER TABLE operations ADD COLUMN failure TEXT;
    ALTER TABLE attempts ADD COLUMN failure TEXT;
    UPDATE operations SET failure = CASE
        WHEN error LIKE 'not started%' THEN 'not_started'
        WHEN error LIKE 'code snapshot%' THEN 'refused'
        WHEN error LIKE 'environment unavailable%' OR error LIKE 'uv is not installed%' OR error LIKE 'cannot start%'
            THEN 'environment_unavailable'
        WHEN error LIKE 'stopped by the user%' THEN 'stopped'
        WHEN error LIKE 'timed out%' THEN 'timed_out'
        WHEN error LIKE 'killed by signal%' THEN 'signalled'
        WHEN error LIKE 'exited with code%' THEN 'exited'
        WHEN status = 'unknown' THEN 'unknown'
        ELSE 'contract' END
    WHERE status IN ('failed', 'unknown');
    UPDATE attempts SET failure = CASE status
        WHEN 'not_started' THEN 'not_started' WHEN 'stopped' THEN 'stopped' WHEN 'unknown' THEN 'unknown'
        ELSE CASE WHEN error LIKE 'timed out%' THEN 'timed_out' WHEN error LIKE 'killed by signal%' THEN 'signalled'
                  WHEN error LIKE 'exited with code%' THEN 'exited' ELSE 'contract' END END
    WHERE status IN ('failed', 'not_started', 'stopped', 'unknown');
    """,
    # 4: the process that owns an in-flight call (pid and start time): recovery settles only calls whose owner
    # is gone, so two standalone calls, or `resume` during `app run`, never settle each other's live calls
    """
    ALTER TABLE operations ADD COLUMN owner_pid INTEGER;
    ALTER TABLE operations ADD COLUMN owner_start TEXT;
    """,
    # 5: HTTP reverse actions record the answer's status and the first 2 KiB of its body per attempt (R-H7)
    """
    ALTER TABLE attempts ADD COLUMN http_status INTEGER;
    ALTER TABLE attempts ADD COLUMN response_tail TEXT;
    """,
    # 6: manual repair (SPEC §12): tickets, their action job and attempts, audit events, notifications
    """
    CREATE TABLE tickets (
        ticket_id TEXT PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs(run_id),
        node_key TEXT NOT NULL,
        policy TEXT NOT NULL,
        status TEXT NOT NULL,
        error TEXT,
        result TEXT,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE INDEX tickets_run ON tickets(run_id);
    CREATE INDEX tickets_status ON tickets(status);
    CREATE TABLE ticket_actions (
        ticket_id TEXT PRIMARY KEY REFERENCES tickets(ticket_id),
        run_id TEXT NOT NULL,
        status TEXT NOT NULL,
        request TEXT NOT NULL,
        result TEXT,
        reason TEXT,
        max_attempts INTEGER NOT NULL,
        timeout REAL NOT NULL,
        backoff REAL NOT NULL,
        idempotent INTEGER NOT NULL DEFAULT 0,
        next_attempt_at REAL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE INDEX ticket_actions_status ON ticket_actions(status);
    CREATE TABLE ticket_attempts (
        ticket_id TEXT NOT NULL REFERENCES tickets(ticket_id),
        number INTEGER NOT NULL,
        trigger TEXT NOT NULL,
        status TEXT NOT NULL,
        started_at REAL NOT NULL,
        ended_at REAL,
        http_status INTEGER,
        response_tail TEXT,
        failure TEXT,
        error TEXT,
        PRIMARY KEY (ticket_id, number)
    );
    CREATE TABLE ticket_events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        ticket_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        at REAL NOT NULL,
        actor TEXT NOT NULL,
        action TEXT NOT NULL,
        args TEXT NOT NULL DEFAULT '{}',
        text TEXT,
        attachment TEXT
    );
    CREATE INDEX ticket_events_ticket ON ticket_events(ticket_id, id);
    CREATE TABLE notifications (
        notification_id TEXT PRIMARY KEY,
        subject TEXT NOT NULL UNIQUE,
        run_id TEXT NOT NULL,
        ticket_id TEXT,
        compensation_id TEXT,
        message TEXT NOT NULL,
        request TEXT NOT NULL,
        status TEXT NOT NULL,
        http_status INTEGER,
        error TEXT,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE INDEX notifications_status ON notifications(status);
    """,
    # 7: workers sharing a PostgreSQL journal (R-S2) and code snapshots kept in the database (R-S4)
    """
    CREATE TABLE workers (
        worker_id TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        lease REAL NOT NULL,
        started_at REAL NOT NULL,
        heartbeat_at REAL NOT NULL,
        stopped_at REAL
    );
    CREATE TABLE run_claims (
        run_id TEXT PRIMARY KEY REFERENCES runs(run_id),
        worker_id TEXT NOT NULL,
        lease_until REAL NOT NULL,
        claimed_at REAL NOT NULL,
        takeovers INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX run_claims_worker ON run_claims(worker_id);
    CREATE TABLE snapshots (
        snapshot TEXT PRIMARY KEY,
        manifest TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE TABLE snapshot_objects (
        digest TEXT PRIMARY KEY,
        data BLOB NOT NULL
    );
    """,
    # 8: claims of single App processes (R-S2): a run's scheduler dispatches each node call and compensation
    # attempt it decides to start; any worker's executor claims one (SKIP LOCKED) and stores its outcome.
    # call_id is the scheduler's call directory name (an operation id, or ``<compensation id>-<attempt>``).
    # status: queued -> claimed -> done, or queued -> fenced (it can never start); claimed -> queued again only
    # when its executor's lease passed and its process provably never started. ``timeout`` is set once the
    # scheduler knows the deadline (executors claim only rows that have one). Used on PostgreSQL only.
    """
    CREATE TABLE dispatched_calls (
        call_id TEXT PRIMARY KEY,
        run_id TEXT,
        status TEXT NOT NULL,
        call TEXT NOT NULL,
        timeout REAL,
        queued_at REAL NOT NULL,
        claims INTEGER NOT NULL DEFAULT 0,
        worker_id TEXT,
        host TEXT,
        lease_until REAL,
        claimed_at REAL,
        exec_dir TEXT,
        pid INTEGER,
        proc_start TEXT,
        deadline REAL,
        stop_requested INTEGER NOT NULL DEFAULT 0,
        outcome TEXT,
        collected TEXT,
        decided_by TEXT,
        done_at REAL
    );
    CREATE INDEX dispatched_calls_queue ON dispatched_calls(status, queued_at);
    CREATE INDEX dispatched_calls_worker ON dispatched_calls(worker_id, status);
    """,
    # 9: one node's operations without reading all of its run's (each node of a run looks up its dependencies'
    # calls: O(1) per node, not O(nodes), issue 14)
    """
    CREATE INDEX operations_node ON operations(run_id, node_key, created_at);
    """,
    # 10: verify runs (R-V1): real runs with a failure injected, left out of `runs list` unless --all
    """
    ALTER TABLE runs ADD COLUMN verify INTEGER NOT NULL DEFAULT 0;
    """,
    # 11: email actions (R-K2): the SMTP reply code of an attempt, as http_status is an HTTP one's
    """
    ALTER TABLE attempts ADD COLUMN smtp_code INTEGER;
    ALTER TABLE ticket_attempts ADD COLUMN smtp_code INTEGER;
    """,
    # 12: run data (R-K4): a JSON object that starts as the run's inputs; update_data actions write it
    """
    ALTER TABLE runs ADD COLUMN data TEXT;
    """,
    # 13: fencing (R-F2): each claim of a run has an epoch one above the last; a scheduler's writes for the run
    # are conditional on it
    """
    ALTER TABLE run_claims ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
    """,
    # 14: runs by status (issue 33): every scheduling command looks for unfinished runs and for failed ones with
    # compensation owed; without it each look read every run's row, workflow snapshot included (~15 ms at 4,000
    # runs, growing with the journal)
    """
    CREATE INDEX runs_status ON runs(status);
    """,
]
