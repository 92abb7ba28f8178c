"""The bundle's own notes on a name, for ``scripts/explain.py``: rows of the rename table
(``src/torchrl_skill/data/api_changes.json``) and error-index entries
(``src/torchrl_skill/data/error_index.json``) whose ``names`` list the name or a class it inherits from.
Each note carries a bundle-relative link to the reference section that holds it.
On a release older than the newest supported line, :func:`version_notes` adds what the
name is called or where it lives in the newest line (api_changes.json, and the exports
of ``src/torchrl_skill/data/upstream_index.json``) and the upstream fixes to it the release lacks.
"""

from __future__ import annotations

import dataclasses
import sys

from torchrl_skill.explain import error_index as ei
from torchrl_skill.stack.probe import _release, line_of
from torchrl_skill.stack.versions import _member, _top, after, fixes_for, newest_line, newest_release, upstream

from .names import api_changes, renames_for

API_PAGE = "sub-skills/development-and-testing/references/api-changes.md"
SECTION_ANCHOR = {"names": "removed-or-moved-names", "deprecated": "deprecated-but-still-importable",
                  "kwargs": "keyword-arguments", "keys": "the-log-prob-key"}


def rename_line(row: dict) -> str:
    """One line for a ``names``/``deprecated`` row: old -> new, versions, link."""
    when = f"removed in {row['removed_in']}" if row.get("removed_in") else f"deprecated in {row.get('deprecated_in') or '?'}"
    note = f" ({row['note']})" if row.get("note") and len(row["note"]) < 160 else ""
    return f"{row['old']} -> {row.get('new') or '(no replacement)'}: {when}{note} [{API_PAGE}#{SECTION_ANCHOR[row['section']]}]"


def _mro_names(obj) -> list[str]:
    if isinstance(obj, type):
        return [k.__name__ for k in obj.__mro__ if k.__module__.split(".")[0] in ("torchrl", "tensordict")]
    return [getattr(obj, "__name__", "")]


def _resolved(dotted: str):
    module, _, attr = dotted.rpartition(".")
    mod = sys.modules.get(module)  # only rows whose module is already imported: no extra import
    return getattr(mod, attr, None) if mod is not None else None


def kwarg_lines(obj) -> list[str]:
    """Renamed keywords of ``obj`` or of a class it inherits from (``kwargs`` rows)."""
    out = []
    for row in api_changes()["kwargs"]:
        target = _resolved(row["callable"])
        owner, _, method = row["callable"].rpartition(".")
        hit = target is not None and (obj is target or (isinstance(obj, type) and isinstance(target, type) and issubclass(obj, target)))
        if not hit and method and getattr(obj, "__name__", "") == method:
            klass = _resolved(owner)
            hit = isinstance(klass, type)
        if not hit:
            continue
        new = f"{row['new']}=" if row.get("new") else "(drop it)"
        live = live_parameter(obj, row["old"])
        if row.get("removed_in") and live is not None:  # the table says removed; the live object says otherwise
            out.append(f"keyword {row['old']}=: in the installed {_label(obj)}'s signature ({row['old']}={live}), "
                       f"not removed here; {_guard_text(obj, row['old'])} [{API_PAGE}#keyword-arguments]")
            continue
        when = [f"deprecated in {row['deprecated_in']}" if row.get("deprecated_in") else "",
                f"removed in {row['removed_in']}" if row.get("removed_in") else "still accepted"]
        out.append(f"keyword {row['old']}= -> {new}: {', '.join(w for w in when if w)} "
                   f"(on {row['callable']}) [{API_PAGE}#keyword-arguments]")
    return out


def _label(obj) -> str:
    return getattr(obj, "__qualname__", None) or getattr(obj, "__name__", "") or type(obj).__name__


def live_parameter(obj, name: str) -> str | None:
    """The default of keyword ``name`` in ``obj``'s live signature (``"<required>"`` when it
    has none), or None when the signature does not take it by name."""
    from .facts import live_signature

    try:
        params = live_signature(obj).parameters
    except (TypeError, ValueError):
        return None
    param = params.get(name)
    if param is None or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
        return None
    return "<required>" if param.default is param.empty else repr(param.default)


