"""Where checkpoints live: a local folder or any fsspec URL (s3://, gs://, memory://, file://).

Local writes are atomic by temp file + fsync + rename. An object store's PUT is atomic by itself
(the object appears whole or not at all), so remote writes go straight to their final name. Readers
never see a torn file from us; a torn file left by a crashed foreign writer fails to load and is passed
over by `checkpoint.newest_checkpoint`.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import fsspec

from ..config import ConfigError


def is_remote(url: str | Path) -> bool:
    """True for URLs with a protocol other than the local file system."""
    s = str(url)
    return "://" in s and not s.startswith("file://")


def join(base: str | Path, *names: str) -> str:
    """`base/names...` for local paths and URLs alike."""
    if is_remote(base):
        return "/".join([str(base).rstrip("/"), *names])
    return str(Path(base, *names))


def _fs(url: str | Path) -> tuple[Any, str]:
    return fsspec.core.url_to_fs(str(url))


def _local(url: str | Path) -> Path:
    return Path(str(url).removeprefix("file://"))


def _tmp(path: Path) -> Path:
    """The hidden temp name a local write goes through before its rename."""
    return path.with_name(f".{path.name}.tmp.{os.getpid()}")


def write_bytes(url: str | Path, data: bytes) -> None:
    """Write `data` to `url` atomically (see the module doc)."""
    if not is_remote(url):
        path = _local(url)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _tmp(path)
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:  # a full disk, a quota: leave no partial temp file behind
            tmp.unlink(missing_ok=True)
            raise
        return
    fs, path = _fs(url)
    fs.pipe_file(path, data)


@contextmanager
def written_whole(path: Path) -> Iterator[Path]:
    """A temp path beside local `path` for writers that take a path (torch.jit.save, onnxruntime's quantizer): on
    leaving the block it is synced and renamed onto `path`, or deleted when the block fails, so that `path` holds
    its old file or the whole new one, never a part."""
    tmp = _tmp(path)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk, an interrupt
        tmp.unlink(missing_ok=True)
        raise


def copy(src: str | Path, dst: str | Path) -> None:
    """Make `dst` a complete copy of `src` without sending the bytes again where possible: a hard link
    (then rename) on local disks, a server-side copy on object stores."""
    if not is_remote(dst):
        s_path, d_path = _local(src), _local(dst)
        tmp = _tmp(d_path)
        tmp.unlink(missing_ok=True)
        try:
            os.link(s_path, tmp)
        except OSError:  # no hard links on this file system
            write_bytes(dst, s_path.read_bytes())
            return
        os.replace(tmp, d_path)
        return
    fs, s_path = _fs(src)
    fs.copy(s_path, _fs(dst)[1])


def sweep_temp(folder: str | Path) -> list[str]:
    """Delete the temp files (`.NAME.tmp.PID`) that writes interrupted by a crash left in local `folder`;
    returns their names. Call it before anything writes there (e.g. at the start of a run)."""
    if is_remote(folder) or not Path(folder).is_dir():
        return []
    stale = sorted(p for p in Path(folder).glob(".*.tmp.*") if p.is_file())
    for p in stale:
        p.unlink(missing_ok=True)
    return [p.name for p in stale]


def read_bytes(url: str | Path) -> bytes:
    fs, path = _fs(url)
    return fs.cat_file(path)


def exists(url: str | Path) -> bool:
    fs, path = _fs(url)
    return fs.isfile(path)


def list_names(folder: str | Path, pattern: str) -> list[str]:
    """File names (not paths) in `folder` matching the glob `pattern`, sorted."""
    fs, path = _fs(folder)
    return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.glob(path.rstrip("/") + "/" + pattern))


def remove(url: str | Path) -> None:
    fs, path = _fs(url)
    if fs.isfile(path):
        fs.rm_file(path)


def check_writable(path: str | Path) -> None:
    """Raise OSError unless local folder `path` can be created and written; leaves nothing behind."""
    folder = _local(path)
    created = []
    for level in reversed([folder, *folder.parents]):  # create the missing levels, outermost first
        if not level.exists():
            level.mkdir()
            created.append(level)
    try:
        probe = _tmp(folder / ".write-probe")
        probe.write_bytes(b"")
        probe.unlink()
    finally:
        for level in reversed(created):
            try:
                level.rmdir()
            except OSError:  # another process is using it now: leave it
                pass


def text_lines(path: str | Path, strict: bool = True) -> Iterator[str]:
    """The lines of a local text file as they are read (line endings kept, a UTF-8 byte-order mark dropped);
    ConfigError in one line naming the file when it is binary (a NUL byte in its first 8 KiB) or, when `strict`,
    not UTF-8 (else undecodable bytes become U+FFFD)."""
    with open(path, "rb") as f:
        if b"\x00" in f.read(8192):
            raise ConfigError(f"{path}: not a text file (it holds NUL bytes)")
    try:
        with open(path, encoding="utf-8-sig", errors="strict" if strict else "replace", newline="") as f:
            yield from f
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text (line {_undecodable_line(path)}); convert it, e.g. iconv -f "
                          f"latin1 -t utf-8 {Path(path).name}") from None


def _undecodable_line(path: str | Path) -> int:
    """The number of the first line of `path` that is not UTF-8."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return n
    return 0
