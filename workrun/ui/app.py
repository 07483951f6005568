"""The dashboard's routes (SPEC §13): server-rendered pages, ``/api/…`` JSON and POST actions.

Pages: Runs, Run, Compensations, Tickets, Apps (R-U2). Each page's changing part is re-fetched as
an HTML fragment (``?fragment=1``) by ``static/app.js`` every 0.5 s, so a journal commit shows
within 1 s without a reload (R-U3). ``/api/…`` answers with the functions of :mod:`workrun.app.views`
that the CLI prints with ``--json`` (R-U7). Actions run the CLI's own commands (see
:mod:`workrun.ui.actions`, R-U4). :class:`workrun.ui.security.Guard` wraps everything (R-U5).

Reads use the journal's own short queries on a WAL database: a reader never blocks the scheduler
and the scheduler never blocks a reader (R-U8).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import secrets
import threading
import time
import weakref
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from workrun.app import views
from workrun.core.errors import NotFoundError, WorkrunError
from workrun.repair.policy import open_ticket
from workrun.runner.services import Services
from workrun.ui import graph
from workrun.ui.actions import ActionResult, run_action
from workrun.ui.security import Guard, csrf_token

__all__ = ["PAGE_SIZE", "create_app"]

PAGE_SIZE = 50
RUN_STATUSES = ("running", "waiting", "succeeded", "failed", "stopped", "terminated")
APP_KINDS = ("process", "tool")  # the kinds of an App (SPEC §9): what the Apps page lists
QUEUE_ORDER = {"failed": 0, "blocked": 1, "unknown": 2, "pending": 3, "running": 4, "succeeded": 5, "skipped": 6,
               "resolved": 5, "terminated": 6}
_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-]{0,99}$")  # never a leading "-": an id is passed to the CLI as is
ACTION_THREADS = 8
"""Actions (each a command in a process of its own, which may wait up to a minute for a busy scheduler) run on at
most this many threads of their own; the pages' reads keep the server's (R-U8: a scheduler never blocks reading;
dashboard review: 45 waiting actions held every thread, and a page took 26 s)."""
_ACTION_LIMITS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()  # per event loop


async def _act(d: Dashboard, args: list[str], *, scheduling: bool, **kwargs: Any) -> ActionResult:
    """:func:`~workrun.ui.actions.run_action` of ``args`` in a thread: a scheduling command (one that may wait for a
    busy scheduler) on one of the :data:`ACTION_THREADS` threads of such actions, any other (a stop, a note, a
    resolve, a confirm) on the server's own pool, as a page's reads are, never queued behind them (diff review)."""
    import asyncio
    import functools

    import anyio.to_thread

    call = functools.partial(run_action, d.data_dir, args, scheduling=scheduling, **kwargs)
    if not scheduling:
        return await anyio.to_thread.run_sync(call)
    loop = asyncio.get_running_loop()
    limiter = _ACTION_LIMITS.get(loop)
    if limiter is None:
        limiter = _ACTION_LIMITS[loop] = anyio.CapacityLimiter(ACTION_THREADS)
    return await anyio.to_thread.run_sync(call, limiter=limiter)


def _parse_iso(value: str | None) -> float | None:
    return datetime.fromisoformat(value).timestamp() if value else None


def duration(started: str | None, ended: str | None) -> str:
    """``"1.2 s"``, ``"3 min 4 s"``, ``"2 h 5 min"`` between two ISO times (until now when not ended)."""
    a = _parse_iso(started)
    if a is None:
        return "-"
    b = _parse_iso(ended) or time.time()
    s = max(0.0, b - a)
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60)} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


def short_time(value: str | None) -> str:
    """An ISO time as ``YYYY-MM-DD HH:MM:SS`` UTC ("-" for None)."""
    return value[:19].replace("T", " ") if value else "-"


def pretty(value: Any) -> str:
    """JSON text for people (escaped by the template like any other text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


_INVISIBLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


class _Verbatim(str):
    """A text a page sends back as it is (an attribute's value: a filter's selected workflow, a search field, a
    hidden field kept across pages): escaped, but not made :func:`visible`, which would send ``\\u202e`` for a
    name holding U+202E and so match nothing. Made by the templates' ``verbatim`` filter."""


def visible(value: Any) -> Any:
    """What a template writes for ``value``: a text's control and bidi-override characters (a NUL or an escape in an
    App's output, a name) as ``\\xNN``/``\\uNNNN``, as the CLI shows them; tab, line feed and carriage return
    stay. Markup (the dashboard's own HTML) and other values are left as they are; everything is escaped after.
    """
    if isinstance(value, str) and not isinstance(value, (Markup, _Verbatim)) and _INVISIBLE.search(value):
        return _INVISIBLE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                              else f"\\u{ord(m.group()):04x}", value)
    return value


