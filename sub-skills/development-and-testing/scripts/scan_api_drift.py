"""Scan Python files for TorchRL API drift: names, keys and keywords the installed torchrl rejects.

Parses each file with the standard `ast` module (no regex, nothing is executed) and
reports, as FILE:LINE old -> new (versions): every torchrl/tensordict name imported or
used that the installed version no longer has (with its replacement from
api_changes.json, or where the same name lives now), every read/write of the legacy
"sample_log_prob" string key (td["sample_log_prob"]), keyword arguments the installed
signatures reject (plus known renamed keywords that hide behind **kwargs), and
deprecated names (failures only with --strict). The legacy key passed as an explicit
setting - log_prob_key="sample_log_prob" to an actor, or
loss.set_keys(sample_log_prob="sample_log_prob") - is valid on 0.14.1 (a PPO loss built
from that actor adopts the key) and is printed as a passing [key-note], never a failure,
even with --strict. Folders are scanned recursively (*.py, *.ipynb). Exits 1 when it
finds drift. With no PATH it scans a bundled example written against torchrl 0.14.1
(expected clean).
"""

from __future__ import annotations

import ast
import difflib
import inspect
import json
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import skill_report as sr  # noqa: E402
import _api_table as at  # noqa: E402

EXAMPLE = (
    "python sub-skills/development-and-testing/scripts/scan_api_drift.py my_project/ train.py --strict"
)
DEFAULT_EXAMPLE = Path(__file__).resolve().parents[1] / "assets" / "modern_example.py"
ROOTS = ("torchrl", "tensordict")
LEGACY_KEYS_FLAG = "set_composite_lp_aggregate"
# Keywords that *configure* which log-prob key is written/read: a legacy key passed here is an
# explicit, valid choice on 0.14.1 (reported as a note), not a stale hard-coded read.
KEY_SETTING_KWARGS = {"log_prob_key": None, "sample_log_prob": "set_keys"}  # keyword -> required method name
KEY_NOTE = {
    "log_prob_key": (
        "valid on torchrl 0.14.1: the actor writes this key and ClipPPOLoss/PPOLoss built from the same actor "
        "adopt it (loss.tensor_keys.sample_log_prob == {old}); it breaks only where something reads {new} "
        "instead: a hard-coded td[{new}], a loss built from another actor, or data stored with the default key"
    ),
    "sample_log_prob": (
        "valid on torchrl 0.14.1: the loss reads {old}, right for data stored under that key (old data, or an actor "
        "built with log_prob_key={old}); data from an actor with the default key holds {new} instead"
    ),
}
# Where to look for a name that moved (searched in order, first hit wins).
SEARCH_MODULES = (
    "torchrl.collectors", "torchrl.collectors.distributed", "torchrl.data", "torchrl.data.llm",
    "torchrl.envs", "torchrl.envs.utils", "torchrl.envs.llm", "torchrl.envs.llm.transforms",
    "torchrl.modules", "torchrl.modules.llm", "torchrl.modules.models.llm", "torchrl.objectives",
    "torchrl.objectives.value", "torchrl.objectives.llm", "torchrl.trainers", "torchrl.record",
    "torchrl.record.loggers", "torchrl.weight_update", "tensordict", "tensordict.nn",
)
SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", "site-packages", "node_modules", ".tox"}


@dataclass
class Finding:
    """One drift item. ``severity``: "error" (breaks on this stack) or "deprecated"."""

    path: str
    line: int
    kind: str  # name | key | key-note | kwarg | deprecated | unverified | syntax
    old: str
    new: str | None
    versions: str
    severity: str = "error"
    note: str = ""

    def text(self) -> str:
        if self.kind == "unverified":
            return f"{self.path}:{self.line} [unverified] {self.old}: not checked ({self.note})"
        if self.kind == "key-note":
            return f"{self.path}:{self.line} [key-note] {self.old} ({self.note}; not a failure)"
        arrow = f"{self.old} -> {self.new}" if self.new else f"{self.old} (no replacement; remove it)"
        extra = f"; {self.note}" if self.note else ""
        return f"{self.path}:{self.line} [{self.kind}] {arrow} ({self.versions}){extra}"


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("paths", nargs="*", help="files or folders to scan (default: the bundled modern example)")
    parser.add_argument("--strict", action="store_true", help="also fail on deprecated names/keywords that still work")
    parser.add_argument("--table", default=str(at.TABLE_PATH), help="api_changes.json to use (default: the bundled one)")
    return parser


