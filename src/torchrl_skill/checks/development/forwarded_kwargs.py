"""Keywords handed over in a dict that a torchrl callable forwards to another callable.

``ProbabilisticActor(..., distribution_class=TanhDelta, distribution_kwargs={"min": -1})``
builds without complaint and raises only when the actor first runs: tensordict 0.14.3
(tensordict/nn/probabilistic.py, ``ProbabilisticTensorDictModule.get_dist``) calls
``self.distribution_class(**dist_kwargs, **self.distribution_kwargs)`` and TanhDelta takes
``low``/``high``. The plain keyword check never sees ``min``: it is a dict key, not a keyword.

The pairs are read from the installed library, not from a table: a callable whose
accepted keywords (its signature, ``**kwargs`` followed by _live_api.py) hold ``X_kwargs``
and ``X_class`` (or ``X_cls``) is a pair only when the source of the classes and
functions involved contains a call that passes ``X_class`` (called, or handed to a helper
such as ``create_on_device``) together with ``**...X_kwargs...``. On torchrl 0.14.1 that
holds for ProbabilisticActor/ProbabilisticTensorDictModule (distribution_*), MLP and
ConvNet (activation_*, norm_*, layer_*, aggregator_*), the distributed collectors
(collector_class/collector_kwargs) and Evaluator (collector_cls/collector_kwargs).

The dict is a literal, a ``dict(a=...)`` call, or a name assigned exactly once (to one of
those) in the same function or module. The class is the call's ``X_class=`` keyword, or the
class default of ``X_class`` in the callable's own signature (MLP's ``activation_class``).
Each key is then judged like a keyword of ``X_class(...)`` by the scanner's own rule.

Also here: ``spec.space.minimum``/``.maximum`` (``ContinuousBox`` attributes renamed
``low``/``high``; rows in api_changes.json with the versions), reported only in a file
that imports torchrl and only for a chain ending in ``.space.<old name>``.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path

from torchrl_skill.checks.development import api_table as at
from torchrl_skill.checks.development import live_api as live

ROOTS = ("torchrl", "tensordict")
CLASS_SUFFIXES = ("_class", "_cls")
BOX = "torchrl.data.tensor_specs.ContinuousBox"


@dataclass(frozen=True)
class Pair:
    """``kwargs`` (the dict parameter) is forwarded to ``cls`` (the class parameter) at ``site``."""

    kwargs: str
    cls: str
    default: object  # the class default in the callable's own signature, or None
    site: str  # "tensordict/nn/probabilistic.py:607"


def _tail(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


@functools.lru_cache(maxsize=None)
def _parsed(path: str):
    try:
        return ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None


def _forwarding_site(files: tuple[tuple[str, frozenset], ...], kwargs: str, cls: str) -> str | None:
    """``file:line`` of a call passing ``cls`` (as the callee or an argument) with ``**<..kwargs..>``.

    ``files``: ``(path, class names)``; calls inside those classes are preferred over the
    rest of the module (models.py holds MLP and ConvNet; generic.py forwards in a function).
    """
    for in_classes in (True, False):
        for path, classes in files:
            tree = _parsed(path)
            if tree is None:
                continue
            roots = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in classes] if in_classes else [tree]
            for node in (n for r in roots for n in ast.walk(r)):
                if not isinstance(node, ast.Call) or cls not in {_tail(node.func), *map(_tail, node.args)}:
                    continue
                for kw in node.keywords:
                    if kw.arg is None and any(_tail(n) == kwargs for n in ast.walk(kw.value)):
                        root = next((p for p in Path(path).parents if p.name in ROOTS), None)
                        shown = Path(path).relative_to(root.parent) if root else Path(path).name
                        return f"{shown}:{node.lineno}"
    return None


def _source_files(obj, accepted) -> tuple[tuple[str, frozenset], ...]:
    """``(source file, class names)`` of ``obj``'s torchrl/tensordict MRO, then of the
    modules of the functions ``**kwargs`` went into."""
    found: dict[str, set] = {}
    for k in obj.__mro__ if inspect.isclass(obj) else (obj,):
        f = getattr(sys.modules.get(k.__module__), "__file__", None)
        if k.__module__.split(".")[0] in ROOTS and f:
            found.setdefault(f, set()).add(k.__name__)
    for qual in accepted.via:
        parts = qual.split(".")
        mod = next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in sys.modules), "")
        f = getattr(sys.modules.get(mod), "__file__", None)
        if mod.split(".")[0] in ROOTS and f:
            found.setdefault(f, set()).add(parts[len(mod.split(".")):][0] if len(parts) > len(mod.split(".")) else "")
    return tuple((f, frozenset(c)) for f, c in found.items())


@functools.lru_cache(maxsize=None)
def forwarding_pairs(obj) -> tuple[Pair, ...]:
    """The verified ``X_kwargs`` -> ``X_class`` pairs of a torchrl/tensordict callable (empty if none)."""
    accepted = live.accepted_keywords(obj)
    if accepted is None:
        return ()
    names = accepted.names
    try:
        own = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        own = {}
    files = None
    pairs = []
    for kw in names:
        if not kw.endswith("_kwargs"):
            continue
        for cls in (kw[: -len("_kwargs")] + s for s in CLASS_SUFFIXES):
            if cls not in names:
                continue
            files = files if files is not None else _source_files(obj, accepted)
            site = _forwarding_site(files, kw, cls)
            if site:
                default = own[cls].default if cls in own and inspect.isclass(own[cls].default) else None
                pairs.append(Pair(kw, cls, default, site))
    return tuple(pairs)


# --------------------------------------------------------------------------- user code


def _torch_aliases(tree) -> dict[str, str]:
    """Local names bound to torch modules/classes by the file's imports (``nn`` -> ``torch.nn``)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "torch":
                    out[a.asname or "torch"] = a.name if a.asname else "torch"
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "torch":
            out.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names if a.name != "*"})
    return out


