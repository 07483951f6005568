"""The README's manual-repair demo: ``demo_apps/workflows/repair.toml`` against the demo shop (SPEC §12):
the declined payment waits for a person (exit 4); a RESULT without the field the receipt reads is
refused; resuming with it finishes the run; terminating instead deletes the order."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from _kit.shop import running_shop

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def demo(tmp_path):
    text = (ROOT / "demo_apps" / "workflows" / "repair.toml").read_text()
    assert text.count("127.0.0.1:8765") == 5  # the demo's port, replaced by the one this shop got
    with running_shop() as port:
        wf = tmp_path / "repair.toml"
        wf.write_text(text.replace("127.0.0.1:8765", f"127.0.0.1:{port}"))
        yield wf, port


def orders(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/orders", timeout=30) as answer:
        return json.load(answer)


def test_repair_demo_resume(demo, workrun):
    wf, port = demo
    res = workrun("run", wf)
    assert res.code == 4, res
    (ticket,) = workrun("tickets", "list", "--json").json()
    tid = ticket["ticket_id"]
    assert f"workrun tickets resume {tid}" in res.out and ticket["error"] == 'HTTP 402: {"error": "payment declined"}'
    refused = workrun("tickets", "resume", tid, "--result", '{"ref": "bank-42"}')
    assert refused.code == 2 and "RESULT has no field 'body'" in refused.err, refused
    res = workrun("tickets", "resume", tid, "--result", '{"body": {"ref": "bank-42"}}', "--json")
    assert res.code == 0, res
    receipt = next(o for o in res.json()["operations"] if o["node_key"] == "receipt")
    assert receipt["input"]["url"].endswith("?payment=bank-42") and receipt["status"] == "succeeded"
    assert [o["item"] for o in orders(port)] == ["notebook"]


def test_repair_demo_terminate_deletes_the_order(demo, workrun):
    wf, port = demo
    assert workrun("run", wf).code == 4
    (ticket,) = workrun("tickets", "list", "--json").json()
    res = workrun("tickets", "terminate", ticket["ticket_id"][:8], "--json")
    assert res.code == 1, res
    assert res.json()["status"] == "failed" and orders(port) == []