# --------------------------------------------------------------------------- sources


def iter_sources(paths: list[Path]):
    """Yield ``(display_path, source_text)`` for each .py file and each .ipynb (code cells joined).

    Notebook lines starting with ``%`` or ``!`` (IPython magics) are blanked so line numbers
    stay meaningful within the joined cells. Raises ``FileNotFoundError`` for a missing path.
    """
    for p in paths:
        if not p.exists():
            raise FileNotFoundError(str(p))
        files = [p] if p.is_file() else sorted(
            f for f in p.rglob("*") if f.suffix in (".py", ".ipynb") and not (SKIP_DIRS & set(f.parts))
        )
        for f in files:
            text = f.read_text(encoding="utf-8", errors="replace")
            if f.suffix == ".ipynb":
                try:
                    cells = json.loads(text).get("cells", [])
                except json.JSONDecodeError:
                    continue
                lines = []
                for cell in cells:
                    if cell.get("cell_type") == "code":
                        src = cell.get("source", "")
                        src = "".join(src) if isinstance(src, list) else src
                        lines += ["" if ln.lstrip().startswith(("%", "!")) else ln for ln in src.splitlines()]
                text = "\n".join(lines)
            yield str(f), text


# --------------------------------------------------------------------------- scanner


class _Scanner(ast.NodeVisitor):
    """Collect drift findings for one module's AST.

    ``aliases`` maps a local name to the dotted torchrl/tensordict path it stands for;
    ``instances`` maps a variable to the class path of the object assigned to it (a
    flow-insensitive guess used only to check method keywords).
    """

    def __init__(self, path: str, table: dict):
        self.path = path
        self.table = table
        self.aliases: dict[str, str] = {}
        self.instances: dict[str, str] = {}
        self.findings: list[Finding] = []
        self.legacy_lp = False
        self._seen: set[tuple] = set()
        self._setting_consts: set[int] = set()  # ids of Constant nodes passed as a key setting
        self.names_by_old = {r["old"]: r for r in table["names"]}
        self.names_by_tail: dict[str, list[dict]] = {}
        for r in table["names"]:
            self.names_by_tail.setdefault(r["old"].rsplit(".", 1)[-1], []).append(r)
        self.deprecated = {r["old"]: r for r in table["deprecated"]}
        self.dep_by_tail = {r["old"].rsplit(".", 1)[-1]: r for r in table["deprecated"]}
        self.n_refs = 0
        self.n_calls = 0

    # ---- helpers
    def _add(self, f: Finding):
        key = (f.line, f.kind, f.old)
        if key not in self._seen:
            self._seen.add(key)
            self.findings.append(f)

    def _dotted(self, node) -> str | None:
        """Dotted torchrl/tensordict path an expression refers to, via the import aliases."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self._dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def _row_for(self, dotted: str) -> dict | None:
        if dotted in self.names_by_old:
            return self.names_by_old[dotted]
        # module rows: torchrl.data.rlhf.PromptData matches torchrl.data.rlhf
        for old, row in self.names_by_old.items():
            if row.get("kind") == "module" and dotted.startswith(old + "."):
                return row
        tail = dotted.rsplit(".", 1)[-1]
        rows = self.names_by_tail.get(tail, [])
        return rows[0] if rows else None

    def _current(self, dotted: str | None) -> str | None:
        """``dotted`` if it resolves, else its replacement from the table (or None)."""
        if not dotted:
            return None
        if at.exists(dotted):
            return dotted
        row = self._row_for(dotted)
        return row["new"] if row and row.get("new") and at.exists(row["new"]) else None

    def _deprecated_row(self, dotted: str) -> dict | None:
        row = self.deprecated.get(dotted)
        if row is None:
            cand = self.dep_by_tail.get(dotted.rsplit(".", 1)[-1])
            if cand and dotted.split(".")[0] == "torchrl" and at.exists(dotted):
                obj = at.resolve(dotted)
                row = cand if at.exists(cand["old"]) and obj is at.resolve(cand["old"]) else None
        return row

    def _check_ref(self, dotted: str, line: int) -> None:
        """Report ``dotted`` if the installed stack lacks it (or it is deprecated).

        The shortest missing prefix is reported, and only when its parent is a module (a
        missing attribute of a class may be an instance attribute, so it is not judged).
        """
        self.n_refs += 1
        row = self._deprecated_row(dotted)
        if row is not None:
            raises = row.get("status") == "raises"
            self._add(Finding(self.path, line, "name" if raises else "deprecated", dotted, row["new"],
                              at.version_phrase(row), "error" if raises else "deprecated",
                              row.get("note", "")))
            return
        parts = dotted.split(".")
        for cut in range(1, len(parts) + 1):
            prefix = ".".join(parts[:cut])
            try:
                found = at.resolve(prefix)
            except ImportError as err:  # module exists but an optional dependency is absent
                self._add(Finding(self.path, line, "unverified", prefix, None, "not checked", "note",
                                  f"import failed here: {str(err).splitlines()[0][:120]}"))
                return
            if found is at._MISSING:
                break
            if cut < len(parts) and not inspect.ismodule(found):
                return  # attribute of a class/function: not judged
        else:
            return
        if cut > 1:
            parent = at.resolve(".".join(parts[: cut - 1]))
            if parent is not at._MISSING and not inspect.ismodule(parent):
                return
        full = dotted
        row = self._row_for(full)
        if row is None and prefix != full:
            row = self._row_for(prefix)
        if row is not None:
            new = row["new"]
            if row.get("kind") == "module" and full.startswith(row["old"] + "."):
                new = row["new"] + full[len(row["old"]):]
            self._add(Finding(self.path, line, "name", full, new, at.version_phrase(row)))
            return
        where = _find_elsewhere(full.rsplit(".", 1)[-1])
        gone = f"module {prefix} does not exist" if prefix != full else ""
        self._add(Finding(self.path, line, "name", full, where, "absent in installed torchrl "
                          + (sr.installed_version("torchrl") or "?"),
                          note="; ".join(x for x in (gone, "" if where else "not in api_changes.json; check the release notes") if x)))

    # ---- imports
    def visit_Import(self, node: ast.Import):
        for a in node.names:
            if a.name.split(".")[0] in ROOTS:
                if a.asname:
                    self.aliases[a.asname] = a.name
                    self._check_ref(a.name, node.lineno)
                else:
                    self.aliases[a.name.split(".")[0]] = a.name.split(".")[0]
                    if "." in a.name:
                        self._check_ref(a.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom):
        mod = node.module or ""
        if node.level or mod.split(".")[0] not in ROOTS:
            return
        for a in node.names:
            if a.name == "*":
                continue
            dotted = f"{mod}.{a.name}"
            self.aliases[a.asname or a.name] = dotted
            self._check_ref(dotted, node.lineno)

    # ---- uses
    def visit_Attribute(self, node: ast.Attribute):
        dotted = self._dotted(node)
        if dotted and "." in dotted:
            # only check the outermost attribute chain once
            self._check_ref(dotted, node.lineno)
            return
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign):
        if isinstance(node.value, ast.Call):
            cls = self._current(self._dotted(node.value.func))
            if cls:
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        self.instances[t.id] = cls
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant):
        if id(node) in self._setting_consts:
            return  # reported as a key-note by visit_Call
        for row in self.table["keys"]:
            if node.value == row["old"]:
                self._add(Finding(self.path, node.lineno, "key", repr(row["old"]), repr(row["new"]),
                                  at.version_phrase(row),
                                  note="or wrap module construction in tensordict.nn.set_composite_lp_aggregate(True)"))

    def visit_Call(self, node: ast.Call):
        self.n_calls += 1
        func = self._dotted(node.func)
        if func and func.rsplit(".", 1)[-1] == LEGACY_KEYS_FLAG:
            if node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value is True:
                self.legacy_lp = True
        self._key_settings(node)
        kw_names = [k.arg for k in node.keywords if k.arg]
        target = func
        if target is None and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
            cls = self.instances.get(node.func.value.id)
            if cls:
                target = f"{cls}.{node.func.attr}"
        target = self._current(target)
        if target and kw_names:
            self._check_kwargs(target, kw_names, node.lineno)
        self.generic_visit(node)

    def _key_settings(self, node: ast.Call) -> None:
        """Report a legacy key given as ``log_prob_key=`` or ``set_keys(sample_log_prob=)`` as a note.

        Facts (torchrl 0.14.1, torchrl/objectives/ppo.py ``PPOLoss.__init__``): the loss calls
        ``set_keys(sample_log_prob=actor.log_prob_keys[0])``, so a loss built from an actor
        given ``log_prob_key="sample_log_prob"`` reads that key and trains.
        """
        method = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        for kw in node.keywords:
            if kw.arg not in KEY_SETTING_KWARGS or not isinstance(kw.value, ast.Constant):
                continue
            needs = KEY_SETTING_KWARGS[kw.arg]
            if needs is not None and method != needs:
                continue
            for row in self.table["keys"]:
                if kw.value.value == row["old"]:
                    self._setting_consts.add(id(kw.value))
                    self._add(Finding(self.path, getattr(kw, "lineno", node.lineno), "key-note", f"{kw.arg}={row['old']!r}", None,
                                      at.version_phrase(row), "note",
                                      KEY_NOTE[kw.arg].format(old=repr(row["old"]), new=repr(row["new"]))))

    def _check_kwargs(self, target: str, kws: list[str], line: int) -> None:
        try:
            obj = at.resolve(target)
        except ImportError:
            return
        if obj is at._MISSING:
            return  # the name itself is reported
        for row in self.table["kwargs"]:
            if row["old"] not in kws:
                continue
            try:
                owner = at.resolve(row["callable"])
            except ImportError:
                continue
            if _applies(obj, owner, row["callable"]):
                dep = row.get("status") == "deprecated"
                self._add(Finding(self.path, line, "kwarg", f"{target.rsplit('.', 1)[-1]}({row['old']}=)",
                                  f"{row['new']}=" if row["new"] else None, at.version_phrase(row),
                                  "deprecated" if dep else "error", row.get("raises", "") or row.get("note", "")))
        params = _signature_params(obj)
        if params is None:
            return
        names, var_kw = params
        if var_kw:
            return
        for kw in kws:
            if kw not in names:
                close = difflib.get_close_matches(kw, names, n=1)
                self._add(Finding(self.path, line, "kwarg", f"{target.rsplit('.', 1)[-1]}({kw}=)",
                                  f"{close[0]}=" if close else None,
                                  f"rejected by installed signature of {target}",
                                  note=f"TypeError: unexpected keyword argument '{kw}'"))


def _applies(obj, owner, owner_path: str) -> bool:
    """True when a kwargs row for ``owner`` applies to ``obj`` (same callable, subclass, or method)."""
    if owner is at._MISSING:
        return False
    if obj is owner:
        return True
    if inspect.isclass(obj) and inspect.isclass(owner):
        return issubclass(obj, owner)
    name = getattr(obj, "__name__", None)
    qual = getattr(owner, "__qualname__", "")
    return bool(name) and qual.endswith("." + name) and name == owner_path.rsplit(".", 1)[-1]


def _signature_params(obj):
    """``(parameter names, accepts **kwargs)`` for a class or callable, or None if unknown."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    names = [p.name for p in sig.parameters.values()]
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values())
    return names, var_kw


