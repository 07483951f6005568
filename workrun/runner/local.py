"""The local :class:`~workrun.runner.base.AppRunner`: uv environments and real process groups on this machine."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workrun.core.rows import OperationRow
from workrun.outbound.http import PreparedRequest, SendResult, allow_from_env, parse_allow, send
from workrun.runner import calldir
from workrun.runner.base import Collected, Outcome, Started
from workrun.runner.env import EnvManager, app_environment, sdk_bytecode, sdk_path
from workrun.runner.forkserver import ForkServers, RequestTooLarge
from workrun.runner.process import Watchdog, alive, kill_group, proc_start_time, spawn_app_process, wait, wait_exit

__all__ = ["LocalRunner"]


class LocalRunner:
    """Runs App code locally (see :class:`workrun.runner.base.AppRunner` for the contract).

    Args:
        data_dir: Workrun's data directory (environment markers, the SDK copy).
        grace: seconds between SIGTERM and SIGKILL when a process group is ended.
        launch: ``"fork"`` (calls start from a per-environment fork server, R-P1) or ``"spawn"``.
    """

    decides_by_claim = False  # a live owner's call is left to it (AppRunner.decides_by_claim)
    request_environ = None  # ``{{ env.NAME }}`` is read here, when a request is prepared (R-H5)

    def __init__(self, data_dir: Path, grace: float = 5.0, launch: str = "spawn") -> None:
        self.data_dir = data_dir
        self.grace = grace
        self.launch = launch
        self._servers: ForkServers | None = None
        self.envs = EnvManager(data_dir)
        self._watchdog: Watchdog | None = None
        self._sdk: Path | None = None
        self._mutex = threading.Lock()
        self._stopped = threading.Event()  # stop_all() was called: a call being recovered is ended too

    @property
    def watchdog(self) -> Watchdog:
        """The process watchdog, started on first use."""
        with self._mutex:
            if self._watchdog is None:
                self._watchdog = Watchdog(grace=self.grace)
            return self._watchdog

    @property
    def sdk_dir(self) -> Path:
        """Directory with this runner's ``workrun_sdk`` for App ``PYTHONPATH``."""
        if self._sdk is None:
            self._sdk = sdk_path(self.data_dir)
        return self._sdk

    def prepare(self, project: Path, *, offline: bool = False) -> str:
        """Return the project environment's python, syncing it first if needed (R-A8)."""
        return self.envs.python(project, offline=offline)

    def start(self, python: str, project: Path, entry: Path, call_dir: Path, envelope: dict[str, Any], *,
              warm: str | None = None) -> Started:
        """Write ``input.json`` and start the call's supervisor in its own group: forked by the environment's
        fork server (``launch="fork"``) or ``python <sdk>/workrun_sdk/_launch.py ENTRY`` (``"spawn"``)."""
        calldir.write_input(call_dir, {"grace": self.grace, **envelope})
        sdk = self.sdk_dir
        sdk_bytecode(python, sdk)
        env = app_environment(python, sdk, call_dir)
        if envelope.get("traceparent"):  # the call's span, for the App's own tracing (R-F5)
            env = {**env, "TRACEPARENT": str(envelope["traceparent"])}
        if self.launch == "fork":
            with self._mutex:
                if self._servers is None:
                    self._servers = ForkServers()
            try:
                forked = self._servers.start(python, sdk, project, entry, call_dir, env,
                                             (str(entry), warm) if warm else None,
                                             tools=envelope.get("kind") == "tool")
                return Started(pid=forked.pid, proc_start=forked.start, handle=(forked, call_dir))
            except RequestTooLarge:  # an environment of over REQUEST_MAX bytes: this call is spawned
                pass
        argv = [python, str(sdk / "workrun_sdk" / "_launch.py"), str(entry)]
        proc = spawn_app_process(argv, project, env, call_dir / "stdout", call_dir / "stderr")
        return Started(pid=proc.pid, proc_start=proc_start_time(proc.pid), handle=(proc, call_dir))

    def wait(self, started: Started, deadline: float, *, running: Callable[[], None] | None = None) -> Outcome:
        """Wait for the supervisor; the watchdog ends its group at ``deadline`` or on stop; ``running`` as
        :meth:`workrun.runner.base.AppRunner.wait` (a spawned call's at once)."""
        proc, call_dir = started.handle
        return wait(proc, self.watchdog, deadline, call_dir, running=running)

    def _claimed(self, call_dir: Path, claim_wait: float) -> calldir.Claim:
        """The call's claim after waiting up to ``claim_wait`` s for the launcher; fenced (abandoned) if none."""
        end = time.monotonic() + claim_wait
        claim = calldir.read_claim(call_dir)
        while claim is None and time.monotonic() < end:
            time.sleep(0.05)
            claim = calldir.read_claim(call_dir)
        if claim is None and call_dir.is_dir() and calldir.fence(call_dir):
            return calldir.Claim(started=False)
        return claim or calldir.read_claim(call_dir) or calldir.Claim(started=False)

    def send_request(self, call_id: str, request: PreparedRequest, allow: list[str], mark: dict[str, Any], *,
                     before_send: Callable[[], None]) -> SendResult:
        """Send the request from this process through the outbound guard (see
        :meth:`~workrun.runner.base.AppRunner.send_request`); ``mark`` is for a shared journal's executor."""
        del call_id, mark
        return send(request, parse_allow(list(allow)) + allow_from_env(), before_send=before_send)

    def settle_request(self, call_id: str, status: str) -> SendResult:
        """A request left ``starting`` was never sent (the guard had not let it out); one left ``running`` may have
        been: ``unknown``, never re-sent blindly (R-H2, R-R3)."""
        del call_id
        return SendResult.left_in_flight(status)

    def recover(self, pid: int | None, proc_start: str | None, call_dir: Path, deadline: float | None, *,
                claim_wait: float = 2.0) -> Outcome:
        """Decide the outcome of a process left behind by a runner that died (R-R3, SPEC §10).

        A live process is waited for until it exits or its deadline passes (then its group
        is ended: a timeout) or the run is stopped (:meth:`stop_all`: its group is ended, as by
        :meth:`end`, R-C9). Gone without an exit record: unknown. A call whose launcher
        never claimed its directory is fenced here and reported ``not_started``. Without ``pid`` (a call
        never journaled running) the claim names the supervisor (pid and start time: a reused pid is not it)
        and an exit record marked ``ended`` decides at once; the Outcome's ``process`` then holds what the
        claim says, to be journaled with it. The Outcome is never ``ended``: a restarted runner cannot tell
        whether the supervisor or its App wrote that file, so the call's files are not reused.
        """
        outcome = self._recover(pid, proc_start, call_dir, deadline, claim_wait)
        outcome.ended = False
        return outcome

    def _recover(self, pid: int | None, proc_start: str | None, call_dir: Path, deadline: float | None,
                 claim_wait: float) -> Outcome:
        if pid is None:  # never journaled running (it ended within RUNNING_AFTER, or the runner died first)
            if not call_dir.is_dir():
                return Outcome(not_started=True)
            claim = self._claimed(call_dir, claim_wait)
            if not claim.started:
                return Outcome(not_started=True)
            found: OperationRow | None = (
                {"pid": claim.pid, "proc_start": claim.start, "started_at": claim.at} if claim.pid else None)
            record = calldir.read_exit(call_dir)
            if record is not None and record.ended:  # its supervisor is done: whatever has that pid now is not it
                record.process = found
                return record
            if claim.pid is None:
                return record or Outcome(unknown=True)
            outcome = self._recover_live(claim.pid, claim.start, call_dir, deadline)
            outcome.process = found
            return outcome
        return self._recover_live(pid, proc_start, call_dir, deadline)

    def _recover_live(self, pid: int, proc_start: str | None, call_dir: Path, deadline: float | None) -> Outcome:
        """Wait for the left-behind supervisor ``pid`` (bounded by ``deadline``, ended on stop), then its record."""
        while alive(pid, proc_start):
            if self._stopped.is_set():
                return self.end(pid, proc_start, call_dir, deadline)
            if deadline is not None and time.time() >= deadline:
                kill_group(pid, self.grace)
                # its supervisor recorded how the App ended (SIGKILL after the grace when it ignored SIGTERM:
                # conformance review, it was said SIGTERM whatever happened); without a record, our SIGTERM
                record = calldir.read_exit(call_dir)
                if record is None:
                    return Outcome(timed_out=True, signal=signal.SIGTERM)
                record.timed_out = True
                return record
            wait_exit(pid, 0.2 if deadline is None else min(0.2, deadline - time.time()))
        return calldir.read_exit(call_dir) or Outcome(unknown=True)

    def end(self, pid: int | None, proc_start: str | None, call_dir: Path, deadline: float | None) -> Outcome:
        """End a left-behind call now (``workrun stop`` of an orphaned run, R-C9)."""
        if pid is None:
            claim = self._claimed(call_dir, 0.5) if call_dir.is_dir() else calldir.Claim(started=False)
            if not claim.started:
                return Outcome(not_started=True)
            if claim.pid is None:
                return calldir.read_exit(call_dir) or Outcome(unknown=True)
            pid, proc_start = claim.pid, claim.start
        was_alive = alive(pid, proc_start)
        if was_alive:
            kill_group(pid, self.grace)
        record = calldir.read_exit(call_dir)
        if was_alive:
            return Outcome(stopped=True, exit_code=record.exit_code if record else None,
                           signal=record.signal if record else None)
        return record or Outcome(unknown=True)

    def fence(self, call_dir: Path) -> None:
        """Claim the call directory as abandoned."""
        calldir.fence(call_dir)

    def collect(self, call_dir: Path) -> Collected:
        """Read what a finished call left (never raises)."""
        return calldir.collect(call_dir)

    def stop_all(self) -> None:
        """End every watched process group now and any started later, and a left-behind call that
        :meth:`recover` waits for (R-C9)."""
        self._stopped.set()
        self.watchdog.stop_all()

    def hang_up(self) -> None:
        """No more calls: tell the fork servers to end now; :meth:`close` reaps them (calls in flight go on)."""
        with self._mutex:
            servers = self._servers
        if servers is not None:
            servers.hang_up()

    def close(self) -> None:
        """End the fork servers (each exits when its request pipe closes); calls in flight go on."""
        with self._mutex:
            servers, self._servers = self._servers, None
        if servers is not None:
            servers.close()
