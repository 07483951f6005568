"""The outbound guard and one bounded request (R-H2..R-H5), against a real HTTP server on loopback."""

from __future__ import annotations

import json
import socket
import time

import pytest

from _kit.http_server import TestServer
from workrun.core.errors import ConfigError
from workrun.core.outcomes import Failure
from workrun.outbound.http import (
    AllowList,
    UnsafeRequestError,
    allow_from_env,
    check_address,
    check_templates,
    parse_allow,
    parse_url,
    prepare,
    send,
)


@pytest.mark.parametrize("address, rule", [
    ("127.0.0.1", "loopback"),
    ("127.8.9.10", "loopback"),
    ("::1", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.168.1.1", "private"),
    ("fd12::1", "private"),
    ("169.254.169.254", "link-local"),
    ("fe80::1", "link-local"),
    ("100.64.0.1", "carrier-grade NAT"),
    ("224.0.0.251", "multicast"),
    ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    ("240.0.0.1", "reserved"),
    ("192.0.2.10", "reserved"),
    ("::ffff:127.0.0.1", "loopback, IPv4-mapped 127.0.0.1"),
    ("::ffff:169.254.169.254", "link-local, IPv4-mapped 169.254.169.254"),
    ("::10.0.0.1", "private, IPv4-compatible 10.0.0.1"),
    ("2002:a9fe:a9fe::1", "link-local, 6to4 169.254.169.254"),
    ("64:ff9b::7f00:1", "loopback, NAT64 127.0.0.1"),
])
def test_guard_refuses_each_range_naming_the_rule(address: str, rule: str) -> None:
    line = check_address(address, 80)
    assert line is not None and line.startswith("refused by the outbound guard: ")
    assert line.endswith(f" ({rule})")
    shown = line.removeprefix("refused by the outbound guard: ").split(" (")[0]
    assert shown == address or (address == "::10.0.0.1" and shown == "::a00:1") \
        or (address == "64:ff9b::7f00:1" and shown == address)


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "172.32.0.1", "::ffff:8.8.8.8"])
def test_guard_lets_public_addresses_through(address: str) -> None:
    assert check_address(address, 443) is None


def test_http_allow_allows_addresses_ports_and_networks() -> None:
    allow = parse_allow(["127.0.0.1:8080", "10.1.2.0/24", "[::1]:9000", "fd00::/8"])
    assert check_address("127.0.0.1", 8080, allow) is None
    assert check_address("127.0.0.1", 8081, allow) is not None  # the port is part of the entry
    assert check_address("::ffff:127.0.0.1", 8080, allow) is None  # the mapped form of an allowed address
    assert check_address("10.1.2.77", 1, allow) is None
    assert check_address("10.1.3.1", 1, allow) == "refused by the outbound guard: 10.1.3.1 (private)"
    assert check_address("::1", 9000, allow) is None
    assert check_address("fd00::5", 80, allow) is None
    assert check_address("169.254.169.254", 80, allow) is not None


@pytest.mark.parametrize("entries", [["localhost:80"], ["10.0.0.0/33"], ["1.2.3.4:http"], "127.0.0.1", [1]])
def test_http_allow_rejects_bad_entries(entries: object) -> None:
    with pytest.raises(ConfigError) as info:
        parse_allow(entries, file="wf.toml")
    assert info.value.line().startswith("wf.toml: http_allow")


def test_allow_from_environment() -> None:
    allow = allow_from_env({"WORKRUN_HTTP_ALLOW": "127.0.0.1:1, 10.0.0.0/8"})
    assert check_address("10.9.9.9", 5, allow) is None and check_address("127.0.0.1", 1, allow) is None
    with pytest.raises(ConfigError) as info:
        allow_from_env({"WORKRUN_HTTP_ALLOW": "example.com"})
    assert info.value.field == "WORKRUN_HTTP_ALLOW"


@pytest.mark.parametrize("url", ["http://{{ inputs.host }}/x", "https://shop.example:{{ inputs.port }}/",
                                 "{{ inputs.scheme }}://shop.example/", "http://shop{{ inputs.x }}.example/"])
def test_template_in_scheme_host_or_port_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_url(url, file="wf.toml", field="nodes.order.url")
    assert info.value.line().startswith("wf.toml: nodes.order.url: ")
    assert "literal" in info.value.message


@pytest.mark.parametrize("url", ["ftp://a/", "http://user:pw@a/", "http://a/{{ x", "shop.example/x", "http://a:99999/"])
def test_bad_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError):
        parse_url(url)


