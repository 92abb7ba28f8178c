"""Stamp the versions each fact was verified on into the error index and the API-changes table.

Mechanical and re-runnable (run it again after merging new entries):

- ``src/torchrl_skill/data/error_index.json``: every entry gets one line after its ``"versions"`` line,
  ``"since": ..., "until": ..., "verified_on": [...]`` (the line is replaced when present;
  nothing else in the file is touched). ``since``/``until`` are read from the ``versions``
  text (``torchrl 0.11.0 and later`` -> since 0.11.0; ``fixed in 0.11.0 and 0.14`` -> until
  0.14.0); ``verified_on`` is the verified torchrl (the whole suite proves every entry there)
  plus each line's torchrl on which the version matrix ran the entry's proof (its trigger
  through tests/test_error_index.py, or its named test) and it passed. An entry that cannot
  be reproduced here (``unreproducible``) gets no ``verified_on``.
- ``src/torchrl_skill/data/api_changes.json``: every row gets
  ``verified_on``: the verified torchrl plus each line where ``_versions.check_rows`` held.

Reads benchmarks/version_matrix.json (written by ``version_matrix.py --write``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))  # the bundle's package
from torchrl_skill.stack.probe import VERIFIED, _release  # noqa: E402
from torchrl_skill import data  # noqa: E402

INDEX = data.ERROR_INDEX
TABLE = data.API_CHANGES
MATRIX = ROOT / "benchmarks" / "version_matrix.json"
TRIGGER_NODE = "tests/test_error_index.py::test_trigger_raises_the_real_error_and_the_index_ranks_it_first[{}]"
VERSION = r"(\d+\.\d+(?:\.\d+)?)"


def full(v: str) -> str:
    return v if v.count(".") == 2 else v + ".0"


def since_until(text: str) -> tuple[str | None, str | None]:
    """``(since, until)`` read from an entry's ``versions`` text; None where it says nothing."""
    since = until = None
    m = re.search(rf"torchrl(?:/tensordict)? {VERSION} (?:and later|to {VERSION})", text)
    if m:
        since = full(m.group(1))
    m = re.match(r"\s*fixed (?:in|by) ([^;]*)", text)
    if m:
        found = re.findall(VERSION, m.group(1))
        if found:
            until = full(max(found, key=_release))
    return since, until


def held(matrix: dict, group: str) -> dict[str, set[str]]:
    """``{torchrl version run: set of items that passed}`` for one group of the matrix."""
    out = {}
    for line in matrix.get("lines", {}).values():
        g = line["groups"].get(group)
        if g:
            out[line["stack"]["torchrl"]] = set(g.get("passed_items", []))
    return out


def verified(node: str | None, passed: dict[str, set[str]]) -> list[str]:
    versions = {VERIFIED["torchrl"]} | {v for v, items in passed.items() if node in items or
                                        (node and any(i.startswith(node + "[") for i in items))}
    return sorted(versions, key=_release)


def stamp_index(matrix: dict) -> int:
    passed = held(matrix, "proofs")
    lines = INDEX.read_text(encoding="utf-8").splitlines(keepends=True)
    raw = {e["id"]: e for e in json.loads(INDEX.read_text(encoding="utf-8"))["entries"]}
    out, entry, changed, i = [], {}, 0, 0
    while i < len(lines):
        line = lines[i]
        if re.match(r'\s*"id": "', line):
            entry = {"id": re.search(r'"id": "([^"]+)"', line).group(1)}
        out.append(line)
        m = re.match(r'(\s*)"versions": (".*"),\s*$', line)
        if m:
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            if re.match(r'\s*"since": ', nxt):
                i += 1  # the stamp of an earlier run: replaced below
            rec = raw[entry["id"]]
            since, until = since_until(json.loads(m.group(2)))
            fields = {"since": since, "until": until}
            if not rec.get("unreproducible") or rec.get("proof"):
                proof = rec.get("proof", "")
                node = TRIGGER_NODE.format(rec["id"]) if proof.startswith("tests/error_triggers/") else proof or None
                fields["verified_on"] = verified(node, passed)
            out.append(f"{m.group(1)}{json.dumps(fields)[1:-1]},\n")
            changed += 1
        i += 1
    INDEX.write_text("".join(out), encoding="utf-8")
    json.loads(INDEX.read_text(encoding="utf-8"))  # still JSON
    return changed


def stamp_table(matrix: dict) -> int:
    passed = held(matrix, "rows")
    table = json.loads(TABLE.read_text(encoding="utf-8"))
    n = 0
    for section in ("names", "deprecated", "kwargs", "keys"):
        for row in table.get(section, []):
            label = {"names": f"names:{row['old']}", "deprecated": f"deprecated:{row['old']}",
                     "kwargs": f"kwargs:{row.get('callable')}({row['old']}=)", "keys": f"keys:{row['old']}"}[section]
            row["verified_on"] = verified(label, passed)
            n += 1
    TABLE.write_text(json.dumps(table, indent=1, ensure_ascii=False), encoding="utf-8")
    return n


def build_parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(description=__doc__.strip(), formatter_class=argparse.RawDescriptionHelpFormatter,
                                   epilog="exit codes:\n  0    stamped\n  2    benchmarks/version_matrix.json is missing")


def main(argv=None) -> int:
    build_parser().parse_args(argv)
    if not MATRIX.exists():
        print(f"stamp_versions.py: error: {MATRIX.relative_to(ROOT)} is missing; fix: run "
              "python benchmarks/version_matrix.py, then --write", file=sys.stderr)
        return 2
    matrix = json.loads(MATRIX.read_text())
    print(f"error_index.json: {stamp_index(matrix)} entries stamped; api_changes.json: {stamp_table(matrix)} rows stamped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
