"""The drift scanner behind scan_api_drift.py: one pass of ``ast`` over user code.

Over ~400 lines on purpose: one visitor class holds every rule, so that each name is
resolved once through the user's imports and each finding is de-duplicated in one place.

Names are resolved through the user's own imports (``from torchrl.modules import
TanhNormal as TN``, ``import torchrl.envs as E``); nothing of the user's is executed or
imported, only the torchrl/tensordict modules the code names. Two sources of truth:

- the table (api_changes.json via _api_table.py): renamed/removed names with their
  replacement and versions, the legacy log-prob key, renamed keywords, deprecations;
- the live library (_live_api.py): every name and class attribute resolves, every
  keyword of a call is accepted by the installed callable (``**kwargs`` followed where the
  source forwards it), and every override of a torchrl method in a user subclass takes
  the calls torchrl makes.
"""

from __future__ import annotations

import ast
import difflib
import functools
import inspect
import json
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from torchrl_skill.checks.development import api_table as at
from torchrl_skill.checks.development import forwarded_kwargs as forwarded
from torchrl_skill.checks.development import live_api as live
from torchrl_skill.checks.development import live_overrides as overrides
from torchrl_skill.report.skill_report import first_line, installed_version

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
MAX_SHOWN = 40  # accepted parameter names printed in one finding
PLAIN_DECORATORS = {"staticmethod", "classmethod", "property", "setter", "getter", "deleter", "overload",
                    "abstractmethod", "cached_property"}


@dataclass
class Finding:
    """One drift item. ``severity``: "error" (breaks on this stack), "deprecated" or "note"."""

    path: str
    line: int
    kind: str  # name | attribute | key | key-note | kwarg | override | deprecated | unverified | unparsable
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
        if self.kind in ("override", "unparsable"):
            return f"{self.path}:{self.line} [{self.kind}] {self.old}: {self.note}"
        arrow = f"{self.old} -> {self.new}" if self.new else f"{self.old} (no replacement; remove it)"
        extra = f"; {self.note}" if self.note else ""
        return f"{self.path}:{self.line} [{self.kind}] {arrow} ({self.versions}){extra}"


# --------------------------------------------------------------------------- sources


def iter_sources(paths: list[Path]):
    """Yield ``(display_path, source_text)`` for each .py file and each .ipynb (code cells joined).

    Notebook lines starting with ``%`` or ``!`` (IPython magics) are blanked so line numbers
    stay meaningful within the joined cells; a notebook that is not JSON yields its raw
    text (it then fails to parse, and is reported). Paths must exist (the CLI checks).
    """
    for p in paths:
        files = [p] if p.is_file() else sorted(
            f for f in p.rglob("*") if f.suffix in (".py", ".ipynb") and not (SKIP_DIRS & set(f.parts))
        )
        for f in files:
            text = f.read_text(encoding="utf-8", errors="replace")
            if f.suffix == ".ipynb":
                try:
                    cells = json.loads(text).get("cells", [])
                except (json.JSONDecodeError, AttributeError):
                    yield str(f), text
                    continue
                lines = []
                for cell in cells:
                    if cell.get("cell_type") == "code":
                        src = cell.get("source", "")
                        src = "".join(src) if isinstance(src, list) else src
                        lines += ["" if ln.lstrip().startswith(("%", "!")) else ln for ln in src.splitlines()]
                text = "\n".join(lines)
            yield str(f), text


# --------------------------------------------------------------------------- helpers


def _doc_params(obj) -> dict[str, str]:
    """``{param: first line of its description}`` from the ``Args:`` section of a docstring."""
    docs = [getattr(obj, "__doc__", None) or ""]
    if inspect.isclass(obj):
        docs.append(getattr(obj.__init__, "__doc__", None) or "")
    out = {}
    for doc in docs:
        for m in re.finditer(r"^\s*\**(\w+)\s*(?:\([^)]*\))?\s*:\s*(\S.*)$", doc, re.M):
            out.setdefault(m.group(1), m.group(2).strip())
    return out


