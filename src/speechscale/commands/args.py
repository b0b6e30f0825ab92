"""Argument types and flag groups shared by several commands (one-line errors, never a traceback)."""
from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any, Callable


class DefaultsShown(argparse.HelpFormatter):
    """Every option's help ends with its default, unless it has none (None, False, a required flag) or the help
    already says what it is."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (default is None or default is False or default is argparse.SUPPRESS or action.required
                or not action.option_strings or "default" in text or "%(default)" in text):
            return text
        shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else default
        shown = str(shown).replace("%", "%%")  # argparse formats the help with %
        return f"{text} (default: {shown})" if shown else text


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: what was wrong, and where to look, without the usage block; every
    option's default shown in --help."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsShown)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _bounded(kind: type, ok: Callable[[Any], bool], said: str) -> Callable[[str], Any]:
    """An argparse type: a number of `kind` for which `ok` holds (else one line: `said`, got TEXT)."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{said}, got {text}")
        return value
    return parse


def positive(kind: type) -> Callable[[str], Any]:
    """An argparse type: a number of `kind` that must be > 0 (one line from argparse otherwise)."""
    return _bounded(kind, lambda v: v > 0, "must be positive")


def non_negative(kind: type) -> Callable[[str], Any]:
    """An argparse type: a number of `kind` that must be >= 0 (a price, a latency, a pause)."""
    return _bounded(kind, lambda v: v >= 0, "must be 0 or more")


fraction = _bounded(float, lambda v: 0 < v <= 1, "must be a share in (0, 1]")  # an argparse type: a share
probability = _bounded(float, lambda v: 0 <= v <= 1, "must be between 0 and 1")  # an argparse type: a probability


def _whole(text: str, low: int, high: int, expected: str) -> int:
    """`text` as a whole number in [low, high]; else one line: expected `expected`."""
    if not text.isdigit() or not low <= int(text) <= high:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return int(text)


def port(text: str) -> int:
    """An argparse type: a TCP port, 0-65535 (0: the system picks a free one)."""
    return _whole(text, 0, 65535, "a port number 0-65535")


def _local_only(text: str, what: str) -> None:
    """ArgumentTypeError for a URL where a command writes local files only (a Path would make it a folder "s3:")."""
    from .. import storage

    if storage.is_remote(text):
        raise argparse.ArgumentTypeError(f"{text}: this command writes a local {what}; write it here, then copy it "
                                         f"where it belongs")


def out_folder(text: str) -> Path:
    """An argparse type: a local output folder, checked now that it can be created and written, so that no work
    is lost to it at the end (nothing is left behind); a URL is refused (out_folder_or_url takes one)."""
    _local_only(text, "folder")
    return _writable_folder(text)


def out_folder_or_url(text: str) -> Path | str:
    """`out_folder` for a command that also writes to a URL (s3://, gs://, ...): a URL passes, its first write
    tells."""
    from .. import storage

    return text if storage.is_remote(text) else _writable_folder(text)


def _writable_folder(text: str) -> Path:
    from .. import storage

    if Path(text).exists() and not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder")
    try:
        storage.check_writable(text)
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot write to {text} ({e.strerror or e})") from None
    return Path(text)


def out_file(text: str) -> Path:
    """An argparse type: a local file to write, checked now (its folder can be created and written, and the file,
    if it exists, is a file that may be replaced); a URL is refused (out_file_or_url takes one)."""
    _local_only(text, "file")
    return _writable_file(text)


def out_file_or_url(text: str) -> Path | str:
    """`out_file` for a command that also writes to a URL: a URL passes, its first write tells."""
    from .. import storage

    return text if storage.is_remote(text) else _writable_file(text)


def _writable_file(text: str) -> Path:
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; name the file to write")
    if path.exists() and not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write to {text} (permission denied)")
    if path.is_file():
        from ..storage.checkpoints import holds_training_state

        if holds_training_state(path):
            raise argparse.ArgumentTypeError(f"{text} is a training checkpoint (a run resumes from it); write to "
                                             f"another file")
    try:
        _writable_folder(str(path.parent))
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"cannot write to {text}: {e}") from None
    return path


