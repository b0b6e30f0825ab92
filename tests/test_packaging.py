"""pyproject.toml's extras: `all` and `dev` hold every extra's packages, written out (no self-reference)."""
import tomllib

from tests.conftest import ROOT


def test_all_and_dev_hold_every_extra_without_naming_the_project():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    every = {r for name, reqs in extras.items() if name not in ("all", "dev", "bench") for r in reqs}
    assert every == set(extras["all"]) and every <= set(extras["dev"])
    assert not any(r.startswith("speechscale") for reqs in extras.values() for r in reqs)