def closest_keyword(kw: str, accepted: list[str], obj) -> tuple[str | None, str]:
    """The accepted name ``kw`` most likely meant, and why: a close spelling (difflib), else
    the parameter whose docstring line uses a word starting with ``kw`` (``min`` ->
    ``low``: "minimum value of the distribution")."""
    close = difflib.get_close_matches(kw, accepted, n=1)
    if close:
        return close[0], ""
    if len(kw) >= 3:
        for name, line in _doc_params(obj).items():
            if name in accepted and re.search(rf"\b{re.escape(kw.lower())}", line.lower()):
                return name, f"its docstring: {line[:80]!r}"
    return None, ""


def _shown(names: list[str]) -> str:
    more = f", +{len(names) - MAX_SHOWN} more" if len(names) > MAX_SHOWN else ""
    return ", ".join(names[:MAX_SHOWN]) + more


@functools.lru_cache(maxsize=None)
def _find_elsewhere(name: str) -> str | None:
    """Dotted path of a public ``name`` in one of :data:`SEARCH_MODULES`, or None."""
    return next((f"{m}.{name}" for m in SEARCH_MODULES if at.exists(f"{m}.{name}")), None)


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


def _direct_names(obj) -> set[str]:
    """Keyword-capable parameter names of ``obj``'s own signature (empty when it has none)."""
    try:
        params = inspect.signature(obj, follow_wrapped=False).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def _user_signature(node: ast.FunctionDef) -> str:
    return f"{node.name}({ast.unparse(node.args)})"


# --------------------------------------------------------------------------- scanner


dotted_name = forwarded.dotted_name  # one alias resolver for the scanner, the planner and the kwargs check


