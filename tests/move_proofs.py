"""Move proof bookkeeping out of the text an agent reads, into tests/proofs.json.

A section of a reference proves its claims with tests (CONTRIBUTING.md, "How a claim is
proven"). Which tests is bookkeeping for this repository, not guidance for an agent, so it
lives in one sidecar, ``tests/proofs.json``::

    {"about": "...", "files": {"references/x.md": {"Section heading": ["tests/test_x.py::test_y"],
                                                  "Another heading": "no-claims"}}}

keyed by the markdown file (relative to the bundle root) and the heading of its ``## ``
section (the unit the docs test checks, ``doccheck.check_proofs``); ``"(top)"`` is the text
before the first section. This script finds every ``<!-- proof: ID[, ID] -->`` and
``<!-- no-claims -->`` comment in the agent-facing markdown (``doccheck.agent_markdown``:
every SKILL.md and reference; not in code blocks or generated blocks), adds it to its
section's entry (tests listed once, in order; tests win over ``no-claims``) and deletes the
comment from the file. Idempotent: a second run changes nothing. Entries naming a section no
longer there are kept and printed (a renamed heading: rename the key); the docs test fails
on them.

Usage: ``python tests/move_proofs.py [--check]`` from the repository root. ``--check``
changes nothing and exits 1 when a comment is left to move.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import doccheck as dc  # noqa: E402

SIDECAR = "tests/proofs.json"
TOP = "(top)"
NO_CLAIMS = "no-claims"
ABOUT = ("Which tests prove each section of the agent-facing markdown (CONTRIBUTING.md, 'How a claim is "
         "proven'). files -> markdown path -> '## ' heading (without the hashes; '(top)' before the first) -> "
         "a list of pytest ids, or 'no-claims' for a section that states no behaviour. Checked by "
         "tests/test_docs_contract.py; new <!-- proof: --> comments are moved here by python tests/move_proofs.py.")
COMMENT_RE = re.compile(r"<!--\s*(?:proof:\s*(.*?)|no-claims)\s*-->", re.S)


def load(root: Path) -> dict:
    """The sidecar as ``{"about": str, "files": {path: {heading: [ids] | "no-claims"}}}``;
    an empty one when the file does not exist. Raises ValueError on a malformed file."""
    path = root / SIDECAR
    if not path.exists():
        return {"about": ABOUT, "files": {}}
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        raise ValueError(f"{SIDECAR}: expected an object with a 'files' object")
    return data


def _skipped_lines(text: str) -> set[int]:
    """0-based lines inside code blocks and generated blocks: comments there are content."""
    out: set[int] = set()
    for tok in dc._tokens(text):
        if tok.type in ("fence", "code_block") and tok.map:
            out.update(range(*tok.map))
    for m in dc.GENERATED_RE.finditer(text):
        out.update(range(text.count("\n", 0, m.start()), text.count("\n", 0, m.end()) + 1))
    return out


def _heading_at(starts: list[tuple[int, str]], line: int) -> str:
    title = TOP
    for start, name in starts:
        if start <= line:
            title = name
    return title


def _merge(entry: dict, heading: str, ids: list[str] | None) -> None:
    have = entry.get(heading)
    if ids is None:  # a no-claims marker: tests already listed win
        entry.setdefault(heading, NO_CLAIMS)
        return
    tests = have if isinstance(have, list) else []
    entry[heading] = tests + [i for i in ids if i not in tests]


def extract(text: str) -> tuple[str, list[tuple[str, list[str] | None]]]:
    """``(text without the comments, [(heading, ids or None for no-claims)])``.

    A line holding nothing but comments is deleted (and a blank line doubled by that is
    dropped); a comment sharing a line with text is cut out of the line."""
    skipped = _skipped_lines(text)
    starts = [(s.line - 1, s.title) for s in dc.sections(text)]
    found: list[tuple[str, list[str] | None]] = []
    spans: list[tuple[int, int]] = []
    for m in COMMENT_RE.finditer(text):
        line = text.count("\n", 0, m.start())
        if line in skipped:
            continue
        ids = None if m.group(1) is None else [i.strip() for i in m.group(1).split(",") if i.strip()]
        found.append((_heading_at(starts, line), ids))
        spans.append((m.start(), m.end()))
    for start, end in reversed(spans):
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", end)
        line_end = len(text) if line_end < 0 else line_end + 1
        if not text[line_start:start].strip() and not text[end:line_end].strip():
            start, end = line_start, line_end  # the comment was the whole line
            text = text[:start] + text[end:]
            if text[:start].endswith("\n\n") and text[start:].startswith("\n"):
                text = text[:start] + text[start + 1:]
        else:
            text = text[:start].rstrip(" \t") + (" " if text[end:line_end].strip() and text[line_start:start].strip() else "") + text[end:].lstrip(" \t")
    return text, found


def move(root: Path = dc.BUNDLE, write: bool = True) -> tuple[list[str], list[str]]:
    """Move every comment of ``dc.agent_markdown(root)`` into ``root/tests/proofs.json``.

    Returns ``(moved, stale)``: ``"path: heading"`` per comment moved, and ``"path: heading"``
    per sidecar entry whose section is not in its file. ``write=False`` changes nothing."""
    data = load(root)
    files = data["files"]
    moved: list[str] = []
    for md in dc.agent_markdown(root):
        rel = md.relative_to(root).as_posix()
        text = md.read_text(encoding="utf-8")
        new, found = extract(text)
        if not found:
            continue
        entry = files.setdefault(rel, {})
        for heading, ids in found:
            _merge(entry, heading, ids)
            moved.append(f"{rel}: {heading}")
        if write:
            md.write_text(new, encoding="utf-8")
    stale = []
    ordered: dict = {}
    for rel in sorted(files):
        md = root / rel
        titles = [s.title for s in dc.sections(md.read_text(encoding="utf-8"))] if md.exists() else []
        entry = files[rel]
        stale += [f"{rel}: {h}" for h in entry if h != TOP and h not in titles]
        # document order, stale headings last (kept for a person to rename)
        ordered[rel] = {h: entry[h] for h in sorted(entry, key=lambda h: (titles.index(h) if h in titles else (-1 if h == TOP else len(titles))))}
    if write and (moved or not (root / SIDECAR).exists()):
        body = json.dumps({"about": data.get("about", ABOUT), "files": ordered}, indent=1, ensure_ascii=False)
        (root / SIDECAR).write_text(body + "\n", encoding="utf-8")
    return moved, stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a comment is left to move")
    args = parser.parse_args(argv)
    moved, stale = move(write=not args.check)
    for m in moved:
        print(("to move: " if args.check else "moved: ") + m)
    for s in stale:
        print(f"stale: {s} (no such section: rename its key in {SIDECAR})", file=sys.stderr)
    print(f"{len(moved)} comment(s) {'to move' if args.check else 'moved'}, {len(stale)} stale entr{'y' if len(stale) == 1 else 'ies'}")
    return 1 if args.check and moved else 0


if __name__ == "__main__":
    sys.exit(main())