def dotted_name(node, aliases: dict[str, str]) -> str | None:
    """Dotted path an expression refers to (``ast.Name`` or a chain of ``ast.Attribute`` on
    one), via ``aliases`` (local name -> dotted path); None otherwise. The drift scanner and
    the upgrade planner use it too (through ``_drift_scan.dotted_name``)."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value, aliases)
        return f"{base}.{node.attr}" if base else None
    return None


def _dict_keys(node, single: dict) -> list[tuple[str, int]] | None:
    """``[(key, line)]`` of a dict literal, ``dict(k=...)`` call, or a name assigned once to one."""
    if isinstance(node, ast.Name) and node.id in single:
        node = single[node.id]
    if isinstance(node, ast.Dict):
        return [(k.value, k.lineno) for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        return [(k.arg, getattr(k, "lineno", node.lineno)) for k in node.keywords if k.arg]
    return None


def _scope_dicts(scope) -> tuple[dict[str, ast.AST], set[str]]:
    """``(names assigned exactly once in scope to a dict, every name assigned there)``; nested defs excluded."""
    seen: dict[str, list] = {}
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign, ast.For, ast.NamedExpr)) else []
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    seen.setdefault(n.id, []).append(node.value if isinstance(node, ast.Assign) and t is n else None)
        stack.extend(ast.iter_child_nodes(node))
    single = {k: v[0] for k, v in seen.items() if len(v) == 1 and _dict_keys(v[0], {}) is not None}
    return single, set(seen)


def _calls_by_scope(tree):
    """``(call, names bound once to a dict where it runs)`` for every call; a function sees the
    module's dict names it does not assign (or take as a parameter) itself."""
    module_single, _ = _scope_dicts(tree)
    for scope in [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        single = module_single
        if scope is not tree:
            own, assigned = _scope_dicts(scope)
            assigned |= {a.arg for a in ast.walk(scope.args) if isinstance(a, ast.arg)}
            single = {**{k: v for k, v in module_single.items() if k not in assigned}, **own}
        stack = list(ast.iter_child_nodes(scope))
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(node, ast.Call):
                yield node, single
            stack.extend(ast.iter_child_nodes(node))


def check_forwarded(tree, sc) -> None:
    """Add a ``kwarg`` finding to scanner ``sc`` for each dict key the forwarded-to class rejects."""
    torch_names = _torch_aliases(tree)
    for call, single in _calls_by_scope(tree):
        func = sc._current(sc._dotted(call.func))
        try:
            obj = at.resolve(func) if func else None
        except ImportError:
            continue
        if obj is None or obj is at._MISSING or not callable(obj):
            continue
        given = {k.arg: k.value for k in call.keywords if k.arg}
        for pair in forwarding_pairs(obj):
            keys = _dict_keys(given[pair.kwargs], single) if pair.kwargs in given else None
            if not keys:
                continue
            if pair.cls in given:
                node = given[pair.cls]
                target = sc._current(sc._dotted(node)) or dotted_name(node, torch_names)
            else:
                target = f"{pair.default.__module__}.{pair.default.__qualname__}" if pair.default else None
            if not target:
                continue  # a local variable, a string alias, a user class: not judged
            label, cls_label = func.rsplit(".", 1)[-1], target.rsplit(".", 1)[-1]
            for key, line in keys:
                before = len(sc.findings)
                sc._check_kwargs(target, None, [key], line)
                for f in sc.findings[before:]:
                    f.note = (f"{label}({pair.kwargs}=) on line {call.lineno} hands its keys to {cls_label}"
                              f"(**{pair.kwargs}) at {pair.site}, which raises; " + f.note)


def check_space_attributes(tree, sc, finding_cls) -> None:
    """``<expr>.space.minimum`` and similar: ContinuousBox attributes the table lists as renamed."""
    if not any(v.split(".")[0] == "torchrl" for v in sc.aliases.values()):
        return
    rows = {r["old"].rsplit(".", 1)[-1]: r for r in sc.table["names"] if r["old"].startswith(BOX + ".")}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr in rows and isinstance(node.value, ast.Attribute)
                and node.value.attr == "space"):
            continue
        row = rows[node.attr]
        if at.exists(row["old"]) or not at.exists(row["new"]):
            continue  # the installed torchrl still has it (or lacks the replacement): nothing to say
        new = row["new"].rsplit(".", 1)[-1]
        old_text = ast.unparse(node)
        sc._add(finding_cls(sc.path, node.lineno, "attribute", old_text, f"{old_text[: -len(node.attr)]}{new}",
                            at.version_phrase(row),
                            note=f"AttributeError: 'ContinuousBox' object has no attribute {node.attr!r} "
                                 f"(a Bounded spec's .space); {row.get('note', '')}".rstrip("; ")))
