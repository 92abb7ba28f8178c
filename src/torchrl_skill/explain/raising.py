"""The function that raised, for ``explain.py --error`` given a traceback: the innermost
torchrl/tensordict frame, the torchrl function that called it (when a tensordict helper
raised), and the user's line, each library function explained from the installed
library (its qualified name read from the installed source with ``ast``, then its
signature and first docstring paragraph).

A traceback from another install may carry other line numbers: a function is then found
by its name in the installed file (the one nearest the line when several share it).
"""

from __future__ import annotations

import ast
import functools

from . import tracebacks as tb


@functools.lru_cache(maxsize=None)
def _definitions(library_path: str) -> tuple[tuple[str, int, int], ...]:
    """``(qualified name, first line, last line)`` of every function of an installed file."""
    from .index import package_dir

    top, _, rest = library_path.partition("/")
    base = package_dir(top)
    file = base / rest if base is not None else None
    if file is None or not file.is_file():
        return ()
    out = []

    def visit(body, prefix):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((prefix + node.name, node.lineno, node.end_lineno or node.lineno))
                visit(node.body, f"{prefix}{node.name}.<locals>.")
            elif isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")

    visit(ast.parse(file.read_text(encoding="utf-8")).body, "")
    return tuple(out)


def qualified(frame: tb.Frame) -> str | None:
    """``torchrl.modules.distributions.discrete.MaskedCategorical.entropy`` for a library
    frame, or None when the installed file has no function of that name."""
    named = [d for d in _definitions(frame.library) if d[0].rsplit(".", 1)[-1] == frame.function]
    if not named:
        return None
    inside = [d for d in named if d[1] <= frame.line <= d[2]]
    name = (inside or sorted(named, key=lambda d: abs(d[1] - frame.line)))[0][0]
    module = frame.library[:-3].replace("/", ".").removesuffix(".__init__")
    return f"{module}.{name}"


def _described(frame: tb.Frame) -> list[str]:
    from . import facts as fx
    from .names import Found, resolve

    dotted = qualified(frame)
    where = f"{frame.library}:{frame.line}" + (f": {frame.source}" if frame.source else "")
    lines = fx.wrap(f"{dotted or frame.function} at", where)
    if dotted is None or "<locals>" in dotted:
        return lines  # a decorator's wrapper or a closure: nothing importable to explain
    hit = resolve(dotted)
    if isinstance(hit, Found):
        label = ".".join(dotted.split(".")[-2:]) if hit.owner is not None else dotted.rsplit(".", 1)[-1]
        lines += fx.wrap("signature", fx.signature_text(hit.obj, label))
        lines += fx.wrap("doc", fx.first_paragraph(hit.obj))
        lines += fx.wrap("explain", f"python $SKILL_DIR/scripts/explain.py {dotted}")
    return lines


def raising_lines(text: str) -> list[str]:
    """Lines naming the function that raised, its torchrl caller and the user's line, with
    each library function explained; ``[]`` when the text has no torchrl/tensordict frame."""
    raiser, caller, user = tb.raising_frames(tb.frames(text))
    if raiser is None:
        return []
    head = f"raised in {raiser.library}:{raiser.function}"
    if caller is not None and caller is not raiser:
        head += f", called by torchrl's {caller.library}:{caller.function}"
    if user is not None:
        head += f", from your {user.path}:{user.line}" + (f" ({user.source})" if user.source else "")
    lines = [head]
    for frame in dict.fromkeys(f for f in (caller, raiser) if f is not None):  # the torchrl caller first
        lines += _described(frame)
    return lines