def test_env_only_in_header_values_and_must_be_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKEN_SET", "s3cret")
    monkeypatch.delenv("TOKEN_UNSET", raising=False)
    refs: list[str] = []
    check_templates("Bearer {{ env.TOKEN_SET }}", file="f", field="h", allow_env=True,
                    check_ref=lambda f, r: refs.append(r))
    with pytest.raises(ConfigError) as info:
        check_templates({"a": "{{ env.TOKEN_SET }}"}, file="f", field="nodes.n.body", allow_env=False,
                        check_ref=lambda f, r: None)
    assert info.value.field == "nodes.n.body.a"
    with pytest.raises(ConfigError) as info:
        check_templates("Bearer {{ env.TOKEN_UNSET }}", file="f", field="nodes.n.headers.Authorization",
                        allow_env=True, check_ref=lambda f, r: None)
    assert info.value.line() == "f: nodes.n.headers.Authorization: environment variable TOKEN_UNSET is not set"


def _request(url: str, *, method: str = "POST", headers: dict[str, str] | None = None, body: object = None,
             values: dict[str, object] | None = None, timeout: float = 20, key: str = "op_test"):
    return prepare(method=method, url=parse_url(url), headers=headers or {}, body=body, timeout=timeout,
                   lookup=lambda ref: (values or {})[ref], idempotency_key=key)


def _allow(server: TestServer) -> AllowList:
    return parse_allow([f"127.0.0.1:{server.port}"])


def test_template_values_are_percent_encoded_on_the_wire() -> None:
    with TestServer() as server:
        req = _request(server.url + "/items/{{ v }}?q={{ v }}&n=1", method="GET", values={"v": "/../admin?x=1#"})
        got = send(req, _allow(server))
        assert got.status == 404 and got.sent
        (arrived,) = server.received
        assert arrived.path == "/items/%2F..%2Fadmin%3Fx%3D1%23?q=%2F..%2Fadmin%3Fx%3D1%23&n=1"

    # SPEC §19: a value that makes a path segment . or .. (in any spelling) is never sent
    for value in ("..", ".", "%2e", "%2E%2e", " .. "):
        with pytest.raises(UnsafeRequestError, match=r"unsafe path from \{\{ v \}\}"):
            _request("http://127.0.0.1/items/{{ v }}/x", method="GET", values={"v": value})
    for value in ("", "   ", None):  # R-X3: an empty value in a path segment or a query value
        for url in ("http://127.0.0.1/items/{{ v }}", "http://127.0.0.1/items?id={{ v }}"):
            with pytest.raises(UnsafeRequestError, match=r"empty value for \{\{ v \}\} in url"):
                _request(url, method="DELETE", values={"v": value})


def test_loopback_is_refused_without_allow_and_nothing_is_sent() -> None:
    with TestServer() as server:
        got = send(_request(server.url + "/api"), AllowList())
        assert (got.sent, got.failure, got.status) == (False, Failure.REFUSED, None)
        assert got.error == "refused by the outbound guard: 127.0.0.1 (loopback)"
        got = send(_request(f"http://localhost:{server.port}/api"), AllowList())
        assert got.failure == Failure.REFUSED and "(loopback)" in (got.error or "")
        assert server.received == []
        # a name with several addresses connects only to one that passed (here 127.0.0.1, never ::1)
        got = send(_request(f"http://localhost:{server.port}/api"), _allow(server))
        assert got.sent and got.status == 404 and got.address == "127.0.0.1"
        assert server.received[0].headers["Host"] == f"localhost:{server.port}"


def test_success_keeps_three_headers_parses_json_and_sends_the_idempotency_key() -> None:
    with TestServer() as server:
        server.route("POST", "/api/orders", status=201, json={"id": 7},
                     headers={"ETag": '"v1"', "Location": "/api/orders/7", "X-Other": "no"})
        req = _request(server.url + "/api/orders", body={"item": "{{ item }}", "qty": "{{ qty }}"},
                       values={"item": "book", "qty": 2}, key="op_abc")
        got = send(req, _allow(server))
        assert got.succeeded and got.result() == {
            "status": 201, "body": {"id": 7},
            "headers": {"content-type": "application/json", "location": "/api/orders/7", "etag": '"v1"'}}
        (arrived,) = server.received
        assert arrived.json() == {"item": "book", "qty": 2}
        assert arrived.headers["Idempotency-Key"] == "op_abc"
        assert arrived.headers["Host"] == f"127.0.0.1:{server.port}"


