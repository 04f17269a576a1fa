"""environment.yml (conda, GPU nodes) and pyproject.toml (pip) must ask for the same packages."""
import re

import tomllib
import yaml

from conftest import ROOT


def _norm(req: str) -> tuple[str, str]:
    m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*?)\s*$", req)
    return m[1].lower().replace("_", "-"), m[2].replace(" ", "")


def test_environment_yml_pins_what_pyproject_pins():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = dict(_norm(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda, pip = [], []
    for dep in env["dependencies"]:
        (pip.extend(dep["pip"]) if isinstance(dep, dict) else conda.append(dep))
    have = dict(_norm(r) for r in conda + pip if not r.startswith("-") and not r.startswith("python"))
    have.pop("pip", None)
    assert have == wanted
    assert "-e ." in pip  # the course itself, so `checker` is on PATH


def test_torch_is_pinned_exactly():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "torch==2.13.0" in project["dependencies"]
