"""Redaction of secrets in every form R-X2 lists (SPEC §18), as property tests over made-up secrets."""

from __future__ import annotations

import base64
import json
import urllib.parse

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from workrun.core.redact import redact, redact_value

# secrets as environment variables hold them: printable, no NUL, at least 6 characters
SECRETS = st.text(st.characters(min_codepoint=32, max_codepoint=0x1FFFF, exclude_categories=("Cs",)),
                  min_size=6, max_size=40)
AROUND = st.text(st.sampled_from("ab :{}\"'=,"), max_size=8)


def _json_any(secret: str, pick: list[bool]) -> str:
    """``secret`` JSON-escaped, each character as itself or as ``\\uXXXX`` as ``pick`` says."""
    out = []
    for i, c in enumerate(secret):
        if pick[i % len(pick)] or c in '"\\' or ord(c) < 32:
            out.append(json.dumps(c, ensure_ascii=True)[1:-1] if ord(c) > 0xFFFF else f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return "".join(out)


@settings(max_examples=150, deadline=None)
@given(SECRETS, AROUND, AROUND, st.lists(st.booleans(), min_size=1, max_size=5), st.integers(0, 2))
def test_every_form_of_a_secret_is_redacted(secret, before, after, pick, pad):
    raw = secret.encode()
    forms = {
        "as is": secret,
        "json ensure_ascii": json.dumps(secret)[1:-1],
        "json escaped": json.dumps(secret, ensure_ascii=True)[1:-1],
        "json mixed": _json_any(secret, pick),
        "json slash": json.dumps(secret)[1:-1].replace("/", "\\/"),
        "percent upper": urllib.parse.quote(secret, safe=""),
        "percent lower": "".join(f"%{b:02x}" for b in raw),
        "base64": base64.b64encode(b"x" * pad + raw).decode(),
        "base64 url": base64.urlsafe_b64encode(b"y" * pad + raw).decode().rstrip("="),
    }
    for name, form in forms.items():
        text = before + form + after
        got = redact(text, {"TOKEN": secret})
        assert form not in got, (name, text, got)
        assert "{{ env.TOKEN }}" in got, name
        if name.startswith("base64"):
            assert base64.b64encode(raw).decode()[:-4] not in got or len(raw) < 6


def test_names_are_kept_and_nothing_else_changes():
    secrets = {"A": "alpha-1234", "B": "beta/5678"}
    value = {"k": ["alpha-1234 and beta\\/5678", 3, None], "alpha-1234": "x"}
    assert redact_value(value, secrets) == {"k": ["{{ env.A }} and {{ env.B }}", 3, None], "{{ env.A }}": "x"}
    assert redact("nothing here", secrets) == "nothing here"
    assert redact_value("x", {}) == "x"


def test_a_value_too_short_to_be_a_secret_is_not_redacted():
    """A one- to three-character value would match ordinary text: answers stay intact (R-X2's replacement would
    otherwise rewrite every answer and break the templates that read it)."""
    assert redact('{"content-type": "t"}', {"T": "t"}) == '{"content-type": "t"}'
    assert redact("a tok1 b", {"T": "tok1"}) == "a {{ env.T }} b"


@settings(max_examples=150, deadline=None)
@given(SECRETS, AROUND, AROUND, st.booleans(), st.booleans())
def test_a_secret_encoded_alone_in_base64_leaves_no_tail(secret, before, after, url, padded):
    """Conformance review: ``b64=czNjci90Kz94fj4=`` came back as ``b64={{ env.SEC }}4=``: the characters that
    hold padding bits were left. The whole encoding goes, with or without padding, standard or URL-safe."""
    assume(secret not in before + after and not after.startswith("="))  # "=" after it would be its padding
    form = (base64.urlsafe_b64encode if url else base64.b64encode)(secret.encode()).decode()
    form = form if padded else form.rstrip("=")
    got = redact(before + form + after, {"SEC": secret})
    assert got == before + "{{ env.SEC }}" + after, (form, got)


def test_a_remembered_secret_is_redacted_whichever_request_read_it(monkeypatch):
    """R-X2 across requests (secrets review): what :func:`remember` was told of is redacted by every later
    ``redact``; :func:`remember_declared` tells it every ``{{ env.NAME }}`` a run's spec writes that is set."""
    from workrun.core import redact as r
    from workrun.outbound.http import remember_declared

    monkeypatch.setattr(r, "_KNOWN", {})
    assert r.redact_value({"a": "x Zq-secret-1 y"}, {}) == {"a": "x Zq-secret-1 y"}
    spec = {"nodes": {"a": {"headers": {"Authorization": "Bearer {{ env.ZQ_TOKEN }}"}}},
            "smtp": {"password": "{{env.ZQ_MAIL}}"}, "note": "{{ env.UNSET_ONE }}",
            "inputs": {"where": "{{ env.ZQ_HOME }}"}}  # data, never read: no secret (diff review)
    remember_declared(spec, {"ZQ_TOKEN": "Zq-secret-1", "ZQ_MAIL": "mail-pw-22", "OTHER": "not-declared",
                             "ZQ_HOME": "/root"})
    assert r.known() == {"ZQ_TOKEN": "Zq-secret-1", "ZQ_MAIL": "mail-pw-22"}
    assert r.redact_value({"a": "x Zq-secret-1 y", "b": ["mail-pw-22"]}, {}) == \
        {"a": "x {{ env.ZQ_TOKEN }} y", "b": ["{{ env.ZQ_MAIL }}"]}
    assert r.redact("not-declared", {}) == "not-declared"
    r.remember({"PIN": "123"})  # too short to redact (MIN_SECRET)
    assert "PIN" not in r.known()
    r.remember({"ZQ_TOKEN": "Zq-secret-2"})  # rotated: the old value stays redacted too
    assert r.redact("Zq-secret-1 Zq-secret-2", {}) == "{{ env.ZQ_TOKEN }} {{ env.ZQ_TOKEN }}"
    r.forget_all()
    assert r.redact("Zq-secret-1", {}) == "Zq-secret-1"


def test_an_smtp_reply_is_redacted_before_it_is_joined_or_cut():
    """Secrets review: a reply that quotes the password with two spaces in it, or past 300 characters, keeps no
    piece of it (it was put on one line and cut first, then redacted)."""
    from workrun.outbound.mail import _said

    secrets = {"SMTP_PASSWORD": "correct  horse  battery"}
    assert _said(b"250 ok, you said: correct  horse  battery", secrets) == \
        "250 ok, you said: {{ env.SMTP_PASSWORD }}"
    long = "250 " + "x" * 290 + " correct  horse  battery"
    assert "corr" not in _said(long, secrets) and len(_said(long, secrets)) <= 300
