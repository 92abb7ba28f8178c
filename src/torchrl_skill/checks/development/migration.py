"""``scan_api_drift.py --to LINE``: what a project written for the installed torchrl must
change to run on a newer release line, and what it gains.

Reads the user's files with ``ast`` only (nothing is imported or run) and judges every
torchrl name they import or use, and every keyword they pass to a torchrl callable,
against the rows of api_changes.json that take effect after the installed release and by
the target line (``src/torchrl_skill/stack/versions.py``), and against which public package exports each
name in the target line (``src/torchrl_skill/data/upstream_index.json``). The fixes listed are the bug
fixes upstream made after the installed release and by the target line to names the
files use.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from torchrl_skill.stack import versions as _versions
from torchrl_skill.checks.development.drift_scan import dotted_name, iter_sources
from torchrl_skill.stack.probe import _release, line_of


@dataclass(frozen=True)
class Use:
    """One torchrl name used at ``path:line`` (``keyword``: a keyword passed in a call to it)."""

    path: str
    line: int
    dotted: str
    keyword: str | None = None
    imported_from: str | None = None  # ``from torchrl.X import Name``: the package named


class _Uses(ast.NodeVisitor):
    def __init__(self, path: str):
        self.path, self.aliases, self.uses = path, {}, []

    def _dotted(self, node) -> str | None:
        return dotted_name(node, self.aliases)

    def visit_Import(self, node):
        for a in node.names:
            if a.name.split(".")[0] == "torchrl":
                self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                self.uses.append(Use(self.path, node.lineno, a.name))

    def visit_ImportFrom(self, node):
        if node.module and node.module.split(".")[0] == "torchrl" and not node.level:
            for a in node.names:
                dotted = f"{node.module}.{a.name}"
                self.aliases[a.asname or a.name] = dotted
                self.uses.append(Use(self.path, node.lineno, dotted, imported_from=node.module))

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load) and node.id in self.aliases and "." in self.aliases[node.id]:
            self.uses.append(Use(self.path, node.lineno, self.aliases[node.id]))

    def visit_Attribute(self, node):
        dotted = self._dotted(node)
        if dotted and isinstance(node.ctx, ast.Load):
            self.uses.append(Use(self.path, node.lineno, dotted))
        else:
            self.generic_visit(node)

    def visit_Call(self, node):
        dotted = self._dotted(node.func)
        if dotted:
            self.uses += [Use(self.path, node.lineno, dotted, keyword=k.arg) for k in node.keywords if k.arg]
        self.generic_visit(node)


def uses_in(paths: list[Path]) -> tuple[list[Use], list[str]]:
    """Every torchrl use in the files under ``paths`` and the files that could not be parsed."""
    uses, bad = [], []
    for path, text in iter_sources(paths):
        try:
            tree = ast.parse(text)
        except SyntaxError:
            bad.append(path)
            continue
        visitor = _Uses(path)
        visitor.visit(tree)
        uses += visitor.uses
    return uses, bad


def _tail(dotted: str) -> str:
    return dotted.rsplit(".", 1)[-1]


def _matches(row_old: str, dotted: str, kind: str | None) -> bool:
    if kind == "module":
        return dotted == row_old or dotted.startswith(row_old + ".")
    return dotted == row_old or (_tail(dotted) == _tail(row_old) and dotted.split(".")[0] == "torchrl")


@dataclass(frozen=True)
class Step:
    """One change the target line asks of the user's code. ``breaks``: the target rejects the
    current code (a removed name or keyword); else it still works there, with a warning."""

    use: Use
    old: str
    new: str | None
    when: str
    breaks: bool

    def text(self) -> str:
        new = self.new or "(no replacement; remove it)"
        return f"{self.use.path}:{self.use.line} {self.old} -> {new} ({self.when})"


def plan(uses: list[Use], installed: str, target: str) -> list[Step]:
    """The steps for ``uses`` from ``installed`` to line ``target`` (``"0.14"``), file order."""
    table = _versions.api_changes()
    steps: dict[tuple, Step] = {}

    def in_range(version: str | None) -> bool:
        return bool(version) and _versions.after(version, installed) and _release(line_of(version)) <= _release(target)

    for use in uses:
        if use.keyword is None:
            for row in table["names"]:
                if in_range(row.get("removed_in")) and _matches(row["old"], use.dotted, row.get("kind")):
                    steps[(use.path, use.line, row["old"])] = Step(use, use.dotted, row.get("new"), f"removed in {row['removed_in']}", True)
            for row in table["deprecated"]:
                gone = row.get("removed_in")
                if _matches(row["old"], use.dotted, None) and not _versions.after(row["deprecated_in"], target + ".99"):
                    breaks = row.get("status") == "raises" or in_range(gone)
                    steps.setdefault((use.path, use.line, row["old"]), Step(
                        use, use.dotted, row.get("new"), f"deprecated in {row['deprecated_in']}" + (f", removed in {gone}" if gone else ""), breaks))
            if use.imported_from:
                moved = _export_step(use, installed, target)
                if moved is not None:
                    steps.setdefault((use.path, use.line, use.dotted), moved)
        else:
            for row in table["kwargs"]:
                if in_range(row.get("removed_in")) and _tail(use.dotted) == _tail(row["callable"]) and use.keyword == row["old"]:
                    new = f"{row['new']}=" if row.get("new") else None
                    steps[(use.path, use.line, row["old"])] = Step(use, f"{use.dotted}({row['old']}=)", new,
                                                                   f"removed in {row['removed_in']}", True)
    return sorted(steps.values(), key=lambda s: (s.use.path, s.use.line, s.old))


def _export_step(use: Use, installed: str, target: str) -> Step | None:
    """A ``from torchrl.X import Name`` that the target line's torchrl.X no longer exports."""
    where = _versions.upstream()["exports"].get(_tail(use.dotted))
    if not where or use.imported_from not in where or line_of(installed) not in where[use.imported_from]:
        return None  # not a public export here: not judged
    if target in where[use.imported_from]:
        return None
    there = sorted(p for p, lines in where.items() if target in lines)
    new = f"{there[0]}.{_tail(use.dotted)}" if there else None
    return Step(use, use.dotted, new, f"not exported by {use.imported_from} in {target}", True)


def fixes_for_uses(uses: list[Use], installed: str, target: str) -> dict[str, list[dict]]:
    """``{name used: fixes}``: upstream bug fixes after ``installed`` and by ``target`` to names the files use."""
    out: dict[str, list[dict]] = {}
    names = sorted({_versions._member(u.dotted.split("torchrl.", 1)[-1]) for u in uses if u.keyword is None})
    between = _versions.fixes_between(installed, target)
    for name in names:
        top = name.split(".")[0]
        hits = [f for f in between if any(t == name or t.split(".")[0] == top for t in f.get("names", []))]
        if hits and top[:1].isupper():
            out[top] = sorted({f["pr"]: f for f in out.get(top, []) + hits}.values(), key=lambda f: f["pr"])
    return out
