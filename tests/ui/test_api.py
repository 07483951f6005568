"""``/api/…`` returns exactly the CLI's ``--json`` (R-U7), read from a real dashboard while the CLI reads the same
journal; and the SPEC §16 roll-up is in both."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "demo_apps" / "workflows" / "tutorial.toml"


def test_api_equals_cli_json(ui_server, workrun) -> None:
    r = workrun("run", TUTORIAL, "--json")
    assert r.code == 1, r
    run_id = r.json()["run_id"]
    server = ui_server()
    client = server.client()
    shown = workrun("runs", "show", run_id, "--json")
    assert shown.code == 0, shown
    assert client.get(f"/api/runs/{run_id}").json() == shown.json()
    assert client.get(f"/api/runs/{run_id[:8]}").json() == shown.json()  # a unique prefix, as the CLI
    assert client.get("/api/runs").json() == workrun("runs", "list", "--json").json()
    assert client.get("/api/compensations").json() == workrun("compensations", "list", "--json").json()
    cid = shown.json()["operations"][0]["compensation"]["compensation_id"]
    assert client.get(f"/api/compensations/{cid}").json() == workrun("compensations", "show", cid, "--json").json()
    # the roll-up of SPEC §16
    assert shown.json()["compensation"] == "complete"
    assert shown.json()["compensation_counts"] == {"pending": 0, "running": 0, "succeeded": 1, "failed": 0,
                                                   "blocked": 0, "unknown": 0, "skipped": 0}
    assert "compensated: 1 of 1" in workrun("runs", "show", run_id).out
    missing = client.get("/api/runs/run_nope")
    assert missing.status_code == 404 and "no run matches" in missing.json()["error"]


def test_runs_page_filters_and_pages(ui_server, isolated_env: Path) -> None:
    import time

    from workrun.journal import SqliteJournal

    isolated_env.mkdir(mode=0o700, parents=True, exist_ok=True)
    journal = SqliteJournal(isolated_env / "journal.sqlite3")
    now = time.time()
    for i in range(60):
        journal.create_run({"run_id": f"run_{i:012d}", "workflow": "even" if i % 2 == 0 else "odd",
                            "workflow_path": "/w.toml", "spec": {"nodes": {}}, "inputs": {}, "status": "running",
                            "created_at": now + i}, [])
    journal.close()
    client = ui_server().client()
    first = client.get("/").text
    assert first.count('class="run-row"') == 50
    assert first.index("run_000000000059") < first.index("run_000000000010")  # newest first
    assert "run_000000000009" not in first and "page 1 of 2" in first
    second = client.get("/?page=2").text
    assert second.count('class="run-row"') == 10 and "run_000000000000" in second
    odd = client.get("/?workflow=odd").text
    assert odd.count('class="run-row"') == 30 and "run_000000000058" not in odd
    assert client.get("/?status=failed").text.count('class="run-row"') == 0
    api = client.get("/api/runs?workflow=even&limit=5").json()
    assert [r["run_id"] for r in api] == [f"run_{i:012d}" for i in (58, 56, 54, 52, 50)]


def test_apps_page_shows_config_and_code_changes(ui_server, workrun, marker_project, make_project,
                                                 write_workflow) -> None:
    wf = write_workflow("one", f"""
        name = "one"
        [nodes.only]
        project = "{marker_project}"
        app = "mark"
    """)
    assert workrun("run", wf).code == 0
    other = make_project("other", """
        [tool.workrun.apps.other]
        kind = "process"
        entry = "main.py"
        [tool.workrun.apps.other.output]
        total = { type = "integer", required = true }
    """, {"main.py": "print('hi')\n"})
    client = ui_server("--project", str(other)).client()
    page = client.get("/apps").text
    assert str(marker_project) in page and str(other) in page
    assert "unchanged since its last call" in page and "compensate.py" in page
    assert "total: integer (required)" in page and "never called" in page
    (marker_project / "main.py").write_text((marker_project / "main.py").read_text() + "\n# changed\n")
    page = client.get("/apps").text
    assert "code changed since its last call" in page and "main.py changed" in page
