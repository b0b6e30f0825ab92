"""Determinism switches: the trainer's flag sets torch's deterministic mode without importing the inductor."""
import subprocess
import sys

CHECK = """
import sys, torch
from speechscale.storage.seeds import deterministic_algorithms
deterministic_algorithms(compiling={compiling})
print(torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
      "torch._inductor.config" in sys.modules)
if {compiling}:
    import torch._inductor.config as c
    print(c.deterministic)
"""


def _run(compiling: bool) -> list[str]:
    out = subprocess.run([sys.executable, "-c", CHECK.format(compiling=compiling)], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    return out


def test_deterministic_mode_is_on_and_warn_only_without_loading_the_inductor():
    assert _run(False) == ["True", "True", "False"]


def test_when_compiling_the_inductor_is_told_too():
    assert _run(True) == ["True", "True", "True", "True"]
