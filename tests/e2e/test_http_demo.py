"""The README's HTTP demo: ``demo_apps/workflows/http_order.toml`` against ``demo_apps/shop_service.py`` started
as a subprocess (R-H1, R-H6): the order is created, the payment is declined, the order is deleted."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def shop(demo_shop):
    return demo_shop


def test_http_order_demo_deletes_the_order_it_created(shop, tmp_path, workrun):
    text = (ROOT / "demo_apps" / "workflows" / "http_order.toml").read_text()
    assert text.count("127.0.0.1:8765") == 4  # the demo's port, replaced by the one this shop got
    wf = tmp_path / "http_order.toml"
    wf.write_text(text.replace("127.0.0.1:8765", f"127.0.0.1:{shop}"))
    res = workrun("run", wf, "--json", env={"SHOP_TOKEN": "demo-token"})
    assert res.code == 1, res
    view = res.json()
    order = next(o for o in view["operations"] if o["node_key"] == "order")
    pay = next(o for o in view["operations"] if o["node_key"] == "pay")
    assert order["result"]["status"] == 201 and order["result"]["body"]["item"] == "notebook"
    assert pay["status"] == "failed" and pay["error"] == 'HTTP 402: {"error": "payment declined"}'
    assert order["compensation"]["status"] == "succeeded"
    assert order["compensation"]["result"]["body"] == {"deleted": order["result"]["body"]["id"]}
    with urllib.request.urlopen(f"http://127.0.0.1:{shop}/api/orders", timeout=30) as answer:
        assert json.load(answer) == []  # nothing left behind
    missing = workrun("run", wf)
    assert missing.code == 2 and "environment variable SHOP_TOKEN is not set" in missing.err
