"""The bundle's own notes on a name, for ``scripts/explain.py``: rows of the rename table
(``sub-skills/development-and-testing/scripts/api_changes.json``) and error-index entries
(``scripts/error_index.json``) whose ``names`` list the name or a class it inherits from.
Each note carries a bundle-relative link to the reference section that holds it.
"""

from __future__ import annotations

import dataclasses
import sys

import _error_index as ei
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
        if hit:
            new = f"{row['new']}=" if row.get("new") else "(drop it)"
            when = [f"deprecated in {row['deprecated_in']}" if row.get("deprecated_in") else "",
                    f"removed in {row['removed_in']}" if row.get("removed_in") else "still accepted"]
            out.append(f"keyword {row['old']}= -> {new}: {', '.join(w for w in when if w)} "
                       f"(on {row['callable']}) [{API_PAGE}#keyword-arguments]")
    return out


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


def notes_for(asked: str, obj) -> list[str]:
    """Every note line for a found name, renames first."""
    lines = [rename_line(r) for r in renames_for(asked)]
    lines += kwarg_lines(obj) + key_lines(obj)
    lines += [entry_line(e) for e in error_entries(asked, obj)]
    return list(dict.fromkeys(lines))
