"""The LOSO tables of BENCHMARKS.md (`bench fsdd-loso`), rendered from docs/figures/loso/*.json: one row per
result, the mean over seeds per recipe, re-scored results before and after, and speaker CMVN without the
speaker's statistics."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from .tables import _md, _provenance, read_block


def render_loso(docs: dict[str, dict[str, Any]]) -> str:
    """The LOSO table: per recipe (JSON stem), each held-out speaker's WER greedy / lexicon, mean and worst,
    against the goals; then one provenance line per recipe."""
    from .loso import GOALS, SPEAKERS

    head = ["recipe", *SPEAKERS, "mean greedy", "mean lexicon", "worst greedy", "goal (mean ≤ 5 % / ≤ 2 %)"]
    rows, notes = [], []
    for name, doc in sorted(docs.items()):
        res = doc["results"]
        folds = {f["held_out"]: f for f in res["folds"]}
        dag = "" if _end_boundary(res) else "†"
        cells = [f"{100 * folds[s]['wer_greedy']:.1f} / {100 * folds[s]['wer_lexicon']:.1f}{dag} %" if s in folds
                 else "-" for s in SPEAKERS]
        summ = res.get("summary")
        if summ:
            g, lx = summ["greedy"], summ["lexicon"]
            goal = "; ".join(f"{d}: " + ("reached" if summ[d]["reached"] else
                                          f"**not reached** (gap {100 * (summ[d]['mean_wer'] - GOALS[d]):.1f} points)")
                             for d in ("greedy", "lexicon"))
            rows.append([f"`{name}`", *cells, f"{100 * g['mean_wer']:.1f} %", f"{100 * lx['mean_wer']:.1f}{dag} %",
                         f"{100 * g['worst_wer']:.1f} % ({g['worst_speaker']})", goal])
        else:
            rows.append([f"`{name}`", *cells, "-", "-", "-", "incomplete: not every fold ran"])
        ov = " ".join(res["overrides"])
        extra = f", also trained on `{res['extra_train']}`" if res.get("extra_train") else ""
        again = doc.get("rescored")
        rescored = (f"; scored again from the same `last.pt` files at {again['commit']} ({again['date']}), earlier "
                    "figures kept in the JSON" if again else "")
        ad = doc.get("adapted")
        adapted = (f"; adapted to the held-out speaker (`--adapt`, table below) at {ad['commit']} ({ad['date']})"
                   if ad else "")
        notes.append(f"- `{name}`: `{res['config']}`{f' with `{ov}`' if ov else ''}{extra}; "
                     f"{_provenance(doc).strip().strip('_')}{rescored}{adapted}")
    dagger = ("\n† lexicon scored before the search took the utterance's end as a word boundary (17cb4e7): it "
              "needed a space after the word, which these single-word models never emit, and so dropped or "
              "replaced words (see the measured effect below the table).\n"
              if any(not _end_boundary(d["results"]) for d in docs.values()) else "")
    return (_md(head, rows) + "\nEach cell: WER greedy / with the training speakers' lexicon, `last.pt` of the "
            "fold that never heard that speaker.\n" + dagger + "\n" + "\n".join(notes) + "\n\n"
            + render_loso_seeds(docs) + render_loso_rescored(docs) + render_loso_alone(docs)
            + render_loso_averaged(docs) + render_loso_ema(docs) + render_loso_adapted(docs))


def _paired(folds: dict[str, dict[str, Any]], pair: Callable[[dict[str, Any]], tuple[float, float]],
            sep: str) -> list[str]:
    """Cells "a SEP b" (WER %) for each speaker's fold in `folds` ("-" where none), then the two means."""
    from .loso import SPEAKERS

    pairs = {s: pair(f) for s, f in folds.items()}
    means = [sum(p[i] for p in pairs.values()) / len(pairs) for i in (0, 1)]
    return [f"{100 * pairs[s][0]:.1f} {sep} {100 * pairs[s][1]:.1f}" if s in pairs else "-" for s in SPEAKERS] + [
        f"{100 * means[0]:.1f} {sep} {100 * means[1]:.1f}"]


def _alone(fold: dict[str, Any], prior: bool) -> float | None:
    """A speaker-CMVN fold's greedy WER with each file alone: its own statistics, or shrunk toward the training
    speakers' (`prior`); None where not scored. A re-score that added the prior keeps the own figure in `before`."""
    before = fold.get("before", {})
    if prior:
        return fold["wer_greedy_no_speaker"] if "no_speaker_prior" in fold else None
    if "no_speaker_prior" not in fold:
        return fold.get("wer_greedy_no_speaker")
    return before.get("wer_greedy_no_speaker") if "no_speaker_prior" not in before else None


