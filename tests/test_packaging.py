"""environment.yml (conda, GPU nodes) and pyproject.toml (pip) must ask for the same packages."""
import re

import pytest
import tomllib
import torch
import yaml

from conftest import ROOT
from labs.common import compat


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


def test_torch_is_the_supported_range_and_a_fresh_venv_gets_the_release_ci_grades_on():
    """pyproject.toml asks for compat's range (so a GPU node's torch in range stays), the Makefile installs compat's
    TESTED into a venv without torch, and TESTED, the emulated oldest end and this machine's torch are in range."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert f"torch{compat.SUPPORTED}" in project["dependencies"]
    assert re.search(rf"^TORCH_TESTED := {re.escape(compat.TESTED)}$", (ROOT / "Makefile").read_text(), re.M)
    assert compat.in_range(compat.TESTED) and compat.in_range(compat.OLDEST)
    assert not compat.in_range("2.9.1") and not compat.in_range("2.16.0")
    assert torch.__version__.split("+")[0] == compat.TESTED  # CI's own venv: the release it grades on


def test_version_ranges_read_as_pip_reads_them():
    assert compat.in_range("2.10.0+cu128") and compat.in_range("2.15.1") and compat.in_range("2.11.0a0+git1234")
    assert compat.in_range("2.13.0+cu130", "==2.13.0") and not compat.in_range("2.13.1", "==2.13.0")
    assert compat.version_tuple("2.11.0+cu130") == (2, 11, 0)
    with pytest.raises(ValueError):
        compat.in_range("2.13.0", "~=2.13")
