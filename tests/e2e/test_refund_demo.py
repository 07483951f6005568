"""The refund demo (``demo_apps/workflows/refund.toml``, SPEC §19): a declined payment marks the run's data,
e-mails the operator, and the failed run refunds the order through the shop's connector. Against the demo
shop (a subprocess) and a real SMTP server."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from _kit.smtp_server import SmtpServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def shop(demo_shop):
    return demo_shop


def test_the_refund_demo(shop, tmp_path, workrun):
    with SmtpServer() as smtp:
        text = (ROOT / "demo_apps" / "workflows" / "refund.toml").read_text()
        text = text.replace("127.0.0.1:8765", f"127.0.0.1:{shop}").replace("127.0.0.1:8025", f"127.0.0.1:{smtp.port}")
        text = text.replace("port = 8025", f"port = {smtp.port}")
        wf = tmp_path / "refund.toml"
        wf.write_text(text)
        res = workrun("run", wf, "--json", env={"SHOP_TOKEN": "demo-token"})
        assert res.code == 1, res
        view = res.json()
        assert view["data"]["status"] == "refund-requested"
        order = next(o for o in view["operations"] if o["node_key"] == "order")
        assert order["input"]["connector"] == "shop" and order["compensation"]["status"] == "succeeded"
        with urllib.request.urlopen(f"http://127.0.0.1:{shop}/api/orders", timeout=30) as answer:
            assert json.load(answer) == []  # refunded: nothing left behind
        [mail] = smtp.messages()
        assert mail["To"] == "operator@example.com" and view["run_id"] in mail["Subject"]
        assert "pay" in mail.get_content()