def model_file(text: str) -> str | Path:
    """An argparse type: a checkpoint or exported file, or a run folder (its checkpoints/best.pt, else last.pt)."""
    from ..storage.checkpoints import model_path

    try:
        return model_path(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def check_not_an_input(out: Any, inputs: list[Any], flag: str) -> None:
    """ConfigError when the file `out` names is one of `inputs` (writing it would destroy what is being read)."""
    from ..config import ConfigError

    if out is None or not Path(str(out)).is_file():
        return
    for given in inputs:
        if given is not None and Path(str(given)).is_file() and os.path.samefile(str(out), str(given)):
            raise ConfigError(f"{flag} {out} is also an input ({given}); write to another file")


def check_listen(host: str, port: int) -> None:
    """ConfigError in one line when this process could not listen on `host`:`port` (an unknown name, an address
    of another machine, a port in use), binding as the servers (uvicorn, the c10d store) do."""
    import socket

    from ..config import ConfigError

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as e:
        raise ConfigError(f"--host {host}: {e.strerror}") from None
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as e:
            raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def sample_rate(text: str) -> int:
    """An argparse type: a sample rate in Hz that audio may have (data.audio's bounds)."""
    from ..data.audio import MAX_RATE, MIN_RATE

    return _whole(text, MIN_RATE, MAX_RATE, f"a sample rate of {MIN_RATE}-{MAX_RATE} Hz")


def endpoint_frames(text: str) -> int:
    """An argparse type: the quiet output frames that end a streamed phrase (streaming.phrases' bounds)."""
    from ..streaming.phrases import MAX_ENDPOINT_FRAMES

    return _whole(text, 1, MAX_ENDPOINT_FRAMES, f"a whole number from 1 to {MAX_ENDPOINT_FRAMES}")


def chunk_seconds(text: str) -> float | None:
    """An argparse type: --chunk-seconds, `auto` (None: the length the model's card suggests) or seconds (>= 1)."""
    if text == "auto":
        return None
    from ..inference.transcribe import MIN_CHUNK_SECONDS

    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected auto or a number of seconds, got {text!r}") from None
    if not seconds >= MIN_CHUNK_SECONDS:
        raise argparse.ArgumentTypeError(f"{text}: chunks must be at least {MIN_CHUNK_SECONDS:g} s long")
    return seconds


def int_list(text: str) -> list[int]:
    """An argparse type: comma-separated integers (one line from argparse otherwise)."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def choice_list(allowed: tuple[str, ...] | Callable[[], tuple[str, ...]]) -> Callable[[str], list[str]]:
    """An argparse type: comma-separated names, each one of `allowed` (one line from argparse otherwise). A callable
    `allowed` is asked only when the flag is given (its module, e.g. torch's, is not imported otherwise)."""
    def parse(text: str) -> list[str]:
        names = [x.strip() for x in text.split(",") if x.strip()]
        for x in names:
            _known(x, allowed)
        return names
    return parse


def _known(name: str, allowed: tuple[str, ...] | Callable[[], tuple[str, ...]]) -> None:
    choices = allowed() if callable(allowed) else allowed
    if name not in choices:
        raise argparse.ArgumentTypeError(f"{name!r} is unknown; choose from {', '.join(choices)}")


def choice(allowed: Callable[[], tuple[str, ...]] | tuple[str, ...]) -> Callable[[str], str]:
    """An argparse type: one name of `allowed` (a callable is asked only when the flag is given, as in
    `choice_list`)."""
    def parse(text: str) -> str:
        _known(text, allowed)
        return text
    return parse


def yaml_mapping(text: str | None, flag: str) -> dict[str, Any]:
    """A YAML mapping given on the command line, or {}; ConfigError in one line otherwise."""
    from ..config import ConfigError, safe_yaml

    if not text:
        return {}
    value = safe_yaml(text, flag)
    if not isinstance(value, dict):
        raise ConfigError(f"{flag}: expected a mapping such as '{{rnn_layers: 4}}', got {text!r}")
    return value


class DecoderDefaults:
    """The decoder flags' defaults, one place for every command (decoding.decoders.DecoderConfig's, written out:
    the parser is built before torch is imported; tests/test_cli.py keeps them equal)."""

    beam_width = 50


def device_arg(p: argparse.ArgumentParser) -> None:
    """The --device flag of eval, transcribe and serve."""
    p.add_argument("--device", default="auto",
                   help="where the model runs: auto (the first GPU when there is one, else the CPU), cpu, cuda, cuda:N")


def decoder_args(p: argparse.ArgumentParser) -> None:
    """The decoder flags of eval, transcribe and serve."""
    p.add_argument("--decoder", default="greedy", choices=["greedy", "beam", "lexicon"],
                   help="greedy, beam search (with --lm: over the LM's words), or lexicon (only --lexicon's words)")
    p.add_argument("--beam-width", type=positive(int), default=DecoderDefaults.beam_width,
                   help="beam search: hypotheses kept")
    p.add_argument("--lm", default=None, help="a KenLM word model (ARPA or binary), e.g. from `speechscale lm build`")
    p.add_argument("--alpha", type=float, default=None, help="LM weight (default: tune-lm's, else 0.5)")
    p.add_argument("--beta", type=float, default=None, help="bonus per word (default: tune-lm's, else 1.0)")
    p.add_argument("--lexicon", default=None, help="a word list, one word a line (the lexicon decoder)")
    p.add_argument("--hotwords", default=None, help="comma-separated words to favour (beam with --lm, or lexicon)")
    p.add_argument("--hotword-weight", type=float, default=3.0, help="the hotwords' bonus per occurrence")


def decoder_config(args: argparse.Namespace) -> Any:
    """The DecoderConfig the decoder flags describe; the LM's tuned weights unless --alpha/--beta."""
    from ..decoding.decoders import DecoderConfig
    from ..decoding.tune import DEFAULT_ALPHA, DEFAULT_BETA, load_tuned

    tuned = load_tuned(args.lm) if args.lm else None  # written by tune-lm beside the LM
    alpha = args.alpha if args.alpha is not None else (tuned or {}).get("alpha", DEFAULT_ALPHA)
    beta = args.beta if args.beta is not None else (tuned or {}).get("beta", DEFAULT_BETA)
    return DecoderConfig(name=args.decoder, beam_width=args.beam_width, lm=args.lm or "", alpha=alpha, beta=beta,
                         lexicon=args.lexicon or "", hotwords=[w for w in (args.hotwords or "").split(",") if w],
                         hotword_weight=args.hotword_weight)