def test_error_status_names_status_and_body_and_redirect_is_not_followed() -> None:
    with TestServer() as server:
        server.route("POST", "/bad", status=422, body="item " + "x" * 400)
        server.route("POST", "/old", status=302, headers={"Location": f"{server.url}/new"})
        got = send(_request(server.url + "/bad"), _allow(server))
        assert got.failure == Failure.HTTP_STATUS and got.status == 422
        assert got.error == "HTTP 422: item " + "x" * 195
        got = send(_request(server.url + "/old"), _allow(server))
        assert got.failure == Failure.HTTP_STATUS and got.status == 302
        assert got.error == f"HTTP 302: redirect to {server.url}/new not followed"
        assert server.count("POST", "/new") == 0 and server.count("GET", "/new") == 0


def test_timeout_after_the_request_was_received_is_unknown() -> None:
    with TestServer() as server:
        server.route("POST", "/slow", hang=30)
        t0 = time.monotonic()
        got = send(_request(server.url + "/slow", timeout=1), _allow(server))
        assert time.monotonic() - t0 < 20
        assert (got.sent, got.failure, got.status) == (True, Failure.UNKNOWN, None)
        assert got.error is not None and "no answer within 1 s" in got.error
        assert server.count("POST", "/slow") == 1


def test_connection_refused_is_failed_and_nothing_sent() -> None:
    with socket.socket() as sock:  # bound but not listening: refused, and no other process can take the port
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        got = send(_request(f"http://127.0.0.1:{port}/x"), parse_allow([f"127.0.0.1:{port}"]))
    assert (got.sent, got.failure) == (False, Failure.NOT_SENT)


def test_response_over_one_mib_is_failed() -> None:
    with TestServer() as server:
        server.route("GET", "/big", raw=b"a" * (1024 * 1024 + 10))
        got = send(_request(server.url + "/big", method="GET"), _allow(server))
        assert got.failure == Failure.BAD_RESPONSE and got.error == "HTTP 200: response over 1 MiB"


def test_request_body_over_one_mib_is_refused_before_sending() -> None:
    from workrun.outbound.http import RequestError

    with pytest.raises(RequestError, match="over 1 MiB"):
        _request("http://127.0.0.1:1/x", body="{{ big }}", values={"big": "a" * (1024 * 1024 + 1)})


@pytest.mark.parametrize("value, says", [("one\r\nX-Evil: two", "line break"), ("caf\u00e9", "not ASCII"),
                                         ("\u2603", "not ASCII")])
def test_a_filled_header_value_that_cannot_be_sent_is_refused_before_sending(value: str, says: str) -> None:
    from workrun.outbound.http import RequestError

    with pytest.raises(RequestError, match=f"header X-Note: .*{says}"):
        _request("http://127.0.0.1:1/x", headers={"X-Note": "{{ v }}"}, values={"v": value})


def test_secret_goes_to_the_server_but_not_into_what_is_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOP_TOKEN", "tok-VERY-SECRET-1")
    with TestServer() as server:
        server.route("GET", "/echo", status=200, body="you sent tok-VERY-SECRET-1")
        req = _request(server.url + "/echo", method="GET", headers={"Authorization": "Bearer {{ env.SHOP_TOKEN }}"})
        assert req.shown()["headers"]["Authorization"] == "Bearer {{ env.SHOP_TOKEN }}"
        got = send(req, _allow(server))
        assert server.received[0].headers["Authorization"] == "Bearer tok-VERY-SECRET-1"
        assert "tok-VERY-SECRET-1" not in repr(req.shown()) + repr(got.result()) + repr(got.response_tail)