_ELSEWHERE_CACHE: dict[str, str | None] = {}


def _find_elsewhere(name: str) -> str | None:
    """Dotted path of a public ``name`` in one of :data:`SEARCH_MODULES`, or None."""
    if name in _ELSEWHERE_CACHE:
        return _ELSEWHERE_CACHE[name]
    hit = None
    for mod in SEARCH_MODULES:
        if at.exists(f"{mod}.{name}"):
            hit = f"{mod}.{name}"
            break
    _ELSEWHERE_CACHE[name] = hit
    return hit


def scan_source(path: str, text: str, table: dict) -> tuple[list[Finding], dict]:
    """Scan one module's text. Returns ``(findings, stats)``; a syntax error is one finding.

    ``stats``: ``{"refs": int, "calls": int}`` (torchrl/tensordict references, calls seen).
    """
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as err:
        return [Finding(path, err.lineno or 0, "syntax", "unparsable", None, "not scanned",
                        note=f"SyntaxError: {err.msg}")], {"refs": 0, "calls": 0}
    sc = _Scanner(path, table)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sc.visit(tree)
    found = sc.findings
    if sc.legacy_lp:  # the file opts back into the legacy key
        found = [f for f in found if f.kind != "key"]
    actor_lines = [f.line for f in found if f.kind == "key-note" and f.old.startswith("log_prob_key=")]
    if actor_lines:  # a read stays a finding (the scanner cannot tell which actor filled the data)
        for f in found:
            if f.kind == "key":
                f.note = (f"consistent only if this data comes from the actor given log_prob_key= on line "
                          f"{actor_lines[0]}; robust: read td[loss.tensor_keys.sample_log_prob]")
    return sorted(found, key=lambda f: (f.line, f.kind)), {"refs": sc.n_refs, "calls": sc.n_calls}


