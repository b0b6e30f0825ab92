"""Determinism switches: the trainer's flag sets torch's deterministic mode without importing the inductor,
and tells the inductor too when a model is compiled. One fresh process (sys.modules starts clean)."""
import subprocess
import sys

CHECK = """
import sys, torch
from speechscale.storage.seeds import deterministic_algorithms
deterministic_algorithms(compiling=False)
print(torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
      "torch._inductor.config" in sys.modules)
torch.use_deterministic_algorithms(False)
deterministic_algorithms(compiling=True)
import torch._inductor.config as c
print(torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
      c.deterministic)
"""


def test_deterministic_mode_is_on_and_warn_only_and_the_inductor_is_loaded_only_when_compiling():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120,
                         check=True).stdout.split()
    assert out == ["True", "True", "False", "True", "True", "True"]
