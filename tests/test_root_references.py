"""Facts in the root references that the generic docs tests cannot check by name alone."""

from __future__ import annotations

import importlib.metadata
import json
import re

from conftest import BUNDLE
from packaging.requirements import Requirement


def _declared_extras() -> dict[str, set[str]]:
    extras: dict[str, set[str]] = {}
    for raw in importlib.metadata.requires("torchrl"):
        req = Requirement(raw)
        m = re.search(r'extra == "([^"]+)"', str(req.marker or ""))
        if m:
            extras.setdefault(m.group(1), set()).add(req.name.lower().replace("_", "-"))
    return extras


def test_extras_table_matches_installed_metadata():
    text = (BUNDLE / "references" / "install-and-extras.md").read_text()
    rows = re.findall(r"^\| ([a-z0-9-]+) \| (.+) \|$", text, re.M)
    table = {extra: {re.split(r"[\[<>=!~; ]", pkg.strip("`"))[0].lower().replace("_", "-")
                     for pkg in re.findall(r"`[^`]+`", cell)} for extra, cell in rows if extra not in ("extra", "---")}
    assert table == _declared_extras()


def test_provenance_block_matches_pins():
    text = (BUNDLE / "references" / "repo-provenance.md").read_text()
    block = json.loads(re.search(r"```json\n(.*?)```", text, re.S).group(1))
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", (BUNDLE / "requirements.txt").read_text(), re.M))
    for dist in ("torch", "tensordict", "torchrl", "gymnasium"):
        assert block[dist] == pins[dist] == importlib.metadata.version(dist)


def test_requires_python_claim():
    assert importlib.metadata.metadata("torchrl")["Requires-Python"] == ">=3.10"


def test_declared_tensordict_range_claim():
    reqs = [Requirement(r) for r in importlib.metadata.requires("torchrl")]
    spec = next(r.specifier for r in reqs if r.name == "tensordict" and r.marker is None)
    assert str(spec) in ("<0.15.0,>=0.14.3", ">=0.14.3,<0.15.0")