def scan_paths(paths: list[Path], table: dict) -> tuple[list[Finding], list[str]]:
    """Scan files/folders. Returns ``(findings, scanned display paths)``."""
    findings, scanned = [], []
    for display, text in iter_sources(paths):
        scanned.append(display)
        f, _ = scan_source(display, text, table)
        findings += f
    return findings, scanned


# --------------------------------------------------------------------------- report


def run_checks(args, report) -> None:
    paths = [Path(p) for p in args.paths] or [DEFAULT_EXAMPLE]
    state: dict = {}

    def load():
        state["table"] = at.load_table(args.table)
        t = state["table"]
        return (f"{len(t['names'])} renamed/removed names, {len(t['keys'])} keys, "
                f"{len(t['kwargs'])} keywords, {len(t['deprecated'])} deprecated names from {Path(args.table).name}")

    report.run("drift:table", load)
    if "table" not in state:
        return

    def scan():
        findings, scanned = scan_paths(paths, state["table"])
        sr.expect(scanned, f"no .py or .ipynb files under {', '.join(map(str, paths))}")
        state["findings"], state["scanned"] = findings, scanned
        return f"parsed {len(scanned)} file(s) with ast"

    report.run("drift:parse", scan)
    if "findings" not in state:
        return
    findings = state["findings"]
    errors = [f for f in findings if f.severity == "error"]
    notes = [f for f in findings if f.kind == "key-note"]
    soft = [f for f in findings if f.severity != "error" and f.kind != "key-note"]
    for f in errors:
        report.add(f"drift:{f.kind}", "fail", f.text())
    for f in soft:
        if args.strict and f.kind != "unverified":
            report.add(f"drift:{f.kind}", "fail", f.text())
        else:
            report.add(f"drift:{f.kind}", "skip", f.text() + ("" if f.kind == "unverified" else " (pass --strict to fail)"))
    for f in notes:  # valid explicit key settings: informational, pass even with --strict
        report.add("drift:key-note", "pass", f.text())
    bad = {f.path for f in findings if f.severity == "error"}
    clean = [p for p in state["scanned"] if p not in bad]
    report.run("drift:clean-files", lambda: f"{len(clean)}/{len(state['scanned'])} file(s) use no removed name, "
               "legacy key or rejected keyword" + (f": {', '.join(Path(c).name for c in clean[:5])}" if clean else ""))




def main(argv=None):
    return sr.standard_main(__file__, build_parser, run_checks, argv)


if __name__ == "__main__":
    sr.main_guard(main)
