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