def render_loso_alone(docs: dict[str, dict[str, Any]]) -> str:
    """Speaker-CMVN results scored with and without the held-out speaker's statistics (greedy): each file on
    its own statistics alone, and shrunk toward the training speakers' (features.speaker_prior)."""
    rows = []
    for name, doc in sorted(docs.items()):
        for prior, label in ((False, "its own"), (True, "its own + training speakers' (400 frames)")):
            folds = {f["held_out"]: f for f in doc["results"]["folds"] if _alone(f, prior) is not None}
            if folds:
                rows.append([f"`{name}`", label,
                             *_paired(folds, lambda f, p=prior: (f["wer_greedy"], _alone(f, p)), "/")])
    return _speaker_table("Speaker CMVN with / without the held-out speaker's statistics (greedy WER %; without: "
                          "each file normalized as `transcribe` and `serve` see a single file, on its own statistics, "
                          "or on them pooled with the training speakers' saved in the checkpoint, "
                          "`features.speaker_prior`):", "a file alone uses", rows)


def _beside_last(docs: dict[str, dict[str, Any]], key: str, setting: str, head: str, caption: str) -> str:
    """A table of results whose folds also scored other weights greedily (fold field `key`), beside `last.pt`:
    per result its `setting` (fold field, column `head`), each speaker's "last.pt / other" and the means."""
    rows = []
    for name, doc in sorted(docs.items()):
        folds = {f["held_out"]: f for f in doc["results"]["folds"] if key in f}
        if folds:
            rows.append([f"`{name}`", "/".join(map(str, sorted({f[setting] for f in folds.values()}))),
                         *_paired(folds, lambda f: (f["wer_greedy"], f[key]), "/")])
    return _speaker_table(f"{caption} (greedy WER %):", head, rows)


def render_loso_averaged(docs: dict[str, dict[str, Any]]) -> str:
    """Results whose folds also scored the average of their last epoch checkpoints (greedy)."""
    return _beside_last(docs, "wer_greedy_average", "average_of", "N", "`last.pt` / the average of the fold's "
                        "last N epoch checkpoints, `speechscale average --last N`")


def render_loso_ema(docs: dict[str, dict[str, Any]]) -> str:
    """Results trained with trainer.ema_decay whose folds also scored the EMA weights (greedy)."""
    return _beside_last(docs, "wer_greedy_ema", "ema_decay", "decay", "`last.pt` / its EMA weights "
                        "of `trainer.ema_decay`, written out by `speechscale average --ema`")


def render_loso_adapted(docs: dict[str, dict[str, Any]]) -> str:
    """Results whose folds were adapted to their held-out speaker (`bench fsdd-loso --adapt`): per speaker
    "before → adapted", greedy and lexicon, over the same two halves of the speaker's clips."""
    rows = []
    for name, doc in sorted(docs.items()):
        folds = {f["held_out"]: f for f in doc["results"]["folds"] if "wer_greedy_adapted" in f}
        for dec in ("greedy", "lexicon") if folds else ():
            rows.append([f"`{name}`", dec, *_paired(folds, lambda f, d=dec: (f[f"wer_{d}_adapt_before"],
                                                                           f[f"wer_{d}_adapted"]), "→")])
    return _speaker_table("Unsupervised speaker adaptation (`bench fsdd-loso --adapt`): `last.pt` labels half of the "
                          "held-out speaker's clips itself (lexicon search), is fine-tuned on them beside its training "
                          "data, and scores the other half; then the halves swap. WER % before → after, over the same "
                          "halves:", "decoder", rows)


def render_loso_rescored(docs: dict[str, dict[str, Any]]) -> str:
    """Results scored again from their checkpoints (`--rescore`): each fold's figures before and after."""
    rows = []
    for name, doc in sorted(docs.items()):
        folds = {f["held_out"]: f for f in doc["results"]["folds"] if "before" in f}
        for d in ("lexicon", "greedy") if folds else ():
            key = f"wer_{d}"
            rows.append([f"`{name}`", d, *_paired(folds, lambda f, k=key: (f["before"][k], f[k]), "→")])
    return _speaker_table("Scored again from the same `last.pt` files (`bench fsdd-loso --rescore`), WER % before → "
                          "after; greedy is the control (the same model and decoder must give the same figure):",
                          "decoder", rows)