@pytest.mark.skipif(__import__("shutil").which("openssl") is None, reason="needs the openssl command for a test cert")
def test_https_connects_to_the_checked_address_with_the_hosts_tls_name(tmp_path) -> None:
    """The connection goes to 127.0.0.1 while TLS checks the certificate against the URL's host name (the
    server-name extension): a certificate for ``localhost`` only is accepted for ``https://localhost``."""
    import http.server
    import ssl
    import subprocess
    import threading

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
                   check=True, capture_output=True)
    seen: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            seen.append(self.headers.get("Host"))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    names: list[str | None] = []
    server_ctx.sni_callback = lambda sock, name, ctx: names.append(name)
    httpd.socket = server_ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        port = httpd.server_address[1]
        client_ctx = ssl.create_default_context(cafile=str(cert))
        allow = parse_allow([f"127.0.0.1:{port}"])
        got = send(_request(f"https://localhost:{port}/x", method="GET"), allow, verify=client_ctx)
        assert got.succeeded and got.address == "127.0.0.1", got
        assert names == ["localhost"] and seen == [f"localhost:{port}"]
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("where, outcome", [("before", (False, Failure.NOT_SENT)), ("after", (True, Failure.UNKNOWN))])
def test_an_unexpected_error_is_an_outcome_not_a_crash(monkeypatch: pytest.MonkeyPatch, where: str,
                                                       outcome: tuple[bool, Failure]) -> None:
    """An error nobody foresaw still ends as data: before sending -> not sent; after -> unknown (never stuck)."""
    import httpx

    import workrun.outbound.http as outbound

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("unforeseen")

    if where == "before":
        monkeypatch.setattr(httpx.Client, "build_request", boom)
    else:
        monkeypatch.setattr(outbound, "_read", boom)
    with TestServer() as server:
        server.route("POST", "/x", status=201, body="{}")
        got = send(_request(server.url + "/x"), _allow(server))
        assert (got.sent, got.failure) == outcome
        assert got.error is not None and ("RuntimeError" in got.error or "unforeseen" in got.error)
        assert server.count("POST", "/x") == (1 if where == "after" else 0)


def test_queued_request_keeps_env_references_and_is_filled_where_it_is_sent():
    """R-H5 + R-S2: the queued form holds no secret; ``env.NAME`` is read by the sender, and a template value
    that merely looks like an env reference stays text (never resolved)."""
    from workrun.outbound.http import RequestError, from_queued

    req = prepare(method="POST", url=parse_url("http://127.0.0.1:9/o/{{ inputs.x }}"),
                  headers={"Authorization": "Bearer {{ env.TOKEN }}", "X-Note": "{{ inputs.x }}"},
                  body={"x": "{{ inputs.x }}"}, timeout=3, lookup=lambda ref: "{{ env.TOKEN }}",
                  idempotency_key="op-1", environ={"TOKEN": "here"})
    queued = req.queued()
    assert "here" not in json.dumps(queued)
    sent = from_queued(json.loads(json.dumps(queued)), {"TOKEN": "there"})
    assert sent.headers["Authorization"] == "Bearer there" and sent.secrets == {"TOKEN": "there"}
    assert sent.headers["X-Note"] == "{{ env.TOKEN }}"  # data, not a reference
    assert (sent.target, sent.body, sent.shown(), sent.headers["Idempotency-Key"]) == (
        req.target, req.body, req.shown(), "op-1")
    with pytest.raises(RequestError, match="TOKEN is not set"):
        from_queued(queued, {})


@pytest.mark.skipif(__import__("shutil").which("openssl") is None, reason="needs the openssl command for a test cert")
def test_starttls_checks_the_hosts_certificate_and_sends(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``starttls = true`` (the documented port-587 set-up, R-K2): the upgraded connection checks the certificate
    against ``host``, the message is sent; a certificate for another name is refused before anything is sent
    (failed, not sent: never an internal error, never ``unknown``). A hostile test found STARTTLS crashing."""
    import ssl
    import subprocess

    from _kit.smtp_server import SmtpServer

    from workrun.core.models import SmtpSpec
    from workrun.outbound.mail import send_mail

    def cert(name: str) -> tuple[str, str]:
        c, k = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(k), "-out", str(c),
                        "-days", "1", "-subj", f"/CN={name}", "-addext", f"subjectAltName=DNS:{name}"],
                       check=True, capture_output=True)
        return str(c), str(k)

    mail = {"to": ["ops@example.com"], "cc": [], "subject": "undo", "body": "undo it", "message_id": "<k@workrun>"}
    for name, sent in (("localhost", True), ("elsewhere.example", False)):
        crt, key = cert(name)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        monkeypatch.setenv("SSL_CERT_FILE", crt)  # what ssl.create_default_context() trusts
        with SmtpServer(starttls=ctx) as server:
            smtp = SmtpSpec.model_validate({"host": "localhost", "port": server.port, "starttls": True,
                                            "from": "workrun@example.com"})
            got = send_mail(mail, smtp, parse_allow([f"127.0.0.1:{server.port}"]))
            if sent:
                assert got.succeeded and got.failure is None, got
                assert [m["Subject"] for m in server.messages()] == ["undo"]
            else:
                assert not got.succeeded and got.failure == Failure.NOT_SENT and "not sent" in (got.error or ""), got
                assert server.messages() == []
