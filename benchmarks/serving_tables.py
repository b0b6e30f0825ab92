"""The service's long benches in BENCHMARKS.md: the soak (`bench soak`) and the connection stacks side by side
(`bench stream --ws guarded,wsproto`); their blocks and their rows of the summary table."""
from __future__ import annotations

from pathlib import Path
from typing import Any

GOALS = {"rss_drift_under_50mb": "server memory drifts less than 50 MB from minute 5 (a sixth of a shorter run)",
         "p95_within_20pct": "stream p95 of the last 10 minutes within 20 % of the first 10 (thirds of a shorter run)",
         "every_well_formed_request_answered": "every well-formed transcription and stream answered",
         "no_slot_held_past_idle": "no stalled stream held past its idle limit",
         "every_hostile_act_refused_as_documented": "every hostile act answered as docs/usage.md's limits table says"}


def render_soak(res: dict[str, Any]) -> str:
    """The soak's goals and every fifth interval (the JSON has each)."""
    from .tables import _md

    s, lim = res["summary"], res["limits"]
    goals = [[GOALS.get(name, name), "reached" if ok else "**not reached**"] for name, ok in s["goals"].items()]
    step = max(1, round(5 * 60 / res["interval_s"]))
    rows = [[r["minute"], r["rss_mb"], r["stream_p50_ms"], r["stream_p95_ms"], r["http_p50_ms"], r["http_p95_ms"],
             r["stream_ok"], r["http_ok"], r["hostile"], r["unexpected_n"], r["open_streams"]]
            for i, r in enumerate(res["intervals"]) if i == 0 or (i + 1) % step == 0]
    return (f"`speechscale serve` (ds2-streaming-tiny, initial weights) for {res['minutes']:g} minutes on loopback, "
            f"at once: {res['streams']} real-time streams of real speech (100 ms chunks, each timed to its partial), "
            "an HTTP transcription of 2 s every 0.5 s, and one hostile act a second in turn (abandoned and stalled "
            "streams, ping floods, size bombs, undeclared compression, unmasked frames, bad and deep JSON, half-sent "
            f"headers, oversized and undecodable uploads); the server's limits: idle {lim['stream_idle_s']:g} s, send "
            f"timeout {lim['stream_send_timeout_s']:g} s, header timeout {lim['header_timeout_s']:g} s.\n\n"
            f"RSS from minute {s['rss_from_minute']:g} to the end: {s['rss_drift_mb']:+.1f} MB; stream p95 of the "
            f"first {s['p95_window_min']:g} minutes {s['stream_p95_first_ms']} ms, of the last {s['stream_p95_last_ms']}"
            f" ms ({s['p95_last_over_first']}x); well-formed requests: {s['http_ok']} HTTP and {s['stream_ok']} "
            f"streams answered, {s['http_failed'] + s['stream_failed']} not; hostile acts: {s['hostile']}, "
            f"{s['unexpected_n']} answered otherwise than documented.\n\n" + _md(["goal", "status"], goals) + "\n" +
            _md(["minute", "RSS MB", "stream p50 ms", "stream p95 ms", "HTTP p50 ms", "HTTP p95 ms", "streams",
                 "HTTP", "hostile", "unexpected", "open streams"], rows))