def _guard_text(obj, name: str) -> str:
    """What the installed source does with keyword ``name``: the raise statements of the
    files defining ``obj`` and its torchrl/tensordict base classes whose guarding ``if``
    names it (``sites.py``), else that no raise there checks it."""
    import inspect
    import re

    from .sites import file_sites

    owners = [k for k in getattr(obj, "__mro__", (obj,)) if getattr(k, "__module__", "").split(".")[0] in ("torchrl", "tensordict")]
    word = re.compile(rf"\b{re.escape(name)}\b")
    guards, paths = [], []
    for owner in owners or [obj]:
        try:
            file = inspect.getsourcefile(owner if isinstance(owner, type) else getattr(owner, "__func__", owner))
        except TypeError:
            continue
        found = re.search(r"((?:torchrl|tensordict)/.+\.py)$", (file or "").replace("\\", "/"))
        if found and found.group(1) not in paths:
            paths.append(found.group(1))
            guards += [s for s in file_sites(found.group(1)) if word.search(s.condition)]
    if not guards:
        return f"no raise in {', '.join(paths) or 'its source'} checks it"
    return "; ".join(f"raises {s.exc}({s.text()!r}) {s.condition.split('; inside')[0]} ({s.path}:{s.line})"
                     for s in guards[:2])


def key_lines(obj) -> list[str]:
    """Renamed keys among a class's ``tensor_keys`` fields or defaults (``keys`` rows)."""
    keys = getattr(obj, "_AcceptedKeys", None)
    if keys is None or not dataclasses.is_dataclass(keys):
        return []
    fields = dataclasses.asdict(keys())
    seen = set(fields) | {str(v) for v in fields.values()}
    return [f"key {row['old']!r} -> {row['new']!r} (default changed in {row.get('changed_in')}): the tensor_keys field "
            f"is still named {row['old']}; set_keys({row['old']}=...) sets the key read [{API_PAGE}#{SECTION_ANCHOR['keys']}]"
            for row in api_changes()["keys"] if row["old"] in seen or row["new"] in seen]


def error_entries(asked: str, obj) -> list[ei.ErrorEntry]:
    """Error-index entries whose ``names`` list the asked name, its last part, or a
    torchrl/tensordict class in its MRO."""
    wanted = {asked, asked.rsplit(".", 1)[-1], *_mro_names(obj)}
    if "." in asked:  # Owner.method: also the owner's notes
        wanted.add(asked.split(".")[-2])
    return [e for e in ei.load() if wanted & set(e.names)]


def entry_line(entry: ei.ErrorEntry) -> str:
    return f"{entry.short or entry.title}: {entry.plain('cause')} [{entry.page}#{entry.anchor}]"


def live_rename_line(row: dict, obj) -> str:
    """A ``names``/``deprecated`` row for a name the installed library still has: said from
    the live object (still importable; what building it raises, read from the raise
    statements of its ``__init__``, ``sites.py``), never "removed in X" (the table's
    ``removed_in`` is when it stopped working, not when the name went away)."""
    import inspect
    import re

    from .sites import file_sites

    try:
        file = inspect.getsourcefile(obj)
    except TypeError:
        file = None
    found = re.search(r"((?:torchrl|tensordict)/.+\.py)$", (file or "").replace("\\", "/"))
    name = getattr(obj, "__qualname__", "")
    raises = [s for s in file_sites(found.group(1)) if s.function == f"{name}.__init__"
              and not s.condition] if found and isinstance(obj, type) else []
    what = (f"building it raises {raises[0].exc}({raises[0].text()!r}) ({raises[0].path}:{raises[0].line})" if raises
            else "no unconditional raise in its __init__")
    return (f"{row['old']} -> {row.get('new') or '(no replacement)'}: still importable in the installed release; {what} "
            f"[{API_PAGE}#{SECTION_ANCHOR[row['section']]}]")


def notes_for(asked: str, obj) -> list[str]:
    """Every note line for a found name, renames first; a row saying the name was removed
    while the installed library has it is said from the live object (``live_rename_line``)."""
    lines = [live_rename_line(r, obj) if r.get("removed_in") and obj is not None else rename_line(r)
             for r in renames_for(asked)]
    lines += kwarg_lines(obj) + key_lines(obj)
    lines += [entry_line(e) for e in error_entries(asked, obj)]
    return list(dict.fromkeys(lines))


# ---------------------------------------------------------------------------- older releases
SHOWN_FIXES = 8  # fixes listed by number in one note; the rest are counted


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
            + f" (src/torchrl_skill/data/upstream_index.json, pytorch/rl at {built})")


def version_notes(name: str, versions: dict) -> list[str]:
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