def _templates() -> Environment:
    env = Environment(loader=PackageLoader("workrun.ui", "templates"), finalize=visible,
                      autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters.update(pretty=pretty, short_time=short_time, verbatim=_Verbatim)
    env.globals.update(duration=duration, rollup_line=views.rollup_line)
    return env


class Dashboard:
    """State of one ``workrun ui`` server: the data dir, the token, flash messages, the templates.

    Args:
        data_dir: Workrun's data directory (the journal shown).
        token: the access token.
        port: the listening port.
        projects: extra App project directories for the Apps page (``--project``).
    """

    def __init__(self, data_dir: Path, token: str, port: int, projects: list[Path], read_only: bool = False) -> None:
        self.read_only = read_only  # R-D7: the same pages, no actions (every POST 403)
        self.data_dir = data_dir
        self.token = token
        self.port = port
        self.projects = [Path(p).resolve() for p in projects]
        self.csrf = csrf_token(token)
        self.env = _templates()
        self._svc: Services | None = None
        self._lock = threading.Lock()
        self.flashes: dict[str, tuple[str, str]] = {}

    @property
    def journal(self) -> Any:
        with self._lock:
            if self._svc is None:
                self._svc = Services(data_dir=self.data_dir, check=False, open_ticket=open_ticket)
            return self._svc.journal

    def flash(self, kind: str, text: str) -> str:
        """Keep a message for the page shown after an action; returns its id (kept for the last 100)."""
        key = secrets.token_hex(6)
        self.flashes[key] = (kind, text)
        while len(self.flashes) > 100:
            self.flashes.pop(next(iter(self.flashes)))
        return key

    def render(self, request: Request, name: str, http_status: int = 200, **ctx: Any) -> HTMLResponse:
        """The page ``name`` with ``ctx``, or with ``?fragment=1`` its changing part alone (R-U3). Both carry the
        changing part's digest (the page on ``#live`` as ``data-digest``, the fragment as the
        ``X-Workrun-Digest`` header), so the page swaps in an update only when it differs from what it shows."""
        fragment = request.query_params.get("fragment") == "1"
        flash = self.flashes.get(request.query_params.get("flash", ""))
        needs = None  # the navigation's counts: a page's, not its fragment's (the page polls /api/attention)
        if not fragment:
            try:
                needs = attention(self.journal)
            except WorkrunError:
                pass
        template = self.env.get_template(name)
        values = {"csrf": self.csrf, "flash": flash, "path": request.url.path, "attention": needs,
                  "read_only": self.read_only, **ctx}
        # the changing part's digest: on a page, so its first update does not swap in what it already shows; on
        # a fragment, as a header the page compares (R-U3)
        live = template.render(fragment=True, **values)  # the page's changing part alone (fragment.html)
        digest = hashlib.sha256(live.encode()).hexdigest()[:32]
        if fragment:
            return HTMLResponse(live, status_code=http_status, headers={"X-Workrun-Digest": digest})
        html = template.render(fragment=False, digest=digest, live_html=live, **values)  # rendered once
        return HTMLResponse(html, status_code=http_status)

    def close(self) -> None:
        if self._svc is not None:
            self._svc.close()


def _dash(request: Request) -> Dashboard:
    return request.app.state.dashboard


_INT_MAX = 10**9  # a page number, limit or offset past any journal (and far inside SQLite's 64-bit integers)


def _int(value: str | None, default: int, low: int = 1) -> int:
    """A query parameter as an integer in ``[low, 10**9]`` (``default`` when absent or not a number): a hostile
    ``?page=9223372036854775807`` is a page past the end, never a 500."""
    try:
        return min(_INT_MAX, max(low, int(value))) if value is not None else default
    except ValueError:
        return default


# -- pages -------------------------------------------------------------------------------------


def _day(value: str | None, *, end: bool = False) -> float | None:
    """An ISO date (``YYYY-MM-DD``, UTC) as epoch seconds: its start, or with ``end`` the next day's start (so a
    ``until`` day is inclusive). None for none.

    Raises:
        ValueError: not a date.
    """
    if not value:
        return None
    text = value.strip()
    try:  # a date, or a date and a valid time (its day is taken as written); never a date with junk after it
        when = datetime.fromisoformat(text)
    except ValueError:
        when = datetime.strptime(text, "%Y-%m-%d")  # written loosely: 2026-1-5
    day = datetime(when.year, when.month, when.day, tzinfo=UTC)
    return day.timestamp() + (86400 if end else 0)


def _day_text(at: float | None, *, end: bool = False) -> str:
    """The ``YYYY-MM-DD`` a date field shows for :func:`_day`'s epoch seconds ("" for None): a date given as
    ``2026-1-5`` or with a time is shown as the day it was read as, which a date field can hold (R-D1)."""
    if at is None:
        return ""
    return datetime.fromtimestamp(at - (86400 if end else 0), tz=UTC).date().isoformat()


_TEXT_MAX = 500  # characters of a find parameter: longer than any id or workflow name


def _bounded(q: Any, *names: str) -> None:
    """Refuse a find parameter longer than any id or name could be, or holding a NUL.

    Raises:
        ValueError: naming the parameter (the page or the API answers 400).
    """
    for name in names:
        if len(q.get(name) or "") > _TEXT_MAX:
            raise ValueError(f"{name}: at most {_TEXT_MAX} characters")
        if "\0" in (q.get(name) or ""):  # no id or name holds one (a NUL once matched every run)
            raise ValueError(f"{name}: holds a NUL character")


def _run_filters(q: Any) -> dict[str, Any]:
    """The Runs page's find (R-D1): ``q`` (a run-id prefix or a workflow-name substring), ``status``,
    ``workflow``, ``since``/``until`` (ISO dates, UTC, both inclusive), ``sort`` (``started``|``duration``),
    ``order`` (``desc``|``asc``) and ``all`` (``1``: ``workrun verify``'s runs too, as ``runs list --all``; without
    it they are left out, as ``runs list`` leaves them out, R-V1).

    Raises:
        ValueError: a date that is not ``YYYY-MM-DD``, an unknown status, sort or order, ``all`` other than 1.
    """
    _bounded(q, "q", "workflow")
    status = q.get("status") or None
    if status is not None and status not in RUN_STATUSES:
        raise ValueError(f"status: unknown status {status!r}")
    sort = q.get("sort") or "started"
    order = q.get("order") or "desc"
    if sort not in ("started", "duration") or order not in ("desc", "asc"):
        raise ValueError("sort is started or duration; order is desc or asc")
    all_runs = _all_runs(q)
    try:
        since, until = _day(q.get("since")), _day(q.get("until"), end=True)
    except ValueError:
        raise ValueError("since and until are dates: YYYY-MM-DD") from None
    return {"status": status, "workflow": q.get("workflow") or None, "text": (q.get("q") or "").strip() or None,
            "since": since, "until": until, "sort": sort, "descending": order == "desc",
            "verify": None if all_runs else False}


def runs_page(request: Request) -> Response:
    """Runs: newest first; find by text, status, workflow and dates, sort by start or duration, 50 a page, with
    the compensation roll-up (R-U2, R-D1)."""
    d = _dash(request)
    q = request.query_params
    try:
        found = _run_filters(q)
    except ValueError as exc:
        return _bad(d, request, str(exc), "/")
    page = _int(q.get("page"), 1)
    rows = views.runs_list(d.journal, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE, **found)
    total = d.journal.count_runs(**{k: found[k] for k in ("status", "workflow", "text", "since", "until", "verify")})
    pages = max(1, -(-total // PAGE_SIZE))
    filtered = any(q.get(k) for k in ("q", "status", "workflow", "since", "until"))
    # a page empty only because verify runs are left out says so (R-V1): never "no runs yet" over them
    hidden = (d.journal.count_runs(**{k: found[k] for k in ("status", "workflow", "text", "since", "until")},
                                   verify=True) if not total and found["verify"] is False else 0)
    keep = {k: q.get(k) for k in ("q", "status", "workflow", "since", "until", "sort", "order", "all") if q.get(k)}
    return d.render(request, "runs.html", nav="runs", rows=rows, total=total, page=page, pages=pages,
                    status=found["status"], workflow=found["workflow"], statuses=RUN_STATUSES,
                    workflows=d.journal.workflow_names(), filtered=filtered, keep=keep, text=q.get("q") or "",
                    since=_day_text(found["since"]), until=_day_text(found["until"], end=True), sort=found["sort"],
                    order="desc" if found["descending"] else "asc", all_runs=found["verify"] is None,
                    hidden=hidden)


def run_page(request: Request) -> Response:
    """Run: graph, compensation order, nodes and their messages, operations, attempts, tickets (R-U2)."""
    d = _dash(request)
    try:
        view = views.run_detail(d.journal, request.path_params["run_id"])
    except NotFoundError as exc:
        return d.render(request, "error.html", http_status=404, nav="runs", message=exc.line())
    row = d.journal.run(view["run_id"])
    layout = graph.layout(row.get("spec") if isinstance(row.get("spec"), dict) else None, view)
    ops_by_node: dict[str, list[dict[str, Any]]] = {}
    for op in view["operations"]:
        ops_by_node.setdefault(op["node_key"] or "", []).append(op)
    events = [{**e, "at": views.iso(e["at"])} for e in d.journal.events_of_run(view["run_id"])]
    return d.render(request, "run.html", nav="runs", run=view, graph=layout, ops_by_node=ops_by_node,
                    order=graph.compensation_order(view), events=events, tickets=view.get("tickets"),
                    timeline=timeline(view))


def local_time(value: str | None) -> str:
    """An ISO time in the server's local time zone with its UTC offset, e.g. ``17:25:16+05:30`` (R-D3); "-"."""
    if not value:
        return "-"
    when = datetime.fromisoformat(value).astimezone()
    offset = when.strftime("%z")
    return when.strftime("%H:%M:%S") + (f"{offset[:3]}:{offset[3:]}" if offset else "")


def timeline(view: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per call, compensation attempt and ticket action attempt of a run, in chronological order (R-D3):
    ``{what, label, status, start, end, duration}`` (times as :func:`local_time`)."""
    rows: list[tuple[str, dict[str, Any]]] = []
    for op in view["operations"]:
        rows.append((op["started_at"] or "", {"what": "call", "label": f"{op['node_key']} · {op['operation_id']} · "
                                                                        f"{op['app']}", "status": op["status"],
                                               "start": op["started_at"], "end": op["ended_at"]}))
        comp = op.get("compensation")
        for a in (comp or {}).get("attempts") or []:
            rows.append((a["started_at"] or "", {"what": "attempt", "label": f"{op['node_key']} · "
                                                 f"{comp['compensation_id']} #{a['number']}", "status": a["status"],
                                                 "start": a["started_at"], "end": a["ended_at"]}))
    for t in view.get("tickets") or []:
        for a in (t.get("action") or {}).get("attempts") or []:
            rows.append((a["started_at"] or "", {"what": "ticket action", "label": f"{t['node_key']} · "
                                                 f"{t['ticket_id']} #{a['number']}", "status": a["status"],
                                                 "start": a["started_at"], "end": a["ended_at"]}))
    out = []
    for _, row in sorted(rows, key=lambda r: r[0]):
        out.append({**row, "duration": duration(row["start"], row["end"]), "start": local_time(row["start"]),
                    "end": local_time(row["end"])})
    return out


def _all_runs(q: Any) -> bool:
    """The ``all`` parameter of a list page or its API: True (``1``) takes the runs of ``workrun verify`` in too.

    Raises:
        ValueError: any other value than ``0`` or ``1`` (the page answers 400).
    """
    if (q.get("all") or "0") not in ("0", "1"):
        raise ValueError("all is 1 (verify runs too) or 0")
    return q.get("all") == "1"


def _queue_filters(d: Dashboard, q: Any, statuses: tuple[str, ...]) -> dict[str, Any]:
    """The Compensations and Tickets pages' find (R-D1): ``status``, ``run`` (an id or unique prefix) and
    ``workflow`` (a name), as ``{"status", "run_id", "workflow"}`` (None: any).

    Raises:
        ValueError: an unknown status, or a run that matches no run (the page answers 400).
    """
    status = q.get("status") or None
    if status is not None and status not in statuses:
        raise ValueError(f"status: unknown status {status!r} (one of: {', '.join(statuses)})")
    _bounded(q, "run", "workflow")
    run = (q.get("run") or "").strip() or None
    try:
        run_id = d.journal.run(run)["run_id"] if run else None
    except WorkrunError as exc:  # no such run, or the journal refused the look-up
        raise ValueError(exc.line()) from None
    return {"status": status, "run_id": run_id, "workflow": q.get("workflow") or None,
            "verify": _all_runs(q) or run_id is not None}


def _queue_page(d: Dashboard, request: Request, found: dict[str, Any], total: int, page: int) -> dict[str, Any]:
    """What the queue pages' filter form and pager show: the values, the pages and the links' query."""
    q = request.query_params
    keep = {k: q.get(k) for k in ("status", "run", "workflow", "all") if q.get(k)}
    return {"status": found["status"], "run": q.get("run") or "", "workflow": found["workflow"],
            "all": _all_runs(q),
            "workflows": d.journal.workflow_names(), "keep": keep, "filtered": bool(keep), "page": page,
            "pages": max(1, -(-total // PAGE_SIZE)), "total": total}


def compensations_page(request: Request) -> Response:
    """Compensations: the operator's queue, failed / blocked / unknown / pending first, found by status, run and
    workflow, 50 a page (R-U2, R-D1)."""
    d = _dash(request)
    try:
        found = _queue_filters(d, request.query_params, views.COMPENSATION_STATUSES)
    except ValueError as exc:
        return _bad(d, request, str(exc), "/compensations")
    page = _int(request.query_params.get("page"), 1)
    rows, total = d.journal.compensation_queue(**found, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)
    shown = [views.compensation_full(d.journal, c) for c in rows]
    return d.render(request, "compensations.html", nav="compensations", rows=shown,
                    statuses=views.COMPENSATION_STATUSES, **_queue_page(d, request, found, total, page))


def _tickets_view() -> Any:
    return getattr(views, "tickets_list", None)  # present once manual repair (tickets) is in this version


def tickets_page(request: Request) -> Response:
    """Tickets: pending ones first, each with its action status, found by status, run and workflow, 50 a page
    (R-U2, R-D1)."""
    d = _dash(request)
    builder = _tickets_view()
    if builder is None:
        return d.render(request, "tickets.html", nav="tickets", rows=None)
    try:
        found = _queue_filters(d, request.query_params, views.TICKET_STATUSES)
    except ValueError as exc:
        return _bad(d, request, str(exc), "/tickets")
    rows = list(builder(d.journal, status=found["status"], run=found["run_id"], workflow=found["workflow"]))

    def rank(t: dict[str, Any]) -> tuple[int, int, str]:
        action = (t.get("action") or {}).get("status")
        return (QUEUE_ORDER.get(t.get("status", ""), 9), QUEUE_ORDER.get(action or "", 9), t.get("created_at") or "")

    rows.sort(key=rank)
    page = _int(request.query_params.get("page"), 1)
    shown = rows[(page - 1) * PAGE_SIZE:page * PAGE_SIZE]
    return d.render(request, "tickets.html", nav="tickets", rows=shown, statuses=views.TICKET_STATUSES,
                    **_queue_page(d, request, found, len(rows), page))


def apps_page(request: Request) -> Response:
    """Apps: every project seen in the journal or given with ``--project`` (R-U2)."""
    d = _dash(request)
    return d.render(request, "apps.html", nav="apps", projects=apps_view(d))


def apps_view(d: Dashboard) -> list[dict[str, Any]]:
    """Projects with their Apps: config (entry, compensation, output contract), tools from the tool listing
    cache, and whether the code fingerprint changed since the App's last call."""
    from workrun.runner.apps import diff_fingerprints, fingerprint, load_project

    # Apps only: an http node's request or a remote agent's task is an operation, but no App of a project
    calls = [c for c in d.journal.latest_app_calls() if c["kind"] in APP_KINDS]
    names: list[str] = []
    for c in calls:
        if c["project"] not in names:
            names.append(c["project"])
    names += [str(p) for p in d.projects if str(p) not in names]
    out = []
    for name in names:
        path = Path(name)
        project: dict[str, Any] = {"project": name, "error": None, "apps": []}
        last = {c["app"]: c for c in calls if c["project"] == name}
        try:
            specs = load_project(path)
            now = fingerprint(path)
        except WorkrunError as exc:
            project["error"] = exc.line()
            specs, now = {}, None
        for app_name in [*specs, *[a for a in last if a not in specs]]:
            spec = specs.get(app_name)
            call = last.get(app_name)
            changes = diff_fingerprints(call["fingerprint_files"] or {}, now.files) if call and now else []
            tools = None
            if spec is not None and spec.kind == "tool" and now is not None:
                cache = d.data_dir / "tool-cache" / f"{now.digest}-{app_name}.json"
                tools = json.loads(cache.read_text()) if cache.is_file() else None
            project["apps"].append({
                "app": app_name, "in_config": spec is not None,
                "kind": spec.kind if spec else (call or {}).get("kind"),
                "entry": spec.entry if spec else None,
                "compensation": spec.compensation.model_dump() if spec and spec.compensation else None,
                "output": {k: v.model_dump() for k, v in spec.output.items()} if spec else {},
                "tools": tools, "fingerprint": now.digest if now else None,
                "last_call": views.iso(call["created_at"]) if call else None, "calls": call["calls"] if call else 0,
                "last_fingerprint": call["fingerprint"] if call else None,
                "changed": bool(call and now and call["fingerprint"] != now.digest), "changes": changes})
        out.append(project)
    return out


# -- /api: exactly the CLI's --json (R-U7) ----------------------------------------------------


def _api_error(exc: WorkrunError) -> JSONResponse:
    return JSONResponse({"error": exc.line()}, status_code=404 if isinstance(exc, NotFoundError) else 400)


def api_runs(request: Request) -> Response:
    """``workrun runs list --json`` (``all=1``: ``--all``, R-V1), found as the Runs page finds (R-D1: ``q``,
    ``status``, ``workflow``, ``since``, ``until``, ``sort``, ``order``; ``page`` with ``limit``, default 50 when
    either is given; ``offset`` too)."""
    q = request.query_params
    try:
        found = _run_filters(q)
    except ValueError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    try:  # as `runs list --limit 0` exits 2: a bad number is refused, never silently ignored
        limit = _whole(q, "limit", 1)
        offset = _whole(q, "offset", 0) or 0
        page = _whole(q, "page", 1)
    except ValueError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    if page is not None:
        limit = limit or PAGE_SIZE
        offset = (page - 1) * limit
    return JSONResponse(views.runs_list(_dash(request).journal, limit=limit, offset=offset, **found))


def _whole(query: Any, name: str, low: int) -> int | None:
    """The API's query parameter ``name`` as a whole number of at least ``low`` (at most 10**9), None when absent.

    Raises:
        ValueError: anything else, naming the parameter (the API answers 400).
    """
    value = query.get(name)
    if value is None:
        return None
    if not (value.isascii() and value.isdigit()) or int(value) < low:
        raise ValueError(f"{name}: must be a whole number of at least {low}, not {value[:40]!r}")
    return min(_INT_MAX, int(value))


def attention(journal: Any) -> dict[str, Any]:
    """What needs a person (R-D2): ``{"compensations": {"failed", "blocked", "unknown"}, "tickets": {"pending"},
    "total"}``."""
    counts: dict[str, int] = {"failed": 0, "blocked": 0, "unknown": 0}
    for per_run in journal.compensation_counts(None, verify=False).values():  # verify's runs are tests (R-V1)
        for status in counts:
            counts[status] += int(per_run.get(status, 0))
    pending = len(views.tickets_list(journal, status="pending"))
    return {"compensations": counts, "tickets": {"pending": pending}, "total": sum(counts.values()) + pending}


def api_attention(request: Request) -> Response:
    """``/api/attention``: how many compensations and tickets need a person (R-D2)."""
    return JSONResponse(attention(_dash(request).journal))


def api_run(request: Request) -> Response:
    """``workrun runs show RUN --json``."""
    try:
        return JSONResponse(views.run_detail(_dash(request).journal, request.path_params["run_id"]))
    except WorkrunError as exc:
        return _api_error(exc)


def api_compensations(request: Request) -> Response:
    """``workrun compensations list [--status S] [--run RUN] [--workflow W] --json``, a part of it with ``page``,
    ``limit`` or ``offset`` (as ``/api/runs``)."""
    q = request.query_params
    status = q.get("status") or None
    if status is not None and status not in views.COMPENSATION_STATUSES:
        return JSONResponse({"error": f"status: unknown status {status!r} (one of: "
                                      f"{', '.join(views.COMPENSATION_STATUSES)})"}, status_code=400)
    try:
        window = _window(q)
        _bounded(q, "run", "workflow")
        all_runs = _all_runs(q)
    except ValueError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    try:
        rows = views.compensations_list(_dash(request).journal, status=status, run=q.get("run") or None,
                                        workflow=q.get("workflow") or None, all_runs=all_runs)
    except WorkrunError as exc:
        return _api_error(exc)
    return JSONResponse(rows if window is None else rows[window])


def api_compensation(request: Request) -> Response:
    """``workrun compensations show ID --json``."""
    try:
        return JSONResponse(views.compensation_detail(_dash(request).journal, request.path_params["cid"]))
    except WorkrunError as exc:
        return _api_error(exc)


def api_tickets(request: Request) -> Response:
    """``workrun tickets list [--status S] [--run RUN] [--workflow W] --json`` (404 when this version has no
    tickets), a part of it with ``page``, ``limit`` or ``offset`` (as ``/api/runs``)."""
    builder = _tickets_view()
    if builder is None:
        return JSONResponse({"error": "tickets are not part of this version"}, status_code=404)
    q = request.query_params
    status = q.get("status") or None
    if status is not None and status not in views.TICKET_STATUSES:  # refused as `tickets list --status` is
        return JSONResponse({"error": f"status: unknown status {status!r} (one of: "
                                      f"{', '.join(views.TICKET_STATUSES)})"}, status_code=400)
    try:
        window = _window(q)
        _bounded(q, "run", "workflow")
    except ValueError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    try:
        rows = builder(_dash(request).journal, status=status, run=q.get("run") or None,
                       workflow=q.get("workflow") or None)
    except WorkrunError as exc:
        return _api_error(exc)
    return JSONResponse(rows if window is None else rows[window])


def _window(q: Any) -> slice | None:
    """The part of a list the API's ``page`` (with ``limit``, default 50), ``limit`` and ``offset`` ask for, as
    ``/api/runs`` reads them (R-D1: the Compensations and Tickets pages page too); None when none is given.

    Raises:
        ValueError: a parameter that is not a whole number of at least its least value (400, naming it).
    """
    limit, offset, page = _whole(q, "limit", 1), _whole(q, "offset", 0), _whole(q, "page", 1)
    if limit is None and offset is None and page is None:
        return None
    if page is not None:
        limit = limit or PAGE_SIZE
        offset = (page - 1) * limit
    start = offset or 0
    return slice(start, None if limit is None else start + limit)


def api_ticket(request: Request) -> Response:
    """``workrun tickets show T --json`` (404 when this version has no tickets)."""
    one = getattr(views, "ticket_view", None)
    if one is None:
        return JSONResponse({"error": "tickets are not part of this version"}, status_code=404)
    journal = _dash(request).journal
    try:
        return JSONResponse(one(journal, journal.ticket(request.path_params["tid"])))
    except WorkrunError as exc:
        return _api_error(exc)


# -- actions (R-U4) -------------------------------------------------------------------------------


async def _form(request: Request) -> dict[str, str]:
    """The urlencoded form of a POST (last value of each field); the Guard has bounded its size.

    Raises:
        HTTPException: 400 when a field holds a NUL character (nothing is done).
    """
    from urllib.parse import parse_qsl

    from starlette.exceptions import HTTPException

    body = (await request.body()).decode("utf-8", "replace")
    form = dict(parse_qsl(body, keep_blank_values=True))
    if any("\x00" in k or "\x00" in v for k, v in form.items()):  # no command line can carry it
        raise HTTPException(400, "a form field holds a NUL character")
    return form


def _back(form: dict[str, str], default: str) -> str:
    back = form.get("back", "")
    return back if back.startswith("/") and not back.startswith("//") and "\\" not in back else default


def _answer(d: Dashboard, request: Request, result: ActionResult, what: str, back: str,
            go: str | None = None) -> Response:
    if result.state == "busy":
        return d.render(request, "error.html", http_status=409, nav="", message=result.line, back=back)
    if result.state in ("refused", "error"):
        return d.render(request, "error.html", http_status=400 if result.state == "refused" else 500, nav="",
                        message=result.line or f"{what} failed (exit {result.code})", back=back)
    text = {"done": f"{what}: done", "ended": f"{what}: finished (exit {result.code}); see the statuses below",
            "running": f"{what}: started; this page follows it"}[result.state]
    key = d.flash("ok" if result.state in ("done", "running") else "warn", text)
    target = go or back
    return RedirectResponse(f"{target}{'&' if '?' in target else '?'}flash={key}", status_code=303)


def _bad(d: Dashboard, request: Request, message: str, back: str = "/") -> Response:
    return d.render(request, "error.html", http_status=400, nav="", message=message, back=back)


async def run_action_route(request: Request) -> Response:
    """POST ``/actions/runs/{run_id}/{rerun|stop|compensate}``."""
    from starlette.concurrency import run_in_threadpool

    d = _dash(request)
    rid, action = request.path_params["run_id"], request.path_params["action"]
    form = await _form(request)
    back = _back(form, f"/runs/{rid}")
    if not _ID.match(rid) or action not in ("rerun", "stop", "compensate"):
        return _bad(d, request, "unknown action or id", back)
    wait = ["--wait"] if form.get("wait") else []
    reason = form.get("reason", "").strip()
    if action in ("stop", "compensate") and not reason:  # R-D4: asked, and kept in the audit row
        return _bad(d, request, f"{action} needs a reason", back)
    why = [f"--reason={reason}"] if reason else []
    if action == "stop":  # never queued behind actions that wait for a scheduler: it takes 3 s at most (R-C9)
        result = await _act(d, ["stop", rid, *why], scheduling=False, timeout=3.0)
        return _answer(d, request, result, f"stop {rid}", back)
    result = await _act(d, [action, rid, *wait, *why], scheduling=True)
    go = None
    if action == "rerun" and result.run_id:
        go = f"/runs/{result.run_id}"
    elif action == "rerun" and result.state in ("done", "ended", "running"):
        go = await run_in_threadpool(_new_run, d, rid, result.started_at)
    return _answer(d, request, result, f"{action} {rid}", back, go)


def _new_run(d: Dashboard, old: str, since: float) -> str | None:
    """The run started by our rerun: its audit row on the old run (written right after the new run)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            rid = d.journal.run(old)["run_id"]
        except NotFoundError:
            return None
        for e in reversed(d.journal.events_of_run(rid)):
            if e["action"] == "rerun" and e["at"] >= since - 1 and (e["args"] or {}).get("new_run"):
                return f"/runs/{e['args']['new_run']}"
        time.sleep(0.1)
    return None


async def compensation_action_route(request: Request) -> Response:
    """POST ``/actions/compensations/{cid}/{retry|resolve|confirm|note}``."""
    d = _dash(request)
    cid, action = request.path_params["cid"], request.path_params["action"]
    form = await _form(request)
    back = _back(form, "/compensations")
    if not _ID.match(cid) or action not in ("retry", "resolve", "confirm", "note"):
        return _bad(d, request, "unknown action or id", back)
    note = form.get("text", "").strip()
    args = ["compensations", action]
    if action == "retry":
        args += ([cid, "--accept-code-change"] if form.get("accept_code_change") else [cid])
        args += ["--wait"] if form.get("wait") else []
    elif action == "resolve":
        reason = form.get("reason", "").strip()
        if not reason:  # R-D4: asked (the field `reason`, nothing else), and kept in the audit row as the note
            return _bad(d, request, "resolve needs a reason", back)
        args += [cid, f"--note={reason}"]
    elif action == "confirm":
        if form.get("outcome") not in ("done", "not-done"):
            return _bad(d, request, "confirm needs done or not-done", back)
        args += [cid, f"--{form['outcome']}"] + ([f"--note={note}"] if note else [])
    else:
        if not note:
            return _bad(d, request, "a note needs text", back)
        args += [cid, "--", note]
    result = await _act(d, args, scheduling=action == "retry")
    return _answer(d, request, result, f"{action} {cid}", back)


async def ticket_action_route(request: Request) -> Response:
    """POST ``/actions/tickets/{tid}/{resume|retry|resolve|terminate|confirm|note}`` (the ``tickets`` commands)."""
    d = _dash(request)
    tid, action = request.path_params["tid"], request.path_params["action"]
    form = await _form(request)
    back = _back(form, "/tickets")
    if not _ID.match(tid) or action not in ("resume", "retry", "resolve", "terminate", "confirm", "note"):
        return _bad(d, request, "unknown action or id", back)
    args = ["tickets", action, tid]
    if action == "resume" and form.get("result", "").strip():
        args.append(f"--result={form['result'].strip()}")
    if action in ("terminate", "resolve"):
        reason = form.get("reason", "").strip()
        if not reason:  # R-D4: asked, and kept in the audit row
            return _bad(d, request, f"{action} needs a reason", back)
        args.append(f"--reason={reason}" if action == "terminate" else f"--note={reason}")
    if action == "terminate" and form.get("no_compensate"):
        args.append("--no-compensate")
    if action == "confirm":
        if form.get("outcome") not in ("done", "not-done"):
            return _bad(d, request, "confirm needs done or not-done", back)
        args.append(f"--{form['outcome']}")
    if action == "note":
        if not form.get("text", "").strip():
            return _bad(d, request, "a note needs text", back)
        args += ["--", form["text"].strip()]
    scheduling = action in ("resume", "retry", "terminate")
    if scheduling and form.get("wait"):  # R-U4: waits for a busy scheduler when asked, as the CLI's --wait
        args.append("--wait")
    result = await _act(d, args, scheduling=scheduling)
    return _answer(d, request, result, f"{action} {tid}", back)


async def list_tools_route(request: Request) -> Response:
    """POST ``/actions/apps/tools``: list a Tool App project's tools (``workrun app list PROJECT``), which
    fills the tool listing cache the Apps page reads."""
    d = _dash(request)
    form = await _form(request)
    known = {str(p) for p in d.projects} | {c["project"] for c in d.journal.latest_app_calls()}
    project = form.get("project", "")
    if project not in known:
        return _bad(d, request, "unknown project", "/apps")
    result = await _act(d, ["app", "list", project, "--json"], scheduling=False, timeout=180.0)
    return _answer(d, request, result, "list tools", "/apps")


def create_app(*, data_dir: Path, token: str, port: int, projects: list[Path] | None = None,
               read_only: bool = False) -> Guard:
    """Build the dashboard as an ASGI app, wrapped in its :class:`~workrun.ui.security.Guard` (R-U5).

    Args:
        data_dir: the data directory whose journal is shown.
        token: the access token (also derives the session cookie and the CSRF token).
        port: the port the server listens on (Host and Origin checks).
        projects: extra App project directories for the Apps page.
        read_only: the same pages with no actions; every POST is 403 (R-D7).
    """
    static = Path(__file__).with_name("static")
    routes = [
        Route("/", runs_page), Route("/runs/{run_id}", run_page), Route("/compensations", compensations_page),
        Route("/tickets", tickets_page), Route("/apps", apps_page),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
        Route("/api/runs", api_runs), Route("/api/runs/{run_id}", api_run), Route("/api/attention", api_attention),
        Route("/api/compensations", api_compensations), Route("/api/compensations/{cid}", api_compensation),
        Route("/api/tickets", api_tickets), Route("/api/tickets/{tid}", api_ticket),
        Route("/api/{rest:path}", lambda request: JSONResponse({"error": "no such API endpoint"}, status_code=404)),
        Route("/actions/runs/{run_id}/{action}", run_action_route, methods=["POST"]),
        Route("/actions/compensations/{cid}/{action}", compensation_action_route, methods=["POST"]),
        Route("/actions/tickets/{tid}/{action}", ticket_action_route, methods=["POST"]),
        Route("/actions/apps/tools", list_tools_route, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=str(static)), name="static"),
    ]
    dashboard = Dashboard(data_dir, token, port, projects or [], read_only=read_only)
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        dashboard.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.dashboard = dashboard
    return Guard(app, token=token, port=port, read_only=read_only)
