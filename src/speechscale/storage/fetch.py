"""One file over HTTP(S) for `data download` (and audio and model files behind a URL), held to what the catalog
says it is: bounded in size and time,
continued where an earlier try stopped (a Range request whose Content-Range is checked), retried where a retry can
help (a cut connection, a timeout after progress, 5xx and 429 with backoff and Retry-After), never past a 4xx,
redirected only to http(s) (and, when asked, only to the catalog's hosts). Every failure is one DownloadError line.
"""
from __future__ import annotations

import http.client
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import ConfigError

CHUNK = 1 << 16


class DownloadError(ConfigError):
    """A download, checksum or archive that failed (one line; what to do is in it)."""


@dataclass
class Policy:
    """How one file is fetched."""

    max_bytes: int = 0            # stop past this many bytes (0: no bound)
    timeout: float = 10.0         # seconds one read may wait
    deadline: float = 0.0         # seconds for the whole file, all tries (0: 120 s + 20 s a MB of max_bytes)
    attempts: int = 4
    backoff: float = 1.0          # the first wait before a retry of a 5xx or 429, doubled each time
    max_wait: float = 30.0        # the longest wait, Retry-After included
    hosts: tuple[str, ...] = ()   # redirects only to these hosts (empty: any http(s) host)
    bound_by: str = "the catalog allows for it"  # who set max_bytes, as a refusal says it
    resumable: bool = True        # a failure says that running the command again continues the part file

    def seconds(self) -> float:
        return self.deadline or 120.0 + 20.0 * self.max_bytes / (1 << 20)


class _Redirects(urllib.request.HTTPRedirectHandler):
    """http(s) only, at most 5 hops, confined to `hosts` when given."""

    max_redirections = 5

    def __init__(self, hosts: tuple[str, ...]) -> None:
        self.hosts = hosts

    def http_error_302(self, req: Any, fp: Any, code: int, msg: str, headers: Any) -> Any:
        newurl = urllib.parse.urljoin(req.full_url, headers.get("location") or headers.get("uri") or "")
        target = urllib.parse.urlsplit(newurl)
        if target.scheme not in ("http", "https"):
            raise DownloadError(f"{req.full_url}: redirected to {newurl[:80]!r}; only http(s) is followed")
        if self.hosts and target.hostname not in self.hosts:
            raise DownloadError(f"{req.full_url}: redirected to {target.hostname!r}, outside the corpus's hosts "
                                f"({', '.join(self.hosts)})")
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


def _length(headers: Any, url: str) -> int | None:
    value = headers.get("Content-Length")
    if value is None:
        return None
    if not value.strip().isdigit():
        raise DownloadError(f"{url}: the server's Content-Length {value[:40]!r} is not a number; refused")
    return int(value)


def _range_start(headers: Any) -> int | None:
    m = re.fullmatch(r"\s*bytes\s+(\d+)-\d+/(\d+|\*)\s*", headers.get("Content-Range") or "")
    return int(m.group(1)) if m else None


def _retry_after(headers: Any) -> float | None:
    value = (headers or {}).get("Retry-After", "")
    return float(value) if value.strip().isdigit() else None


def fetch(url: str, dest: Path, policy: Policy | None = None, progress: bool = True) -> int:
    """Download `url` to `dest` through DEST.part (continued from an earlier try); returns the bytes this call
    fetched. DownloadError, in one line, when it cannot."""
    from tqdm import tqdm

    policy = policy or Policy()
    opener = urllib.request.build_opener(_Redirects(policy.hosts))
    part = dest.with_name(dest.name + ".part")
    fetched, last, wait, stalls = 0, "", policy.backoff, 0
    ends = time.monotonic() + policy.seconds()
    for _ in range(policy.attempts):
        have = part.stat().st_size if part.exists() else 0
        if policy.max_bytes and have > policy.max_bytes:
            part.unlink()
            have = 0
        left = ends - time.monotonic()
        if left <= 0:
            break
        req = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
        before = fetched
        try:
            with opener.open(req, timeout=min(policy.timeout, left)) as resp:
                if have and resp.status == 206 and _range_start(resp.headers) != have:
                    part.unlink()  # the server sent another part than the one asked for: start over
                    last = f"its Content-Range {resp.headers.get('Content-Range')!r} did not start at byte {have}"
                    continue
                if have and resp.status != 206:  # the server sent the whole file: start over
                    have = 0
                length = _length(resp.headers, url)
                total = length + have if length is not None else None
                if policy.max_bytes and total is not None and total > policy.max_bytes:
                    part.unlink(missing_ok=True)
                    raise DownloadError(f"{url}: {total} bytes is over the {policy.max_bytes} {policy.bound_by}; "
                                        "refused")
                size = have
                with part.open("ab" if have else "wb") as f, \
                        tqdm(total=total, initial=have, unit="B", unit_scale=True, desc=dest.name,
                             disable=not (progress and sys.stderr.isatty()), leave=False) as bar:
                    while block := resp.read(CHUNK):
                        f.write(block)
                        fetched += len(block)
                        size += len(block)
                        bar.update(len(block))
                        if policy.max_bytes and size > policy.max_bytes:
                            f.close()
                            part.unlink()
                            raise DownloadError(f"{url}: the server sent more than the {policy.max_bytes} bytes "
                                                f"{policy.bound_by}; refused and removed")
                        if time.monotonic() > ends:
                            raise TimeoutError("the deadline passed")
                if total is not None and size < total:
                    raise ConnectionError(f"connection closed at {size} of {total} bytes")
            os.replace(part, dest)
            return fetched
        except urllib.error.HTTPError as e:
            if e.code == 416 and have:  # asked past the end: the part file is complete or stale
                part.unlink()
                continue
            if e.code == 429 or 500 <= e.code < 600:
                last = f"HTTP {e.code}"
                time.sleep(max(0.0, min(_retry_after(e.headers) or wait, policy.max_wait, ends - time.monotonic())))
                wait *= 2
                continue
            if 300 <= e.code < 400:
                raise DownloadError(f"{url}: more than {_Redirects.max_redirections} redirects (a loop?)") from None
            raise DownloadError(f"{url}: HTTP {e.code} {' '.join(str(e.reason).split())}") from None
        except (OSError, http.client.HTTPException) as e:  # URLError, a reset or cut connection, a timeout
            last = " ".join(str(getattr(e, "reason", None) or e or type(e).__name__).split())
            if fetched == before and (isinstance(e, TimeoutError) or "timed out" in last):
                stalls += 1  # nothing arrived: one more try, not four
                last = f"no data for {policy.timeout:g} s"
                if stalls >= 2:
                    break
    if not policy.resumable:
        raise DownloadError(f"{url}: could not be read ({last or 'no answer'}), {policy.attempts} tries")
    held = part.stat().st_size if part.exists() else 0
    raise DownloadError(f"{url}: download failed ({last or 'no answer'}) within {policy.seconds():g} s and "
                        f"{policy.attempts} tries; run the command again to continue from {held} bytes")
