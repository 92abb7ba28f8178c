"""Version-aware knowledge: what the bundle's version facts say about the installed torchrl.

Three generated or curated sources, each read here only:

- ``src/torchrl_skill/data/api_changes.json``: renamed/removed names,
  keywords and keys with the release that changed (``changed_in``, "since"), deprecated
  and removed them (``removed_in``, "until"), and ``verified_on``;
- ``src/torchrl_skill/data/upstream_index.json`` (benchmarks/build_fix_index.py, from a pytorch/rl clone
  and the released wheels): the bug fixes after 0.11.0 with the first release holding each,
  the public names they touched and the messages they removed, and which public package
  exports each name in the newest release of every line;
- ``src/torchrl_skill/data/error_index.json`` / ``tests``: the proofs the version matrix runs on each line;
- ``src/torchrl_skill/data/stack_lines.json`` (benchmarks/version_matrix.py): the torch releases each torchrl
  release's compiled extension was measured to load with, for check_torchrl_env.py
  (:func:`extension_torch`, :func:`torch_fix`).

``explain.py NAME`` reads :func:`fixes_for` (``explain/notes.py``: what NAME is called or
where it lives in the newest line, the fixes to it the installed release lacks) and
``explain.py --error`` reads :func:`upstream` (``explain/errors.py``: fixes that changed or
removed that message); a check that needs what an older release lacks is a skip through
:func:`missing_feature`. ``scan_api_drift.py --to`` plans a migration with
:func:`rows_between` and :func:`fixes_between`.
benchmarks/version_matrix.py runs :func:`check_rows` and :func:`proof_nodes` on each line.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import re
import warnings
from pathlib import Path

from torchrl_skill import data
from torchrl_skill.report.base import BUNDLE_ROOT

from torchrl_skill.stack.probe import VERIFIED, _release, installed_version, line_of, stack_lines

ROOT = BUNDLE_ROOT
API_CHANGES_PATH = data.API_CHANGES
UPSTREAM_PATH = data.UPSTREAM_INDEX
API_PAGE = "sub-skills/development-and-testing/references/api-changes.md"


def newest_line() -> str:
    """The newest line the upstream index knows (``"0.14"``: upstream_index.json's ``lines``;
    VERIFIED's line when the index is absent). A line newer than it is one this data can say
    nothing about: the notes stay silent there instead of naming an older release's fixes."""
    lines = list(upstream()["lines"]) or [line_of(VERIFIED["torchrl"])]
    return max(lines, key=_release)


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


@functools.lru_cache(maxsize=None)
def api_changes() -> dict:
    """The bundle's rename table's sections (data.api_changes: ``{"names", "keys", "kwargs",
    "deprecated"}``, nothing else); empty when the file is absent or broken."""
    try:
        table = data.api_changes(API_CHANGES_PATH)
    except (OSError, ValueError):
        table = {}
    return {k: table.get(k, []) for k in data.API_CHANGES_SECTIONS}


@functools.lru_cache(maxsize=None)
def upstream() -> dict:
    """src/torchrl_skill/data/upstream_index.json; empty sections when absent."""
    data = _json(UPSTREAM_PATH)
    return {"fixes": data.get("fixes", []), "exports": data.get("exports", {}), "lines": data.get("lines", {}),
            "modules": data.get("modules", {}), "members_added": data.get("members_added", {}),
            "params_added": data.get("params_added", {}),
            "built_from": data.get("built_from", {})}


def newest_release() -> str | None:
    """The newest release of the newest line the index knows (``"0.14.1"``)."""
    return upstream()["lines"].get(newest_line())


def _top(name: str) -> str:
    """``ReplayBuffer.extend`` -> ``ReplayBuffer``; ``torchrl.collectors.SyncDataCollector`` ->
    ``SyncDataCollector``; ``file.py:Cls`` -> ``Cls``."""
    name = name.rsplit(":", 1)[-1]
    parts = name.split(".")
    caps = [i for i, p in enumerate(parts) if p[:1].isupper()]
    return parts[caps[0]] if caps else parts[-1]


def _member(name: str) -> str:
    """The part from the class on: ``torchrl.data.ReplayBuffer.extend`` -> ``ReplayBuffer.extend``."""
    parts = name.rsplit(":", 1)[-1].split(".")
    caps = [i for i, p in enumerate(parts) if p[:1].isupper()]
    return ".".join(parts[caps[0]:]) if caps else parts[-1]


def after(version: str | None, than: str) -> bool:
    """True when ``version`` is later than ``than`` (None: in no release yet, so later)."""
    return version is None or _release(version) > _release(than)


# ---------------------------------------------------------------------------- check_torchrl_env

def minor(version: str) -> str:
    """``"2.13.0+cpu"`` -> ``"2.13"``."""
    return ".".join(version.split("+")[0].split(".")[:2])


def extension_torch(torchrl_version: str) -> tuple[str, list[str], dict[str, str]] | None:
    """``(torchrl release measured, torch releases its compiled extension loads with, {torch:
    error} it fails with)`` for the installed torchrl, from src/torchrl_skill/data/stack_lines.json
    ("extension", generated by benchmarks/version_matrix.py: each PyPI wheel's
    ``torchrl._torchrl`` loaded after ``import torch`` and used, one fresh interpreter per
    pair). A release not measured falls back to the newest measured release of its line;
    None when its line was not measured. torchrl declares only ``torch>=2.1.0``: pip
    guards nothing here. The table is rendered in references/backend-compatibility.md."""
    table = stack_lines().get("extension", {}).get("torchrl", {})
    if torchrl_version not in table:
        same_line = sorted((v for v in table if line_of(v) == line_of(torchrl_version)),
                           key=lambda v: tuple(int(x) for x in v.split(".")))
        if not same_line:
            return None
        torchrl_version = same_line[-1]
    row = table[torchrl_version]
    return torchrl_version, row["loads"], row["fails"]


def torch_fix(torchrl_version: str) -> str:
    """``pip install 'torch==2.14.*'``: the verified torch minor when the extension was measured
    to load with it (torchrl 0.14.1 loads with 2.14 and 2.15: the verified 2.14 is named),
    else the newest torch minor it was measured to load with."""
    found = extension_torch(torchrl_version)
    if not found or not found[1]:
        return "install the torch release torchrl was built for"
    loads = {minor(v) for v in found[1]}
    newest = max(loads, key=lambda v: tuple(int(x) for x in v.split(".")))
    return f"pip install 'torch=={minor(VERIFIED['torch']) if minor(VERIFIED['torch']) in loads else newest}.*'"


# ---------------------------------------------------------------------------- fixes a release lacks
def fixes_for(name: str, installed: str, upto: str | None = None) -> list[dict]:
    """Fixes (upstream_index.json) touching ``name`` that ``installed`` lacks, up to release
    ``upto`` (None: all, including those in no release yet). A class matches the fixes to
    its members; ``Class.member`` matches those to the member and to the class as a whole."""
    member, top = _member(name), _top(name)
    out = []
    for fix in upstream()["fixes"]:
        touched = set(fix.get("names", []))
        hit = member in touched or (member == top and any(t.split(".")[0] == top for t in touched)) or \
            (member != top and top in touched)
        if not hit or not after(fix.get("first"), installed):
            continue
        if upto is not None and after(fix.get("first"), upto):
            continue
        out.append(fix)
    return out



def _member_added(cls_name: str, member: str, section: str = "members_added") -> str | None:
    """The line that added ``member`` (a class member, or with ``section="params_added"`` a
    constructor parameter) to torchrl class ``cls_name`` or a torchrl class it inherits from
    (the installed MRO; upstream_index.json), else None."""
    added = upstream()[section]
    names = [cls_name]
    where = upstream()["exports"].get(cls_name, {})
    for package in where:
        try:
            obj = getattr(importlib.import_module(package), cls_name)
        except Exception:  # a package of another line or a failing optional import: keep the bare name
            continue
        if inspect.isclass(obj):
            names = [k.__name__ for k in obj.__mro__ if k.__module__.split(".")[0] == "torchrl"]
            break
    return next((added[n][member] for n in names if member in added.get(n, {})), None)


def missing_feature(err: BaseException, installed: str | None = None) -> str | None:
    """Why a check could not run here, when ``err`` shows the installed release lacks a
    torchrl module, name, class member or keyword that a newer supported line has
    (upstream_index.json: ``modules``, ``exports``, ``members_added``, ``params_added``): ``"not run: torchrl 0.13.3 has no
    torchrl.render (torchrl 0.14 has it); ..."``. None otherwise, and always None on the
    newest line (there a missing name is a fault, not an older release)."""
    installed = installed or installed_version("torchrl")
    if not installed:
        return None
    newest, here = newest_line(), line_of(installed)
    if not after(newest, here):
        return None
    data, text, since = upstream(), str(err), None
    if isinstance(err, ModuleNotFoundError) and (err.name or "").startswith("torchrl."):
        what = err.name
        lines = data["modules"].get(what, [])
        since = next((ln for ln in lines if after(ln, here)), None) if here not in lines else None
    elif (m := re.search(r"cannot import name '(\w+)' from '(torchrl[\w.]*)'", text)):
        what = f"{m.group(2)}.{m.group(1)}"
        lines = sorted({ln for ls in data["exports"].get(m.group(1), {}).values() for ln in ls}, key=_release)
        since = next((ln for ln in lines if after(ln, here)), None) if here not in lines else None
    elif (m := re.search(r"'(\w+)' object has no attribute '(\w+)'|type object '(\w+)' has no attribute '(\w+)'", text)):
        cls, member = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        what = f"{cls}.{member}"
        since = _member_added(cls, member)
        since = since if since and after(since, here) else None
    elif (m := re.search(r"(\w+)(?:\.(\w+))?\(\) got an unexpected keyword argument '(\w+)'", text)
          or re.search(r"Keys \['(\w+)'.*?\] are unknown to (\w+)", text)):
        if m.re.pattern.startswith("Keys"):  # torchrl's own check of **kwargs (collectors)
            owner, method, keyword = m.group(2), "__init__", m.group(1)
        else:
            owner, method, keyword = m.group(1), m.group(2) or "__init__", m.group(3)
        what = f"{owner}({keyword}=)" if method == "__init__" else f"{owner}.{method}({keyword}=)"
        if method == "__init__":
            since = _member_added(owner, keyword, "params_added")
        else:
            since = data["params_added"].get(f"{owner}.{method}", {}).get(keyword)
        since = since if since and after(since, here) else None
    if since is None:
        return None
    release = newest_release() or newest
    return (f"not run: torchrl {installed} has no {what} (added in torchrl {since}); "
            f"to run this check: pip install torchrl=={release} with its tensordict and torch")


# ---------------------------------------------------------------------------- scan --to
def rows_between(installed: str, target: str) -> list[tuple[str, dict]]:
    """``(section, row)`` of every API-changes row that takes effect after ``installed`` and
    by the target line's releases (removed, renamed or deprecated in (installed, target])."""
    out = []
    for section in ("names", "deprecated", "kwargs", "keys"):
        for row in api_changes()[section]:
            when = row.get("removed_in") or row.get("deprecated_in") or row.get("changed_in")
            if when and after(when, installed) and _release(line_of(when)) <= _release(target):
                out.append((section, row))
    return out


def fixes_between(installed: str, target: str) -> list[dict]:
    """Fixes whose first release is after ``installed`` and on or before the target line."""
    return [f for f in upstream()["fixes"]
            if f.get("first") and after(f["first"], installed) and _release(line_of(f["first"])) <= _release(target)]


# ---------------------------------------------------------------------------- matrix
def _resolve(dotted: str):
    """The object at ``dotted`` in the installed stack, or None (module absent, attribute
    absent, or the module failed to import)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:
            continue
        for attr in parts[cut:]:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    obj = getattr(obj, attr)
            except Exception:
                return None
        return obj
    return None


def _params(obj) -> set[str]:
    try:
        names = set(inspect.signature(obj).parameters)
        if inspect.isclass(obj):
            names |= set(inspect.signature(obj.__init__).parameters)
        return names
    except (TypeError, ValueError):
        return set()


def _judge(label: str, expected: dict, found: dict) -> tuple[str, str]:
    wrong = [f"{k}: expected {'present' if v else 'absent'}, found {'present' if found[k] else 'absent'}"
             for k, v in expected.items() if v is not None and v != found[k]]
    return label, ("failed: " + "; ".join(wrong)) if wrong else "passed"


def check_rows(installed: str | None = None) -> dict[str, str]:
    """Every API-changes row judged against the installed library: ``{label: "passed" |
    "failed: why" | "skipped: why"}``. A ``names`` row predicts its old name present before
    ``removed_in`` and absent from it on, and its new name present from ``changed_in`` on;
    a ``deprecated`` row both present (the old one importable, maybe raising when built); a
    ``kwargs`` row its callable present, the new keyword accepted from ``changed_in`` on and,
    past ``removed_in``, the old one gone from the signature (unless the row says it still
    raises or warns). ``keys`` rows are defaults, proven by the loss tests: skipped."""
    installed = installed or installed_version("torchrl")
    out: dict[str, str] = {}
    for row in api_changes()["names"]:
        expected = {"old": after(row.get("removed_in"), installed) if row.get("removed_in") else True,
                    "new": not after(row.get("changed_in"), installed) if row.get("new") else None}
        found = {"old": _resolve(row["old"]) is not None, "new": row.get("new") and _resolve(row["new"]) is not None}
        label, res = _judge(f"names:{row['old']}", expected, found)
        out[label] = res
    for row in api_changes()["deprecated"]:
        expected = {"old": True, "new": True}
        found = {"old": _resolve(row["old"]) is not None, "new": _resolve(row["new"]) is not None}
        label, res = _judge(f"deprecated:{row['old']}", expected, found)
        out[label] = res
    for row in api_changes()["kwargs"]:
        label = f"kwargs:{row['callable']}({row['old']}=)"
        target = _resolve(row.get("checked_on", row["callable"]))
        if target is None:
            out[label] = "failed: callable absent"
            continue
        params = _params(target)
        checks = []
        if row.get("new") and not after(row.get("changed_in"), installed):
            checks.append((row["new"] in params, f"{row['new']}= not accepted"))
        gone = row.get("removed_in")
        if gone and not after(gone, installed) and row.get("status") not in ("deprecated", "raises"):
            checks.append((row["old"] not in params, f"{row['old']}= still in the signature"))
        bad = [why for ok, why in checks if not ok]
        out[label] = ("failed: " + "; ".join(bad)) if bad else "passed"
    for row in api_changes()["keys"]:
        out[f"keys:{row['old']}"] = "skipped: a default key, proven by the loss tests"
    return out


def proof_nodes(root: Path = ROOT) -> list[str]:
    """Every test the bundle names as a proof: each error-index entry's trigger (run by
    tests/test_error_index.py) or named test, every test tests/proofs.json lists for a
    reference section, and any ``<!-- proof: -->`` test not yet moved there."""
    from torchrl_skill.explain import error_index as ei

    nodes = set()
    for entry in ei.load(root / data.ERROR_INDEX.relative_to(BUNDLE_ROOT)):
        if entry.proof.startswith("tests/error_triggers/"):
            nodes.add(f"tests/test_error_index.py::test_trigger_raises_the_real_error_and_the_index_ranks_it_first[{entry.id}]")
        elif entry.proof:
            nodes.add(entry.proof)
    sidecar = root / "tests" / "proofs.json"
    if sidecar.exists():
        for entry in json.loads(sidecar.read_text(encoding="utf-8"))["files"].values():
            nodes.update(n for ids in entry.values() if isinstance(ids, list) for n in ids)
    for md in sorted(root.rglob("*.md")):
        if md.relative_to(root).parts[0] in ("tests", "benchmarks", "CONTRIBUTING.md", "README.md"):
            continue  # the rules' own examples are not claims
        for block in re.findall(r"<!--\s*proof:\s*(.*?)\s*-->", md.read_text(encoding="utf-8"), re.S):
            nodes.update(n.strip() for n in block.split(",") if n.strip().startswith("tests/"))
    return sorted(nodes)
