"""`speechscale recipes`: the recipes shipped in the package, and one of them printed to copy.

    speechscale recipes
    speechscale recipes show yesno > my_yesno.yaml
    speechscale train --config yesno data.root=data/yesno
"""
from __future__ import annotations

import argparse
import json
from typing import Any, Callable


def catalog() -> dict[str, dict[str, Any]]:
    """Each built-in recipe's entry of recipes/_index.yaml (about, model, data, result, minutes), by name."""
    import yaml

    from ..config import RECIPES, builtin_recipes

    index = yaml.safe_load((RECIPES / "_index.yaml").read_text()) or {}
    return {name: index.get(name) or {} for name in builtin_recipes()}


def _result(entry: dict[str, Any]) -> str:
    r = entry.get("result")
    if not r:
        return "not measured"
    seeds = f", {r['seeds']} seed" + ("s" if r["seeds"] != 1 else "")
    verdict = "reached" if r["reached"] else "not reached"
    if "wer_range" in r:  # over seeds: the median, its range, and how many seeds reached the goal
        lo, hi = r["wer_range"]
        verdict = f"{verdict} on every seed" if r["reached"] else f"reached on {r['seeds_reached']} of {r['seeds']} seeds"
        return (f"WER {100 * r['wer']:.1f} % ({100 * lo:.1f}-{100 * hi:.1f}), CER {100 * r['cer']:.1f} %, medians "
                f"over {r['seeds']} seeds (goal {r['goal']}: {verdict})")
    return f"WER {100 * r['wer']:.1f} %, CER {100 * r['cer']:.1f} % (goal {r['goal']}: {verdict}{seeds})"


def _minutes(entry: dict[str, Any]) -> str:
    m = entry.get("minutes")
    return f"{m['cpu']:g} min on {m['where']}" if m else "-"


def _gives(entry: dict[str, Any]) -> str:
    """What a recipe gave when it was last trained to its end: the scores on its held-out data (the median and range
    over seeds where it ran on several), without the goal it was measured against (BENCHMARKS.md has those)."""
    r = entry.get("result")
    if not r:
        return "not trained here"
    if "wer_range" in r:
        lo, hi = r["wer_range"]
        return (f"WER {100 * r['wer']:.1f} % (from {100 * lo:.1f} to {100 * hi:.1f} over {r['seeds']} seeds), "
                f"CER {100 * r['cer']:.1f} %")
    return f"WER {100 * r['wer']:.1f} %, CER {100 * r['cer']:.1f} %"


def markdown_table() -> str:
    """The catalog as the README's recipes table: what each recipe gives, its results linked (a test keeps the
    README's copy equal to it)."""
    rows = ["| recipe | model | what | it gives, on its held-out data | training time |", "|---|---|---|---|---|"]
    for name, e in catalog().items():
        rows.append(f"| `{name}` | {e.get('model', '?')} | {e.get('about', '')} | {_gives(e)} | {_minutes(e)} |")
    return "\n".join(rows) + "\n\nHow each was measured, against which goal, over which seeds: " \
        "[BENCHMARKS.md](BENCHMARKS.md#accuracy-recipes-trained-to-their-end).\n"


def recipes(args: argparse.Namespace) -> int:
    from ..config import recipe_path

    if args.action == "show":
        print(recipe_path(args.name).read_text(), end="")
        return 0
    entries = catalog()
    if args.json:
        print(json.dumps(entries, indent=1))
        return 0
    width = max(map(len, entries))
    for name, e in entries.items():
        print(f"{name:<{width}}  {e.get('model', '?'):<14} {e.get('about', '')}")
        print(f"{'':<{width}}  {'':<14} result: {_result(e)}; training: {_minutes(e)}")
        print(f"{'':<{width}}  {'':<14} data: {e.get('data', '-')}")
    print("\nspeechscale recipes show NAME prints one; speechscale train --config NAME data.root=DIR trains it.")
    return 0


def register(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add `recipes` to the subcommand table."""
    r = command(sub, "recipes", "list the built-in recipes (train one with --config NAME), or show one")
    r.add_argument("action", nargs="?", choices=["list", "show"], default="list", help="list (default) or show NAME")
    r.add_argument("name", nargs="?", default=None, help="the recipe to show")
    r.add_argument("--json", action="store_true", help="the catalog as JSON")
    r.set_defaults(func=_checked)


def _checked(args: argparse.Namespace) -> int:
    from ..config import ConfigError

    if args.action == "show" and not args.name:
        raise ConfigError("recipes show needs a NAME (speechscale recipes lists them)")
    return recipes(args)
