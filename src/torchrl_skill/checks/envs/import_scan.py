"""What a user's file runs when it is imported, read from its source without importing it
(private module of check_user_env.py).

check_user_env.py imports the target file to reach its factory, and a spawn worker of a
ParallelEnv or multi-process collector imports it again. Whatever runs at module level runs
each time: a worker process started there recurses (``missing-main-guard``), and a
collection, rollout or training loop there runs before any check, once per worker.
:func:`import_time_work` finds both: every statement executed on import (module level,
both branches of a module-level ``if``/``try``/``with``, the ``else`` of
``if __name__ == "__main__":``; never a function or class body) that loops, iterates,
calls a method that steps an env, a collector, a loss or an optimizer, or calls a function
of the same file that does (followed through the file's own functions).
"""

from __future__ import annotations

import ast

# Calls that do a step of work: an env (rollout, step, reset, rand_step), a collector
# (next(iter(collector)), its start/iterator), a loss or optimizer (backward, step),
# a trainer (train, fit, learn). Names as torchrl 0.14.1, torch and common trainers spell them.
WORK_CALLS = frozenset({
    "rollout", "step", "rand_step", "reset", "step_and_maybe_reset", "backward", "iterator", "start", "next",
    "train", "fit", "learn", "collect", "run", "update_policy_weights_",
})


def is_main_guard(node: ast.AST) -> bool:
    """``if __name__ == "__main__":`` (either operand order)."""
    if not isinstance(node, ast.If):
        return False
    text = ast.unparse(node.test)
    return "__name__" in text and "__main__" in text


def call_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _executed(stmts):
    """The statements of ``stmts`` that run on import, recursing into compound statements
    whose bodies run then (not def/class bodies, not the main guard's body)."""
    for stmt in stmts:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield stmt  # its decorators and defaults run; the body does not (_calls skips it)
        elif is_main_guard(stmt):
            yield from _executed(stmt.orelse)
        elif isinstance(stmt, ast.If):
            yield ast.Expr(stmt.test, lineno=stmt.lineno, col_offset=0)
            yield from _executed(stmt.body)
            yield from _executed(stmt.orelse)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            yield from _executed(stmt.body)
            for handler in stmt.handlers:
                yield from _executed(handler.body)
            yield from _executed(stmt.orelse)
            yield from _executed(stmt.finalbody)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                yield ast.Expr(item.context_expr, lineno=stmt.lineno, col_offset=0)
            yield from _executed(stmt.body)
        else:
            yield stmt


def _calls(node: ast.AST):
    """Every call ``node`` makes when it runs (not inside nested def/class/lambda bodies)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        for part in [*node.decorator_list, *getattr(getattr(node, "args", None), "defaults", []), *getattr(node, "bases", [])]:
            yield from _calls(part)
        return
    if isinstance(node, ast.Lambda):
        return
    if isinstance(node, ast.Call):
        yield node
    for child in ast.iter_child_nodes(node):
        yield from _calls(child)


def _work_in(node: ast.AST, functions: dict, process_starters, seen: frozenset = frozenset()) -> str | None:
    """What ``node`` does when it runs that is work: a loop, an iteration, a work call, or a
    call of a local function whose body does one; None for none."""
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return f"a for loop over {ast.unparse(node.iter)[:60]}"
    if isinstance(node, ast.While):
        return f"a while loop ({ast.unparse(node.test)[:60]})"
    for sub in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else ():
        if isinstance(sub, (ast.For, ast.AsyncFor, ast.While)) and sub is not node:
            return _work_in(sub, functions, process_starters, seen)
    for call in _calls(node):
        name = call_name(call)
        if name in process_starters:
            return f"{name}(...) (starts worker processes)"
        if name in WORK_CALLS:
            return f"{ast.unparse(call.func)[:60]}(...)"
        if isinstance(call.func, ast.Name) and name in functions and name not in seen:
            inner = [_work_in(s, functions, process_starters, seen | {name}) for s in functions[name].body]
            inner = next((w for w in inner if w), None)
            if inner:
                return f"{name}(), which runs {inner}"
    return None


def import_time_work(source: str | ast.Module, process_starters=frozenset()) -> tuple[list[tuple[int, str]], int]:
    """``([(line, what), ...], statements scanned)``: each statement that runs on import
    and does work (see the module docstring), and how many statements run on import (the
    scan's evidence: 0 for an empty file). ``process_starters``: constructor names that
    start processes (named as such)."""
    tree = ast.parse(source) if isinstance(source, str) else source
    functions = {s.name: s for s in ast.walk(tree) if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found, scanned = [], 0
    for stmt in _executed(tree.body):
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # a docstring
        scanned += 1
        what = _work_in(stmt, functions, process_starters)
        if what:
            found.append((stmt.lineno, what))
    return found, scanned
