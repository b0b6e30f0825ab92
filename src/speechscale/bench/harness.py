"""The timing harness every bench uses: warm-up, the compared variants interleaved inside one run (in a
rotating order, so none always runs first or last), medians with the spread, and provenance (machine,
date, commit, command) on every result written.

    stats = interleave({"fp32": step_fp32, "bf16": step_bf16}, repeats=5, warmup=2)
    stats["bf16"].median, stats["bf16"].spread

Variants that cannot share a run (process counts that would share the cores) are timed one after
another and summarized with `summarize`, which gives them the same statistics.
"""
from __future__ import annotations

import datetime as dt
import functools
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable


@dataclass
class Stats:
    """Seconds per call of one variant: median, the 10th-90th percentile range, and every sample."""

    median: float
    p10: float
    p90: float
    samples: list[float]
    extra: list[Any]  # what each timed call returned (e.g. phase times)

    @property
    def n(self) -> int:
        """How many calls were timed."""
        return len(self.samples)

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: the relative spread of the samples."""
        return (self.p90 - self.p10) / self.median if self.median else 0.0

    def at_median(self) -> list[Any]:
        """What the median call(s) returned: one sample for an odd count, the two middle ones for an even
        count (the median is their mean), so a breakdown taken from them adds up to the median."""
        order = sorted(range(self.n), key=self.samples.__getitem__)
        mid = {order[(self.n - 1) // 2], order[self.n // 2]}
        return [self.extra[i] for i in sorted(mid)]

    def brief(self, scale: float = 1000.0, digits: int = 1) -> dict[str, float]:
        """median/p10/p90 scaled (default: milliseconds), for JSON."""
        return {"median": round(self.median * scale, digits), "p10": round(self.p10 * scale, digits),
                "p90": round(self.p90 * scale, digits), "n": self.n}


def _quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    pos = q * (len(s) - 1)
    lo = int(pos)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (pos - lo)


def summarize(samples: list[float], extra: list[Any] | None = None) -> Stats:
    """Statistics of timed samples (seconds)."""
    if not samples:
        raise ValueError("no samples to summarize")
    return Stats(statistics.median(samples), _quantile(samples, 0.1), _quantile(samples, 0.9), list(samples), list(extra or []))


def keeps_torch_threads(bench: Callable[..., Any]) -> Callable[..., Any]:
    """A bench that sets torch's intra-op threads for its run leaves its caller's as they were."""
    @functools.wraps(bench)
    def run(*args: Any, **kwargs: Any) -> Any:
        import torch

        threads = torch.get_num_threads()
        try:
            return bench(*args, **kwargs)
        finally:
            torch.set_num_threads(threads)
    return run


def interleave(variants: dict[str, Callable[[], Any]], repeats: int, warmup: int = 1,
               sync: Callable[[], None] | None = None) -> dict[str, Stats]:
    """Call every variant `warmup` times untimed, then `repeats` timed rounds; round r starts at variant
    r mod k, so the order rotates. `sync` runs before each clock read (e.g. cuda.synchronize)."""
    names = list(variants)
    times: dict[str, list[float]] = {n: [] for n in names}
    extra: dict[str, list[Any]] = {n: [] for n in names}
    for r in range(warmup + repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            if sync:
                sync()
            t0 = time.perf_counter()
            out = variants[name]()
            if sync:
                sync()
            if r >= warmup:
                times[name].append(time.perf_counter() - t0)
                extra[name].append(out)
    return {n: summarize(times[n], extra[n]) for n in names}


def run_cli(args: list[str], timeout: float | None = 3600, launcher: list[str] | None = None,
            env: dict[str, str] | None = None) -> str:
    """Run `speechscale -q ARGS` in a fresh process (under `launcher`, e.g. torchrun's flags, when given) and
    return its stdout; RuntimeError with the last error lines of its stderr when it fails."""
    prefix = [*launcher, "-m"] if launcher else []  # python -m torch.distributed.run FLAGS -m speechscale.cli
    cmd = [sys.executable, "-m", *prefix, "speechscale.cli", "-q", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})})
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        errors = [x for x in lines if "Error" in x and "elastic" not in x and "ChildFailed" not in x]
        detail = "; ".join(errors[-3:] or lines[-1:]) or f"exit {proc.returncode}"
        raise RuntimeError(f"speechscale {args[0]} failed ({proc.returncode}): {detail}")
    return proc.stdout


def _cpu_model() -> str:
    """The CPU's model name and its widest vector extension: the same seed trains bit-exactly on one machine,
    but CPUs whose kernels differ (AVX2, AVX-512) round differently and their runs diverge from the first epoch."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in info.splitlines())}
    model, flags = fields.get("model name", platform.machine()), set(fields.get("flags", "").split())
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else ""
    return f"{model} ({isa})" if isa else model


def _commit() -> str:
    """The commit the figures come from: $SPEECHSCALE_COMMIT when the caller knows it (a launcher, or a checkout's
    own tooling that decides what counts as a change), else the git HEAD of the folder the bench runs in, with
    "+changes" when tracked files differ from it; "unknown" outside a repository."""
    return os.environ.get("SPEECHSCALE_COMMIT") or git_commit()


def git_commit(folder: str | Path | None = None, ignore: tuple[str, ...] = ()) -> str:
    """HEAD of the repository at `folder` (default: the current one), 10 hex digits, "+changes" when tracked files
    other than the `ignore` paths differ from it; "unknown" outside a repository."""
    pathspec = ["--", ".", *(f":!{p}" for p in ignore)] if ignore else []
    try:
        head = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=folder, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", *pathspec], cwd=folder,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        head, dirty = "", ""
    if not head:
        return "unknown"
    return head + ("+changes" if dirty else "")


def _command_line() -> list[str]:
    """This process's command as a user typed it: `python -m PACKAGE ...` for a package's __main__, else
    `speechscale ...`."""
    argv0 = Path(sys.argv[0])
    prog = ["python", "-m", argv0.parent.name] if argv0.name == "__main__.py" else ["speechscale"]
    return [*prog, *sys.argv[1:]]


def provenance(command: list[str] | None = None) -> dict[str, Any]:
    """Where and when a figure was measured, from which code, by which command."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"machine": f"{os.cpu_count()} cores, {_cpu_model()}" + (f", {gpu}" if gpu else ""),
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": _commit(),
            "torch": torch.__version__, "python": platform.python_version(),
            "command": shlex.join(command if command is not None else _command_line())}


def write_json(path: Path, results: Any, command: list[str] | None = None, seconds: float | None = None,
               settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write {provenance, settings, seconds, results} to `path`; returns it."""
    doc = {"provenance": provenance(command), "settings": settings or {}, "seconds": seconds, "results": results}
    path.write_text(json.dumps(doc, indent=2, default=lambda o: asdict(o) if hasattr(o, "__dataclass_fields__")
                               else str(o)) + "\n")
    return doc
