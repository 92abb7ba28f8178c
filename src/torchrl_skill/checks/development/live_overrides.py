"""Can torchrl still call a user's override of one of its methods? (read from the live library)

:func:`override_problems` compares a user's ``def`` (its AST) with the base method of the
installed torchrl/tensordict class it overrides: the base parameters stand for the calls
torchrl makes. :func:`call_sites` finds where the installed source passes a keyword by
name (the evidence that an optional parameter matters, and what a finding cites).
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from torchrl_skill.checks.development.live_api import LIBRARIES, in_mro

@dataclass(frozen=True)
class OverrideProblem:
    """One way torchrl calls the base method that the override cannot take."""

    method: str
    base: str  # qualified name of the base method
    base_signature: str
    problem: str
    keyword: str | None = None


def base_method(base_cls, name: str):
    """``(owner, function)`` of a plain torchrl/tensordict method ``name`` in ``base_cls``'s MRO, or (None, None)."""
    owner, raw = in_mro(base_cls, name)
    if owner is None or not inspect.isfunction(raw):
        return None, None
    if not str(getattr(owner, "__module__", "")).split(".")[0] in LIBRARIES:
        return None, None
    return owner, raw


def override_problems(node: ast.FunctionDef, base_cls) -> list[OverrideProblem]:
    """Ways a torchrl call to ``base_cls.<node.name>`` would fail on the user's override ``node``.

    The base method's parameters stand for torchrl's calls: a required one is always
    passed (a positional one by position); an optional one matters where the installed
    library's source passes it by name (:func:`call_sites`: torchrl 0.14.1 calls
    ``env.close(raise_if_closed=...)`` in TransformedEnv.close and the collectors).
    ``*args``/``**kwargs`` on the base are not judged (torchrl passes them through from the
    user); constructors and dunders are called by the user, not torchrl. Returns [] when
    the override can take every such call.
    """
    if node.name.startswith("__") and node.name.endswith("__"):
        return []  # the user's code (or Python) calls constructors and dunders, not torchrl
    owner, raw = base_method(base_cls, node.name)
    if raw is None:
        return []
    try:
        sig = inspect.signature(raw)
    except (TypeError, ValueError):
        return []
    a = node.args
    user_pos = [x.arg for x in a.posonlyargs + a.args][1:]  # drop self
    user_named = {x.arg for x in a.args + a.kwonlyargs} - {x.arg for x in a.posonlyargs}
    n_pos_defaults = len(a.defaults)
    user_required_pos = len(user_pos) - n_pos_defaults
    user_required_kwonly = [x.arg for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is None]
    has_varargs, has_varkw = a.vararg is not None, a.kwarg is not None
    qual = f"{owner.__module__}.{owner.__qualname__}.{node.name}"
    shown = f"{node.name}{plain_signature(sig)}"
    out = []
    base_params = list(sig.parameters.values())[1:]
    base_pos = [p for p in base_params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    library = sys.modules[owner.__module__.split(".")[0]]

    def passed_by_torchrl(p) -> list[str]:  # an optional parameter matters where torchrl passes it
        return call_sites(library, node.name, p.name)

    for i, p in enumerate(base_pos):
        by_position = has_varargs or i < len(user_pos)
        by_name = p.kind is p.POSITIONAL_OR_KEYWORD and (has_varkw or p.name in user_named)
        if p.default is inspect.Parameter.empty and not by_position:
            out.append(OverrideProblem(node.name, qual, shown, f"takes no positional argument {i + 1} ({p.name}), which torchrl passes"))
        elif p.default is not inspect.Parameter.empty and not (by_position or by_name) and passed_by_torchrl(p):
            out.append(OverrideProblem(node.name, qual, shown, f"cannot take {p.name}=", p.name))
    for p in base_params:
        if p.kind is p.KEYWORD_ONLY and not (has_varkw or p.name in user_named):
            if p.default is inspect.Parameter.empty or passed_by_torchrl(p):
                out.append(OverrideProblem(node.name, qual, shown, f"cannot take {p.name}=", p.name))
    base_has_varargs = any(p.kind is p.VAR_POSITIONAL for p in base_params)
    by_keyword = {p.name for p in base_params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    unfilled = [name for j, name in enumerate(user_pos[:user_required_pos])
                if j >= len(base_pos) and name not in by_keyword]  # neither by position nor by name
    if unfilled and not base_has_varargs:
        out.append(OverrideProblem(node.name, qual, shown,
                                   f"requires {', '.join(unfilled)}, which torchrl never passes "
                                   f"(it passes at most {len(base_pos)} positional argument(s))"))
    base_names = {p.name for p in base_params}
    base_has_varkw = any(p.kind is p.VAR_KEYWORD for p in base_params)
    for name in user_required_kwonly:
        if name not in base_names and not base_has_varkw:
            out.append(OverrideProblem(node.name, qual, shown, f"requires keyword {name}=, which torchrl never passes"))
    return out


@functools.lru_cache(maxsize=4)
def _library_sources(root: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    base = Path(root)
    out = []
    for path in sorted(base.rglob("*.py")):
        try:
            out.append((path.relative_to(base.parent).as_posix(), tuple(path.read_text(encoding="utf-8").splitlines())))
        except (OSError, UnicodeDecodeError):
            continue
    return tuple(out)


def call_sites(library_module, method: str, keyword: str) -> list[str]:
    """``["torchrl/envs/transforms/_base.py:1487", ...]``: lines of the installed library that
    call ``<obj>.method(`` passing ``keyword=`` (a text search of its source; a subclass's
    own ``super().method(...)`` is not a call on the user's object and is left out)."""
    root = Path(library_module.__file__).parent
    pattern = re.compile(rf"\.{re.escape(method)}\([^)]*\b{re.escape(keyword)}\s*=")
    out = []
    for rel, lines in _library_sources(str(root)):
        for lineno, line in enumerate(lines, 1):
            if pattern.search(line) and "super()" not in line:
                out.append(f"{rel}:{lineno}")
    return out


def plain_signature(sig: inspect.Signature) -> str:
    """``(self, *, raise_if_closed=True)``: a signature without annotations."""
    return str(sig.replace(parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
                           return_annotation=inspect.Signature.empty))
