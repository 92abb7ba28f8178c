"""Version-aware knowledge: what the bundle's version facts say about the installed torchrl.

Three generated or curated sources, each read here only:

- ``sub-skills/development-and-testing/scripts/api_changes.json``: renamed/removed names,
  keywords and keys with the release that changed (``changed_in``, "since"), deprecated
  and removed them (``removed_in``, "until"), and ``verified_on``;
- ``scripts/upstream_index.json`` (benchmarks/build_fix_index.py, from a pytorch/rl clone
  and the released wheels): the bug fixes after 0.11.0 with the first release holding each,
  the public names they touched and the messages they removed, and which public package
  exports each name in the newest release of every line;
- ``scripts/error_index.json`` / ``tests``: the proofs the version matrix runs on each line.

``explain.py NAME`` adds :func:`name_notes` (what NAME is called or where it lives in the
newest line, the fixes to it the installed release lacks); ``explain.py --error`` adds
:func:`error_answers` (fixes that changed or removed that message). ``scan_api_drift.py
--to`` plans a migration with :func:`rows_between` and :func:`fixes_between`.
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

from _stack import SUPPORTED, _release, line_of

ROOT = Path(__file__).resolve().parent.parent
API_CHANGES_PATH = ROOT / "sub-skills" / "development-and-testing" / "scripts" / "api_changes.json"
UPSTREAM_PATH = Path(__file__).resolve().parent / "upstream_index.json"
API_PAGE = "sub-skills/development-and-testing/references/api-changes.md"
SHOWN_FIXES = 8  # fixes listed by number in one note; the rest are counted


def newest_line() -> str:
    """The newest supported line (``"0.14"``: one below SUPPORTED's torchrl bound)."""
    major, minor = _release(SUPPORTED["torchrl"][1])[:2]
    return f"{major}.{minor - 1}"


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


@functools.lru_cache(maxsize=None)
def api_changes() -> dict:
    data = _json(API_CHANGES_PATH)
    return {k: data.get(k, []) for k in ("names", "keys", "kwargs", "deprecated")}


@functools.lru_cache(maxsize=None)
def upstream() -> dict:
    """scripts/upstream_index.json; empty sections when absent."""
    data = _json(UPSTREAM_PATH)
    return {"fixes": data.get("fixes", []), "exports": data.get("exports", {}), "lines": data.get("lines", {}),
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


# ---------------------------------------------------------------------------- explain NAME
def rename_notes(name: str, installed: str) -> list[str]:
    """Rows of the API-changes table for ``name`` that the installed release still has and
    the newest line changed (renamed, removed or deprecated after ``installed``)."""
    top, out = _top(name), []
    for section in ("names", "deprecated"):
        for row in api_changes()[section]:
            if row["old"].rsplit(".", 1)[-1] != top:
                continue
            gone = row.get("removed_in")
            if gone and not after(gone, installed):
                continue  # already gone here: explain's "renamed or removed" row says so
            when = f"removed in {gone}" if gone else f"deprecated in {row.get('deprecated_in')}, still works"
            out.append(f"in torchrl {newest_line()}: {row.get('new') or '(no replacement)'} ({row['old']} {when}) "
                       f"[{API_PAGE}]")
    for row in api_changes()["kwargs"]:
        if row["callable"].rsplit(".", 1)[-1] == top and after(row.get("removed_in"), installed) and row.get("removed_in"):
            new = f"{row['new']}=" if row.get("new") else "drop it"
            out.append(f"in torchrl {newest_line()}: keyword {row['old']}= -> {new} (removed in {row['removed_in']}) [{API_PAGE}]")
    return out


def export_notes(name: str, installed: str) -> list[str]:
    """Where the newest line's public packages export ``name``, when that differs here."""
    top = _top(name)
    where = upstream()["exports"].get(top)
    here_line, newest = line_of(installed), newest_line()
    if not where or here_line == newest:
        return []
    there = sorted(p for p, lines in where.items() if newest in lines)
    here = sorted(p for p, lines in where.items() if here_line in lines)
    if there and not here:
        first = min((ln for lines in where.values() for ln in lines), key=_release)
        return [f"added in torchrl {first}: the installed {installed} lacks it; after upgrading, from {there[0]} import {top}"]
    if here and not there:
        return [f"not exported by any public torchrl package in {newest} (here from {', '.join(here)}); "
                f"see the API-changes table before upgrading [{API_PAGE}]"]
    if there != here:
        return [f"in torchrl {newest} exported from {', '.join(there)} (here from {', '.join(here)})"]
    return []


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


def fixes_line(fixes: list[dict], what: str, installed: str) -> str:
    """One note naming the fixes by PR number and first release."""
    newest = newest_release()
    shown = [f"pytorch/rl#{f['pr']} ({f['first'] or 'on main, in no release up to ' + (newest or '?')})"
             for f in fixes[:SHOWN_FIXES]]
    more = f" and {len(fixes) - SHOWN_FIXES} more" if len(fixes) > SHOWN_FIXES else ""
    built = upstream()["built_from"].get("commit", "")[:12]
    released = newest and any(f.get("first") for f in fixes)
    return (f"{len(fixes)} bug fix(es) to {what} that torchrl {installed} lacks: {', '.join(shown)}{more}"
            + (f"; torchrl {newest} has those with a release" if released else "")
            + f" (scripts/upstream_index.json, pytorch/rl at {built})")


def name_notes(name: str, versions: dict) -> list[str]:
    """explain.py's version notes for NAME on the installed torchrl: on an older line what
    it is called or where it lives in the newest line; on any release the fixes to it that
    release lacks. Empty on the newest release with nothing to add."""
    installed = versions.get("torchrl")
    if not installed or ":" in name:  # a class of the user's own code: nothing upstream to say
        return []
    if after(line_of(installed), newest_line()):  # newer than anything the data knows: nothing to say
        return []
    notes = []
    if line_of(installed) != newest_line():
        renamed = rename_notes(name, installed)
        notes += renamed or export_notes(name, installed)  # a rename row already says where it went
    fixes = fixes_for(name, installed)
    if fixes:
        notes.append(fixes_line(fixes, _member(name), installed))
    return notes


# ---------------------------------------------------------------------------- explain --error
def _template_regex(message: str) -> re.Pattern | None:
    parts = [re.escape(p) for p in message.split("{}")]
    if sum(len(p) for p in message.split("{}")) < 12:
        return None
    return re.compile(r".{0,200}?".join(parts).replace(r"\ ", r"\s+"))


def error_answers(text: str, versions: dict) -> list[tuple[str, list[str]]]:
    """``(row name, lines)`` per fix that changed or removed a message occurring in ``text``
    and that the installed torchrl lacks (upstream_index.json ``removed``)."""
    installed = versions.get("torchrl")
    if not installed or after(line_of(installed), newest_line()):
        return []
    flat = " ".join(text.split())
    out = []
    for fix in upstream()["fixes"]:
        if not after(fix.get("first"), installed):
            continue
        for message in fix.get("removed", []):
            pattern = _template_regex(message)
            if pattern is not None and pattern.search(flat):
                where = ", ".join(fix.get("names", [])[:4] or fix.get("modules", [])[:2])
                lines = [f"pytorch/rl#{fix['pr']} changed or removed this message (first in torchrl "
                         f"{fix['first'] or 'no release yet'}; torchrl {installed} lacks it)",
                         f"   touched: {where}" if where else "   touched: (no public name)",
                         f"   message as it was: {message[:200]}"]
                out.append((f"upstream:fix-{fix['pr']}", lines))
                break
    return out[:5]


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
    import importlib.metadata

    installed = installed or importlib.metadata.version("torchrl")
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
    tests/test_error_index.py) or named test, and every references' ``<!-- proof: -->`` test."""
    import _error_index as ei

    nodes = set()
    for entry in ei.load(root / "scripts" / "error_index.json"):
        if entry.proof.startswith("tests/error_triggers/"):
            nodes.add(f"tests/test_error_index.py::test_trigger_raises_the_real_error_and_the_index_ranks_it_first[{entry.id}]")
        elif entry.proof:
            nodes.add(entry.proof)
    for md in sorted(root.rglob("*.md")):
        if md.relative_to(root).parts[0] in ("tests", "benchmarks", "CONTRIBUTING.md", "README.md"):
            continue  # the rules' own examples are not claims
        for block in re.findall(r"<!--\s*proof:\s*(.*?)\s*-->", md.read_text(encoding="utf-8"), re.S):
            nodes.update(n.strip() for n in block.split(",") if n.strip().startswith("tests/"))
    return sorted(nodes)