class _Scanner(ast.NodeVisitor):
    """Collect drift findings for one module's AST.

    ``aliases`` maps a local name to the dotted torchrl/tensordict path it stands for;
    ``instances`` maps a variable to the class path of the object assigned to it (a
    flow-insensitive guess used only to check method keywords); ``bases`` maps a class
    defined in the file to the torchrl/tensordict class it derives from.
    """

    def __init__(self, path: str, table: dict):
        self.path = path
        self.table = table
        self.aliases: dict[str, str] = {}
        self.instances: dict[str, str] = {}
        self.bases: dict[str, type] = {}
        self.class_stack: list[type | None] = []
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

    def _add(self, f: Finding):
        key = (f.line, f.kind, f.old)
        if key not in self._seen:
            self._seen.add(key)
            self.findings.append(f)

    def _dotted(self, node) -> str | None:
        return dotted_name(node, self.aliases)

    def _row_for(self, dotted: str) -> dict | None:
        if dotted in self.names_by_old:
            return self.names_by_old[dotted]
        for old, row in self.names_by_old.items():  # module rows: torchrl.data.rlhf.X matches torchrl.data.rlhf
            if row.get("kind") == "module" and dotted.startswith(old + "."):
                return row
        rows = self.names_by_tail.get(dotted.rsplit(".", 1)[-1], [])
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
                row = cand if at.exists(cand["old"]) and at.resolve(dotted) is at.resolve(cand["old"]) else None
        return row

    def _check_ref(self, dotted: str, line: int, load: bool = True) -> None:
        """Report ``dotted`` if the installed stack lacks it (or it is deprecated).

        The shortest missing prefix is reported. A missing attribute of a module is a
        removed name; a missing attribute read from a class (``E.EnvBase.nope``) raises
        AttributeError too and is reported with the closest names; attributes of other
        objects are not judged.
        """
        self.n_refs += 1
        row = self._deprecated_row(dotted)
        if row is not None:
            raises = row.get("status") == "raises"
            self._add(Finding(self.path, line, "name" if raises else "deprecated", dotted, row["new"],
                              at.version_phrase(row), "error" if raises else "deprecated", row.get("note", "")))
            return
        parts = dotted.split(".")
        parent = None
        for cut in range(1, len(parts) + 1):
            prefix = ".".join(parts[:cut])
            try:
                found = at.resolve(prefix)
            except ImportError as err:  # module exists but an optional dependency is absent
                self._add(Finding(self.path, line, "unverified", prefix, None, "not checked", "note",
                                  f"import failed here: {first_line(err, 120)}"))
                return
            if found is at._MISSING:
                break
            if cut < len(parts) and not (inspect.ismodule(found) or inspect.isclass(found)):
                return  # attribute of a function or instance: not judged
            parent = found
        else:
            self._live_deprecation(dotted, found, line)
            return
        if inspect.isclass(parent):
            if load:
                names = [n for n in dir(parent) if not n.startswith("__")]
                close = difflib.get_close_matches(parts[cut - 1], names, n=3)
                self._add(Finding(self.path, line, "attribute", prefix, f"{prefix.rsplit('.', 1)[0]}.{close[0]}" if close else None,
                                  f"no attribute on installed {parent.__module__}.{parent.__qualname__}",
                                  note=f"AttributeError: type object {parent.__name__!r} has no attribute {parts[cut - 1]!r}"
                                  + (f"; closest: {', '.join(close)}" if close else "")))
            return
        row = self._row_for(dotted)
        if row is None and prefix != dotted:
            row = self._row_for(prefix)
        if row is not None:
            new = row["new"]
            if row.get("kind") == "module" and dotted.startswith(row["old"] + "."):
                new = row["new"] + dotted[len(row["old"]):]
            self._add(Finding(self.path, line, "name", dotted, new, at.version_phrase(row)))
            return
        where = _find_elsewhere(dotted.rsplit(".", 1)[-1])
        gone = f"module {prefix} does not exist" if prefix != dotted else ""
        close = []
        if inspect.ismodule(parent):
            public = getattr(parent, "__all__", None) or [n for n in dir(parent) if not n.startswith("_")]
            close = difflib.get_close_matches(parts[cut - 1], list(public), n=3)
        hint = f"closest in {prefix.rsplit('.', 1)[0]}: {', '.join(close)}" if close and not where else ""
        root = parts[0]
        self._add(Finding(self.path, line, "name", dotted, where, f"absent in installed {root} "
                          + (installed_version(root) or "?"),
                          note="; ".join(x for x in (gone, hint, "" if where or close else "not in api_changes.json; check the release notes") if x)))

    def _live_deprecation(self, shown: str, obj, line: int) -> None:
        """A name the installed library marks deprecated in its own docstring
        (:func:`_live_api.deprecation`): a deprecation finding citing its text."""
        if not (callable(obj) or isinstance(obj, property)):
            return
        marked = live.deprecation(obj)
        if marked:
            since, text = marked
            root = shown.split(".")[0] if shown.split(".")[0] in ROOTS else getattr(obj, "__module__", "torchrl").split(".")[0]
            self._add(Finding(self.path, line, "deprecated", shown, None, f"deprecated{' ' + since if since else ''} in "
                              f"installed {root} {installed_version(root) or '?'}", "deprecated", f"{text} (its docstring)"))

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
            self._check_ref(dotted, node.lineno, load=isinstance(node.ctx, ast.Load))
            return  # only the outermost attribute chain, once
        if isinstance(node.value, ast.Name) and node.value.id in self.instances:  # policy.device
            cls = at.resolve(self.instances[node.value.id])
            if inspect.isclass(cls):
                member = inspect.getattr_static(cls, node.attr, None)
                if member is not None:
                    self._live_deprecation(f"{self.instances[node.value.id]}.{node.attr}", member, node.lineno)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign):
        cls = self._current(self._dotted(node.value.func)) if isinstance(node.value, ast.Call) else None
        for t in node.targets:
            if isinstance(t, ast.Name):
                if cls:
                    self.instances[t.id] = cls
                else:
                    self.instances.pop(t.id, None)  # rebound to something else
        self.generic_visit(node)

    def visit_FunctionDef(self, node):
        saved = dict(self.instances)  # a variable's class is a guess within one function body
        try:
            self.generic_visit(node)
        finally:
            self.instances = saved

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Constant(self, node: ast.Constant):
        if id(node) in self._setting_consts:
            return  # reported as a key-note by visit_Call
        for row in self.table["keys"]:
            if node.value == row["old"]:
                self._add(Finding(self.path, node.lineno, "key", repr(row["old"]), repr(row["new"]),
                                  at.version_phrase(row),
                                  note="or wrap module construction in tensordict.nn.set_composite_lp_aggregate(True)"))

    def visit_ClassDef(self, node: ast.ClassDef):
        base = None
        for b in node.bases:
            if isinstance(b, ast.Name) and b.id in self.bases:
                base = self.bases[b.id]
            else:
                dotted = self._current(self._dotted(b))
                obj = at.resolve(dotted) if dotted else None
                if inspect.isclass(obj):
                    base = obj
            if base is not None:
                break
        if base is not None:
            self.bases[node.name] = base
            for stmt in node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and not self._decorated(stmt):
                    self._check_override(node.name, stmt, base)
        self.class_stack.append(base)
        try:
            self.generic_visit(node)
        finally:
            self.class_stack.pop()

    @staticmethod
    def _decorated(fn: ast.FunctionDef) -> bool:
        names = {ast.unparse(d).rsplit(".", 1)[-1].split("(")[0] for d in fn.decorator_list}
        return bool(names & PLAIN_DECORATORS)

    def _check_override(self, cls_name: str, stmt: ast.FunctionDef, base) -> None:
        for p in overrides.override_problems(stmt, base):
            sites = overrides.call_sites(__import__(p.base.split(".")[0]), p.method, p.keyword) if p.keyword else []
            more = f" and {len(sites) - 2} more" if len(sites) > 2 else ""
            how = f"torchrl calls {p.method}({p.keyword}=...) at {', '.join(sites[:2])}{more}; " if sites else ""
            self._add(Finding(self.path, stmt.lineno, "override", f"{cls_name}.{_user_signature(stmt)}", None,
                              "installed signature",
                              note=f"{p.problem}; {how}base {p.base.rsplit('.', 2)[-2]}.{p.base_signature}; "
                                   f"fix: def {p.base_signature} (or add **kwargs)"))

    def visit_Call(self, node: ast.Call):
        self.n_calls += 1
        func = self._dotted(node.func)
        if func and func.rsplit(".", 1)[-1] == LEGACY_KEYS_FLAG:
            if node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value is True:
                self.legacy_lp = True
        self._key_settings(node)
        kw_names = [k.arg for k in node.keywords if k.arg]
        if kw_names:
            target, instance_of = self._call_target(node, func)
            if target is not None:
                self._check_kwargs(target, instance_of, kw_names, node.lineno)
        self.generic_visit(node)

    def _call_target(self, node: ast.Call, func: str | None):
        """``(dotted path or object, class the call is made on)`` for a call, or (None, None)."""
        if func is None and isinstance(node.func, ast.Attribute):
            value = node.func.value
            if isinstance(value, ast.Name) and value.id in self.instances:
                cls = at.resolve(self.instances[value.id])
                if inspect.isclass(cls):
                    return f"{self.instances[value.id]}.{node.func.attr}", cls
            if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super"
                    and self.class_stack and self.class_stack[-1] is not None):
                base = self.class_stack[-1]
                owner, raw = overrides.base_method(base, node.func.attr)
                if raw is not None:
                    return raw, base
            return None, None
        target = self._current(func)
        return (target, None) if target else (None, None)

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

    def _check_kwargs(self, target, instance_of, kws: list[str], line: int) -> None:
        """Keywords of one call against the table's renamed keywords and the live signature."""
        if isinstance(target, str):
            try:
                obj = at.resolve(target)
            except ImportError:
                return
            if obj is at._MISSING:
                return  # the name itself is reported
            label = target.rsplit(".", 1)[-1]
            if instance_of is None and "." in target:
                holder = at.resolve(target.rsplit(".", 1)[0])
                raw = inspect.getattr_static(holder, label, None) if inspect.isclass(holder) else None
                instance_of = holder if inspect.isfunction(raw) else None  # a method: self is filled
        else:
            obj, label = target, f"super().{target.__name__}"
            target = f"{target.__module__}.{target.__qualname__}"
        for row in self.table["kwargs"]:
            if row["old"] not in kws:
                continue
            try:
                owner = at.resolve(row["callable"])
            except ImportError:
                continue
            if _applies(obj, owner, row["callable"]) or (instance_of is not None and _applies(instance_of, owner, row["callable"])):
                dep = row.get("status") == "deprecated"
                self._add(Finding(self.path, line, "kwarg", f"{label}({row['old']}=)",
                                  f"{row['new']}=" if row["new"] else None, at.version_phrase(row),
                                  "deprecated" if dep else "error", row.get("raises", "") or row.get("note", "")))
        if set(kws) <= _direct_names(obj):
            return  # every keyword is a named parameter: nothing to follow
        accepted = live.accepted_keywords(obj, instance_of=instance_of)
        if accepted is None:
            return
        followed = f"; **kwargs followed into {', '.join(v.rsplit('.', 2)[-2] + '.' + v.rsplit('.', 1)[-1] for v in accepted.via)}" if accepted.via else ""
        for kw in kws:
            if kw in accepted.rejected:
                self._add(Finding(self.path, line, "kwarg", f"{label}({kw}=)", None,
                                  f"rejected by installed {target}", note=accepted.rejected[kw]))
            elif not accepted.open and kw not in accepted.names:
                close, why = closest_keyword(kw, accepted.names, obj)
                if accepted.ignored_by:  # no error is raised: the keyword silently does nothing
                    keeper = accepted.ignored_by[0].rsplit(".", 2)
                    what = (f"accepted and silently ignored by installed {target} "
                            f"({keeper[-2]}.{keeper[-1]} keeps unknown **kwargs without an error)")
                    error = f"no error, no effect: {kw}= is not a parameter"
                else:
                    what = f"rejected by installed signature of {target}"
                    error = f"TypeError: unexpected keyword argument {kw!r}"
                self._add(Finding(self.path, line, "kwarg", f"{label}({kw}=)", f"{close}=" if close else None, what,
                                  note=f"{error}; accepted: {_shown(accepted.names)}"
                                  + (f"; closest: {close}= ({why})" if close and why else "")
                                  + ("" if close else "; no close match") + followed))


