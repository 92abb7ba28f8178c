"""Reading a saved traceback or log for smoke_collector.py --diagnose: the cause and fix of
every known fault in it, from the bundle's error index (src/torchrl_skill/data/error_index.json via
explain/error_index.match) and, for names torchrl removed, the exact replacement from
src/torchrl_skill/data/api_changes.json.
"""

from __future__ import annotations

import re
from pathlib import Path

from torchrl_skill import data

from torchrl_skill.report import skill_report as sr

# The bundle's single list of renamed/removed TorchRL names (owned by development-and-testing).
API_CHANGES = data.API_CHANGES


def renamed_collectors(path: Path | None = None) -> dict[str, dict]:
    """Removed collector names: ``{"torchrl.collectors.Old": row}`` from api_changes.json.

    Each row has ``old``/``new`` (dotted paths), ``changed_in``, optional ``deprecated_in`` and
    ``removed_in`` (the rows of ``names`` whose ``old`` lives under ``torchrl.collectors``).
    Raises ``sr.CannotRun`` (exit 2) when the file is missing or has no such row.
    """
    path = Path(path or API_CHANGES)
    try:
        rows = data.api_changes(path)["names"]
    except (OSError, ValueError, KeyError) as exc:
        sr.cannot_run(f"cannot read the renamed-name table {path}: {exc}", "restore the bundle's api_changes.json")
    out = {r["old"]: r for r in rows if r["old"].startswith("torchrl.collectors.")}
    if not out:
        sr.cannot_run(f"{path} lists no torchrl.collectors row", "restore the bundle's api_changes.json")
    return out


def removed_name_findings(text: str, api_changes: Path | None = None) -> list[tuple[str, str]]:
    """``(matched text, finding)`` for each ``cannot import name 'X' from 'torchrl.collectors...'``
    whose X is a removed name of ``api_changes`` (default: the bundle's api_changes.json)."""
    found = []
    table = None
    for m in re.finditer(r"cannot import name '(\w+)' from '(torchrl\.collectors[\w.]*)'", text):
        table = table if table is not None else renamed_collectors(api_changes)
        row = table.get(f"{m.group(2)}.{m.group(1)}")
        if row is None:
            continue
        module, _, name = row["new"].rpartition(".")
        gone = f"removed in torchrl {row['removed_in']}" if row.get("removed_in") else f"changed in torchrl {row['changed_in']}"
        found.append((m.group(0), f"{m.group(2)}.{m.group(1)} was {gone}; fix: from {module} import {name}"))
    return found


def index_findings(text: str) -> list[tuple[str, str]]:
    """``(matched text, "cause; fix: ... [id]")`` for each error-index entry whose signature or
    pattern occurs in ``text`` (explain/error_index.match; near misses are left out)."""
    from torchrl_skill.explain import error_index as _error_index

    hits = _error_index.match(text, limit=len(_error_index.load()))
    def plain(entry, name: str) -> str:
        return entry.plain(name).replace("`", "").rstrip(".")

    return [(what, f"{plain(entry, 'cause')}; fix: {plain(entry, 'fix')} [{entry.id}]") for score, entry, what in hits if score >= 90]


def diagnose(text: str, api_changes: Path | None = None) -> list[str]:
    """Every known fault found in ``text`` (a traceback or log), each as ``"cause; fix: ..."``.

    A finding whose matched text lies inside a longer one's is left out: the longer text is
    the more specific diagnosis (e.g. ``... (length range: 1 - 1 / ...`` over the generic
    SliceSampler message, the exact replacement of a removed name over the index entry
    that lists them all). Returns [] when nothing is known.
    """
    found = sorted(removed_name_findings(text, api_changes) + index_findings(text), key=lambda hit: -len(hit[0]))
    kept: list[tuple[str, str]] = []
    for what, finding in found:
        if not any(what in longer for longer, _ in kept) and finding not in (f for _, f in kept):
            kept.append((what, finding))
    return [finding for _, finding in kept]


def read_log(path: str) -> str:
    """The text of a saved log; exits 2 with one line when it is missing, a folder or binary."""
    p = Path(path).expanduser()
    if not p.exists():
        sr.cannot_run(f"--diagnose {path}: no such file", "pass the path of a saved traceback or log")
    if p.is_dir():
        sr.cannot_run(f"--diagnose {path} is a folder", "pass the log file itself, e.g. --diagnose worker.log")
    try:
        raw = p.read_bytes()
    except OSError as err:
        sr.cannot_run(f"--diagnose {path}: cannot read it ({err.strerror or err})", "check the path and its permissions")
    if b"\x00" in raw:
        sr.cannot_run(f"--diagnose {path} is not a text file (it holds NUL bytes)", "pass the saved traceback or log")
    return raw.decode("utf-8", errors="replace")
