"""The resolved config as YAML with every key's one-line comment (`speechscale train --print-config`).

    >>> from speechscale.config import Config
    >>> line = dump_config(Config()).splitlines()[1]
    >>> line.split("#")[0].strip(), line.split("#")[1].split(";")[0].strip()[:40]
    ("root: ''", 'folder the relative data paths below (ma')
"""
from __future__ import annotations

import dataclasses
from typing import Any

import yaml

from .config import Config, to_dict


def _field_comments(cls: type) -> dict[str, str]:
    """Each field's trailing `# comment` in this module's source (continuation comment lines joined)."""
    import inspect

    comments: dict[str, str] = {}
    last = None
    for line in inspect.getsource(cls).splitlines():
        code, _, comment = line.partition("#")
        name = code.strip().split(":", 1)[0] if ":" in code and not code.strip().startswith(('"', "'")) else ""
        if name.isidentifier():
            last = name
            comments[name] = comment.strip()
        elif not code.strip() and comment and last:  # a comment line continuing the field above
            comments[last] = f"{comments[last]} {comment.strip()}".strip()
        else:
            last = None
    return comments


def flow(value: Any) -> str:
    """One value as single-line YAML: what a `key=value` override or a line of dump_config holds."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10 ** 6, sort_keys=False)
    return text.removesuffix("\n...\n").strip()


def dump_config(cfg: Config) -> str:
    """The whole config as YAML, every key with its one-line comment; `load_config` reads it back."""
    lines = []
    for section in dataclasses.fields(cfg):
        sub = getattr(cfg, section.name)
        lines.append(f"{section.name}:")
        comments = _field_comments(type(sub))
        for f in dataclasses.fields(sub):
            entry = f"  {f.name}: {flow(to_dict(sub)[f.name])}"
            note = comments.get(f.name, "")
            lines.append(f"{entry:<40} # {note}" if note else entry)
    return "\n".join(lines) + "\n"
