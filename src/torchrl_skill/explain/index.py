"""The public names explain looks a NAME up in, read from the installed library's source
without importing it.

A public module is any module of the installed ``torchrl`` or ``tensordict`` package
whose dotted path has no part (after the package) starting with ``_``: the walk reads
the package folders (``torchrl.collectors.distributed``, ``torchrl.envs.libs.gym``,
``torchrl.trainers.algorithms.configs``, the llm modules, ...; 418 modules in torchrl
0.14.1 + tensordict 0.14.3). A module's public names are its ``__all__`` (the literal
list in its source) or, without ``__all__``, the public names it binds at column 0
(classes, functions, ``Name = ...``; a name bound only inside an ``if``/``try`` block is
found by ``names.defined_in_submodule`` instead). Nothing is imported, so a module whose optional backend is not installed
is still indexed: importing it is what says "needs X" (``names.resolve``).

Two tiers keep explain on one name within import + 1 s (CONTRIBUTING.md, "Budgets"):
:data:`PRIMARY` (the modules users import from) and :data:`SECONDARY` are read
first (about 30 files); the whole walk (about 10 MB of source) is read only for a
short name those do not hold (measured: ~0.3 s on 2 busy cores), and for suggestions when nothing holds it.
"""

from __future__ import annotations

import ast
import bisect
import contextlib
import functools
import importlib
import importlib.util
import io
import os
import re
from pathlib import Path

TOPS = ("torchrl", "tensordict")
# The modules users import from; the first module listing a name gives its canonical path.
PRIMARY = (
    "torchrl.envs",
    "torchrl.envs.transforms",
    "torchrl.collectors",
    "torchrl.data",
    "torchrl.data.replay_buffers",
    "torchrl.modules",
    "torchrl.objectives",
    "torchrl.objectives.value",
    "torchrl.trainers",
    "torchrl.envs.llm",
    "torchrl.modules.llm",
    "torchrl.objectives.llm",
    "torchrl.collectors.llm",
    "torchrl.data.llm",
    "torchrl.services",
    "torchrl.data.vla",
    "tensordict",
    "tensordict.nn",
)
# Searched next for a short name, before the rest of the walk.
SECONDARY = (
    "torchrl.envs.utils",
    "torchrl.record",
    "torchrl.weight_update",
    "torchrl.objectives.value.functional",
    "torchrl.trainers.algorithms",
    "torchrl.envs.libs",
    "torchrl.modules.models",
    "torchrl.render",
    "torchrl.data.datasets",
    "torchrl.collectors.utils",
    "torchrl.objectives.utils",
    "torchrl.collectors.distributed",
)
# Anchored on "\n" rather than ^ with re.M: the same matches (the source is read with a
# "\n" in front), seven times faster over the ~10 MB of the walk.
_ALL_START = re.compile(r"\n__all__[ \t]*(?::[^=\n]*)?(\+?=)")
_TOP_DEF = re.compile(r"\n(?:(?:class|def|async def) ([A-Za-z]\w*)|([A-Za-z]\w*)[ \t]*(?::[^=\n]*)?=(?!=))")
_TRIPLE = re.compile(r'"""|\'\'\'')


@functools.lru_cache(maxsize=None)
def package_dir(top: str) -> Path | None:
    """The folder of an installed top-level package (``find_spec`` of a top-level name imports nothing)."""
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def module_file(module: str) -> Path | None:
    """The source file of ``module`` (its ``__init__.py`` for a package), or None."""
    top, *rest = module.split(".")
    base = package_dir(top)
    if base is None:
        return None
    folder = base.joinpath(*rest)
    if (folder / "__init__.py").is_file():
        return folder / "__init__.py"
    single = folder.with_suffix(".py")
    return single if single.is_file() else None


@functools.lru_cache(maxsize=None)
def walk(top: str) -> tuple[str, ...]:
    """Every public module of the installed package ``top``, a package before its
    children, sorted; a folder without ``__init__.py`` and a private part (``_utils``,
    ``_base``) are left out with everything under them."""
    base = package_dir(top)
    if base is None:
        return ()
    found = []
    for folder, dirs, files in os.walk(base):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")) and (here / d / "__init__.py").is_file())
        parts = [top, *here.relative_to(base).parts]
        found.append(".".join(parts))
        found += [".".join([*parts, f[:-3]]) for f in sorted(files)
                  if f.endswith(".py") and not f.startswith("_")]
    return tuple(sorted(found))