def render_stream_stacks(res: list[dict[str, Any]]) -> str:
    """Each stack's latency levels and memory run, then the guarded stack against wsproto."""
    from .tables import _md

    rows = [[r["ws"], lv["streams"], f"{lv['p50_ms']:,.0f}", f"{lv['p95_ms']:,.0f}", f"{lv['max_ms']:,.0f}",
             lv["rtf_cpu"], lv["failed_streams"], (lv["refused"] or {}).get("code", "-")]
            for r in res for lv in r["levels"]]
    by = {r["ws"]: r for r in res}
    lines = []
    if {"guarded", "wsproto"} <= set(by):
        for g, w in zip(by["guarded"]["levels"], by["wsproto"]["levels"]):
            lines.append(f"{g['streams']} streams: p95 {g['p95_ms']:,.0f} against {w['p95_ms']:,.0f} ms "
                         f"({g['p95_ms'] / w['p95_ms']:.2f}x), CPU per audio s {g['rtf_cpu']} against {w['rtf_cpu']} "
                         f"({g['rtf_cpu'] / w['rtf_cpu']:.2f}x; real-time streams a core keeps: "
                         f"{1 / g['rtf_cpu']:.0f} against {1 / w['rtf_cpu']:.0f})")
        gm, wm = by["guarded"].get("memory"), by["wsproto"].get("memory")
        if gm and wm:
            lines.append(f"server memory over {gm['streams']} streams: {gm['growth_mb']:+.1f} against "
                         f"{wm['growth_mb']:+.1f} MB")
    return ("`bench stream` on each connection stack of `serve --ws`, one after the other in one run: *guarded* "
            "(uvicorn's h11 and websockets sans-I/O protocols with service/transport.py's limits) and *wsproto* "
            "(uvicorn's wsproto, the stack before). Real speech in real time in 100 ms chunks; latency is chunk to "
            "answer.\n\n" + _md(["stack", "streams", "p50 ms", "p95 ms", "max ms", "CPU/audio s", "failed streams",
                                 "one more stream"], rows) + "\n" + "".join(f"- guarded against wsproto, {x}\n"
                                                                           for x in lines))


RENDERERS = {"soak": render_soak, "stream-stacks": render_stream_stacks}


def serving_rows(figures: Path) -> list[dict[str, Any]]:
    """The summary table's rows of the soak and the stack comparison (section `inference`)."""
    from .summary_rows import _load, _row, _status

    rows, bench = [], figures / "bench-all"
    soak = _load(bench / "soak.json")
    if soak and "summary" in soak["results"]:
        s, p, src = soak["results"]["summary"], soak["provenance"], "bench-all/soak.json"
        minutes = soak["results"]["minutes"]
        rows.append(_row("inference", f"service soak, {minutes:g} min under honest and hostile load: RSS drift",
                         f"{s['rss_drift_mb']:+.1f} MB from minute {s['rss_from_minute']:g}", "< 50 MB",
                         _status(s["goals"]["rss_drift_under_50mb"]), p, src))
        rows.append(_row("inference", "service soak: stream p95, last window against the first",
                         f"{s['stream_p95_last_ms']} against {s['stream_p95_first_ms']} ms "
                         f"({s['p95_last_over_first']}x)", "≤ 1.2x", _status(s["goals"]["p95_within_20pct"]), p, src))
        rows.append(_row("inference", "service soak: well-formed requests answered, hostile acts refused as documented",
                         f"{s['http_ok']} + {s['stream_ok']} answered, {s['http_failed'] + s['stream_failed']} not; "
                         f"{s['hostile'] - s['unexpected_n']} of {s['hostile']} hostile acts",
                         "all; all", _status(s["goals"]["every_well_formed_request_answered"]
                                             and s["goals"]["every_hostile_act_refused_as_documented"]
                                             and s["goals"]["no_slot_held_past_idle"]), p, src))
    stacks = _load(bench / "stream-stacks.json")
    if stacks and isinstance(stacks["results"], list):
        by = {r["ws"]: r for r in stacks["results"]}
        if {"guarded", "wsproto"} <= set(by):
            g, w = by["guarded"]["levels"][-1], by["wsproto"]["levels"][-1]
            ratio = g["p95_ms"] / w["p95_ms"]
            rows.append(_row("inference", f"guarded connection stack against wsproto, {g['streams']} live streams",
                             f"p95 {g['p95_ms']:,.0f} against {w['p95_ms']:,.0f} ms ({ratio:.2f}x), CPU/audio s "
                             f"{g['rtf_cpu']} against {w['rtf_cpu']}", "no worse (≤ 1.2x, noise)",
                             _status(ratio <= 1.2 and g["rtf_cpu"] <= 1.2 * w["rtf_cpu"], f"{ratio:.2f}x"),
                             stacks["provenance"], "bench-all/stream-stacks.json"))
    return rows