def _speaker_table(intro: str, head: str, rows: list[list[str]]) -> str:
    """A side table under `intro`: per row a result, its `head` column, each held-out speaker and the mean;
    "" without rows."""
    from .loso import SPEAKERS

    return f"\n{intro}\n\n" + _md(["result", head, *SPEAKERS, "mean"], rows) if rows else ""


def _end_boundary(res: dict[str, Any]) -> bool:
    """Whether a LOSO result's lexicon figures come from the search that ends a word at the utterance's end."""
    from .loso import END_BOUNDARY

    return bool(res.get(END_BOUNDARY))


# overrides that change how a run is executed or which seed it draws, not what it trains
_NOT_RECIPE = ("trainer.seed=", "trainer.threads=", "trainer.progress=", "trainer.max_minutes=")  # the guard


def _trained_seed(res: dict[str, Any]) -> int | None:
    """The seed a LOSO result trained with: its `trainer.seed` override, else its config's."""
    for o in reversed(res["overrides"]):
        if o.startswith("trainer.seed="):
            return int(o.split("=", 1)[1])
    from speechscale.config import ConfigError
    from speechscale.recipe import load_recipe

    path = Path(res["config"])  # relative to the checkout the bench ran in
    if not path.is_file():
        path = Path(__file__).resolve().parents[3] / res["config"]
    try:
        return load_recipe(path, ["data.root=."]).trainer.seed  # the seed only: no data is read
    except ConfigError:
        return None


def loso_by_recipe(docs: dict[str, dict[str, Any]]) -> dict[tuple[str, str], dict[int | None, dict[str, Any]]]:
    """Complete LOSO results grouped by recipe (config, overrides that change training) -> seed -> the four
    folds' mean WER per decoder (and `end_boundary`: which lexicon search scored it; `name`: the file's key in
    `docs`). A seed run twice keeps its latest file (by measurement date)."""
    out: dict[tuple[str, str], dict[int | None, dict[str, Any]]] = {}
    for name, doc in sorted(docs.items(), key=lambda kv: kv[1]["provenance"]["date"]):
        res = doc["results"]
        if not res.get("summary"):
            continue
        recipe = " ".join(sorted({o for o in res["overrides"] if not o.startswith(_NOT_RECIPE)}))
        if res.get("extra_train"):
            recipe = (recipe + " " if recipe else "") + f"+ training on {res['extra_train']}"
        out.setdefault((res["config"], recipe), {})[_trained_seed(res)] = {
            **{d: res["summary"][d]["mean_wer"] for d in ("greedy", "lexicon")}, "end_boundary": _end_boundary(res),
            "name": name}
    return out


def render_loso_seeds(docs: dict[str, dict[str, Any]]) -> str:
    """Per recipe: the seeds it ran and, for each decoder, the mean over seeds of the fold means with their
    range; a recipe with one seed is marked as such (one run cannot carry a claim of a few points)."""
    rows = []
    for (config, recipe), seeds in sorted(loso_by_recipe(docs).items()):
        cells = []
        for d in ("greedy", "lexicon"):
            v = [m[d] for m in seeds.values()]
            spread = f" ({100 * min(v):.1f}-{100 * max(v):.1f})" if len(v) > 1 else ""
            old = sum(not m["end_boundary"] for m in seeds.values()) if d == "lexicon" else 0
            mark = "" if not old else "†" if old == len(seeds) else f"† ({old} of {len(seeds)} seeds)"
            cells.append(f"{100 * sum(v) / len(v):.1f} %{spread}{mark}")
        named = ", ".join("?" if k is None else str(k) for k in sorted(seeds, key=lambda k: (k is None, k or 0)))
        rows.append([f"`{config}`" + (f" with `{recipe}`" if recipe else ""), named, *cells,
                     "" if len(seeds) >= 3 else "**fewer than 3 seeds**: no claim"])
    return ("Over seeds, per recipe (mean of the seeds' fold means; range over seeds):\n\n"
            + _md(["recipe", "seeds", "mean greedy", "mean lexicon", "note"], rows))


def update_loso(path: Path, docs: dict[str, dict[str, Any]]) -> None:
    """Rewrite the `<!-- loso -->` block of `path` or its area pages from `docs` (appended under a heading if absent)."""
    from .tables import replace_in_pages

    block = render_loso(docs)
    if not replace_in_pages(path, "loso", block):
        path.write_text(path.read_text().rstrip("\n") + "\n\n## Leave-one-speaker-out on FSDD (issue #25)\n\n"
                        "<!-- loso -->\n" + block + "<!-- /loso -->\n")


def loso_block(text: str) -> str | None:
    """The rendered LOSO block in a BENCHMARKS.md text, if any."""
    return read_block(text, "loso")


