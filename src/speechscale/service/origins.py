"""Who may talk to the service: the Host names it answers (DNS rebinding) and the origins it takes requests from,
one set of rules for the HTTP routes and the WebSocket stream."""
from __future__ import annotations

from urllib.parse import urlsplit

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def allowed_hosts(bound: str, extra: list[str]) -> list[str]:
    """Host names a request may carry: loopback, the bound address (unless it is a wildcard) and `extra`."""
    hosts = [*LOCAL_HOSTS, *extra]
    if bound not in ("0.0.0.0", "::", ""):
        hosts.append(bound)
    return list(dict.fromkeys(hosts))


def host_name(header: str) -> str:
    """The name in a Host header without its port: 'asr.example:8000' -> 'asr.example', '[::1]:80' -> '[::1]'."""
    if header.startswith("["):
        return header[: header.find("]") + 1]
    return header.split(":", 1)[0]


def host_allowed(hosts: list[str], header: str | None) -> bool:
    """Whether a request's Host header names this service ('*' in `hosts` allows any)."""
    return "*" in hosts or host_name(header or "") in hosts


def origin_allowed(hosts: list[str], origin: str | None) -> bool:
    """Whether a request's Origin (absent: not a browser's cross-origin request) is one of `hosts`."""
    return origin is None or "*" in hosts or (urlsplit(origin).hostname or "") in hosts