def _all_statements(source: str) -> list[tuple[str, str]]:
    """``(operator, expression source)`` of each top-level ``__all__ =``/``+=``; the
    expression ends at the first line where its brackets close."""
    out = []
    lines = source.split("\n")
    for found in _ALL_START.finditer(source):
        number = source.count("\n", 0, found.start() + 1)  # the line of __all__ in lines
        expr = source[found.end():source.find("\n", found.end()) % (len(source) + 1)]
        depth = _depth(expr)
        for line in lines[number + 1:number + 2000]:
            if depth <= 0:
                break
            expr += "\n" + line
            depth += _depth(line)
        out.append((found.group(1), expr.strip()))
    return out


def _top_level_names(source: str) -> list[str]:
    """Public names bound at column 0 (``class``, ``def``, ``Name = ...``) outside
    triple-quoted strings (a code template such as torchrl.envs.llm.transforms.tools's
    holds ``def run_code`` at column 0 inside a string)."""
    quotes = [m.start() for m in _TRIPLE.finditer(source)]
    names = []
    for found in _TOP_DEF.finditer(source):
        name = found.group(1) or found.group(2)
        if name.startswith("_") or bisect.bisect_left(quotes, found.start()) % 2:
            continue
        names.append(name)
    return names


def _depth(text: str) -> int:
    code = text.split("#", 1)[0]
    return sum(code.count(c) for c in "[({") - sum(code.count(c) for c in "])}")


def static_all(module: str) -> tuple[str, ...]:
    """The public names of ``module`` read from its source: the literal ``__all__``
    (``=`` and ``+=``), or, without one, the public names it binds at column 0 (classes,
    functions, ``Name = ...``). Imports the module only when ``__all__`` is not a literal (ImportError then
    propagates). ``()`` for a module that is not installed."""
    return _read(module)[0]


def declares_all(module: str) -> bool:
    """True when ``module``'s source sets ``__all__`` (its names are exported on purpose)."""
    return _read(module)[1]


@functools.lru_cache(maxsize=None)
def _read(module: str) -> tuple[tuple[str, ...], bool]:
    path = module_file(module)
    if path is None:
        return (), False
    source = "\n" + path.read_text(encoding="utf-8", errors="replace")
    statements = _all_statements(source) if "__all__" in source else []
    if not statements:
        return tuple(dict.fromkeys(_top_level_names(source))), False
    names: list[str] = []
    try:
        for op, expr in statements:
            value = list(ast.literal_eval(expr))
            names = names + value if op == "+=" else value
    except (ValueError, SyntaxError, TypeError):
        from .names import hide_backends

        with hide_backends(module), contextlib.redirect_stdout(io.StringIO()):
            names = list(getattr(importlib.import_module(module), "__all__", []))
    return tuple(dict.fromkeys(names)), True


def _index(modules) -> dict[str, tuple[str, ...]]:
    index: dict[str, list[str]] = {}
    for module in modules:
        try:
            names = static_all(module)
        except ImportError:  # a non-literal __all__ whose backend is absent: its names stay unlisted
            continue
        for name in names:
            index.setdefault(name, []).append(module)
    return {k: tuple(v) for k, v in index.items()}


@functools.lru_cache(maxsize=None)
def primary_index() -> dict[str, tuple[str, ...]]:
    """``{short name: (every module of PRIMARY + SECONDARY listing it, in that order)}``."""
    return _index(PRIMARY + SECONDARY)


@functools.lru_cache(maxsize=None)
def full_index() -> dict[str, tuple[str, ...]]:
    """``{short name: modules}`` over every public module: the primary tiers first (their
    order gives a name's canonical path), then the walk of both packages."""
    first = primary_index()
    rest = _index(m for top in TOPS for m in walk(top) if m not in PRIMARY + SECONDARY)
    merged = {k: list(v) for k, v in first.items()}
    for name, modules in rest.items():
        merged.setdefault(name, []).extend(modules)
    return {k: tuple(v) for k, v in merged.items()}


def public_names(modules=None) -> list[str]:
    """Every public ``module.name`` of ``modules`` (default: every public module of
    torchrl and tensordict); a name that several modules list appears once per module."""
    modules = tuple(m for top in TOPS for m in walk(top)) if modules is None else tuple(modules)
    return [f"{m}.{n}" for m in modules for n in static_all(m)]