def scan_source(path: str, text: str, table: dict) -> tuple[list[Finding], dict]:
    """Scan one module's text. Returns ``(findings, stats)``.

    A file that cannot be parsed (a syntax error, or nesting too deep for Python's parser
    or for this scanner: RecursionError) is one ``unparsable`` finding naming it; the
    caller goes on with the next file. ``stats``: ``{"refs": int, "calls": int}``
    (torchrl/tensordict references and calls seen).
    """
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as err:
        return [Finding(path, err.lineno or 0, "unparsable", Path(path).name, None, "not scanned",
                        note=f"SyntaxError: {err.msg}; not scanned")], {"refs": 0, "calls": 0}
    except (RecursionError, MemoryError, ValueError) as err:
        return [Finding(path, 0, "unparsable", Path(path).name, None, "not scanned",
                        note=f"{type(err).__name__} while parsing (nested too deeply, or NUL bytes); not scanned")], \
            {"refs": 0, "calls": 0}
    sc = _Scanner(path, table)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            sc.visit(tree)
            forwarded.check_forwarded(tree, sc)  # dict keys a torchrl callable hands to another class
            forwarded.check_space_attributes(tree, sc, Finding)
        except RecursionError:
            return [Finding(path, 0, "unparsable", Path(path).name, None, "not scanned",
                            note="RecursionError: nested too deeply to scan; not scanned")], {"refs": 0, "calls": 0}
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
    """Scan files/folders. Returns ``(findings, scanned display paths)``; one file that
    cannot be parsed is a finding, never the end of the scan."""
    findings, scanned = [], []
    for display, text in iter_sources(paths):
        scanned.append(display)
        findings += scan_source(display, text, table)[0]
    return findings, scanned
