"""The HTTP guard's decisions and the redaction of passwords, table-driven."""

from __future__ import annotations

import pytest

from tasklab.edges.http.guard import cross_origin_refusal, host_allowed, host_name
from tasklab.redact import redact


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("127.0.0.1:8000", "127.0.0.1"),
        ("[::1]:8000", "::1"),
        ("::1", "::1"),
        ("LocalHost:8000", "localhost"),
        ("evil.example", "evil.example"),
    ],
)
def test_host_name(header, name):
    assert host_name(header) == name


@pytest.mark.parametrize(
    ("header", "allowed", "ok"),
    [
        ("127.0.0.1:8000", (), True),
        ("[::1]:8000", (), True),
        ("10.1.2.3", (), True),  # an IP literal cannot be rebound
        ("localhost:8000", (), True),
        ("evil.example", (), False),  # DNS rebinding
        ("evil.example:8000", (), False),
        ("tasks.internal:8000", ("tasks.internal",), True),
        ("anything", ("*",), True),
        (None, (), True),  # HTTP/1.0 without Host: not a browser
    ],
)
def test_host_allowed(header, allowed, ok):
    assert host_allowed(header, frozenset(allowed)) is ok


@pytest.mark.parametrize(
    ("method", "origin", "site", "host", "allowed", "refused"),
    [
        ("GET", "https://evil.example", "cross-site", "127.0.0.1:8000", (), False),
        ("POST", None, None, "127.0.0.1:8000", (), False),  # curl, httpx
        ("POST", "http://127.0.0.1:8000", "same-origin", "127.0.0.1:8000", (), False),
        ("POST", "https://evil.example", "cross-site", "127.0.0.1:8000", (), True),
        ("POST", "http://localhost:3000", "same-site", "localhost:8000", (), True),
        ("POST", "null", None, "127.0.0.1:8000", (), True),
        ("POST", None, "cross-site", "127.0.0.1:8000", (), True),
        ("POST", None, "none", "127.0.0.1:8000", (), False),  # typed by the user
        ("PUT", "https://app.example", "cross-site", "h:1", ("https://app.example",), False),
        ("DELETE", "https://other.example", None, "h:1", ("https://app.example",), True),
    ],
)
def test_cross_origin_refusal(method, origin, site, host, allowed, refused):
    why = cross_origin_refusal(method, origin, site, host, frozenset(allowed))
    assert (why is not None) is refused


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql://u:hunter2@db:5432/x", "postgresql://u:***@db:5432/x"),
        ("at postgresql://u:p%40ss@db/x: refused", "at postgresql://u:***@db/x: refused"),
        ("postgresql://u@db/x", "postgresql://u@db/x"),
        ("sqlite:////tmp/a:b.db", "sqlite:////tmp/a:b.db"),
        ("host=db password=hunter2 user=u", "host=db password=*** user=u"),
        ("password='two words' x", "password=*** x"),
        ("https://hook:tok@example.com/h", "https://hook:***@example.com/h"),
    ],
)
def test_redact(text, shown):
    assert redact(text) == shown
    assert "hunter2" not in redact(text)
