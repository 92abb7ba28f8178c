"""Answers for ``explain.py --error`` when no error-index entry confirms the text, each
labelled by where it comes from:

- ``derived:raising-site`` (read from the installed source, not a verified entry): the
  raise statement of torchrl or tensordict whose message the text holds (``sites.py``):
  file:line, function, the ``if`` guarding it, the public APIs whose calls reach it, and
  the index entries at that site (their message is raised there, or their ``frames`` name
  a function on the way);
- ``derived:library-call`` (read from the traceback and the installed source): for a
  message raised inside torch, numpy or Python under a torchrl/tensordict frame, the call
  in that frame that raised (the traceback's ``^^^`` marks, else the last call on its
  line), its arguments, and which of them are parameters of the library function (the
  values your call passed);
- ``reference:text`` (a text search, not an entry): the bundle reference paragraph that
  quotes the message.

A message found nowhere gets a line saying what was searched, so "nothing" is a measured
answer (``not_found_line``).
"""

from __future__ import annotations

import ast
import functools
import re

from torchrl_skill.explain import error_index as ei
from torchrl_skill.report.base import BUNDLE_ROOT

from . import sites as st
from . import tracebacks as tb

SHOWN_SITES = 3


def _wrap(label: str, text: str) -> list[str]:
    from .facts import wrap

    return wrap(label, text)


# ---------------------------------------------------------------------------- raising site
_EXC_PREFIX = re.compile(r"^[A-Z]\w*(?:Error|Exception|Warning)\s*:\s*")


def pattern_literals(pattern: str) -> list[str]:
    """The runs of plain text (12+ characters) of a regular expression: escapes read as
    their character, a class, group, alternation or wildcard ends a run, and a quantifier
    drops the character it repeats."""
    runs, cur, i = [], "", 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt.isalnum():  # \d, \s, \w: a class
                runs.append(cur)
                cur = ""
            else:
                cur += nxt
            i += 2
            continue
        if ch in "*+?{":
            runs.append(cur[:-1])
            cur = ""
            if ch == "{":
                i = pattern.find("}", i) + 1 or len(pattern)
                continue
        elif ch in "[":
            runs.append(cur)
            cur = ""
            i = pattern.find("]", i + 2) + 1 or len(pattern)
            continue
        elif ch in "().|^$":
            runs.append(cur)
            cur = ""
        else:
            cur += ch
        i += 1
    runs.append(cur)
    return [" ".join(r.split()) for r in runs if len(r.strip()) >= st.MIN_LITERAL]


def entries_at(site: st.Site, callers: list[str]) -> list[ei.ErrorEntry]:
    """Index entries whose message is raised at ``site`` (its title, the exact error text,
    matches the site's template, whole or cut short (``sites.says``), or the site's literal
    parts explain 80% of one of its signatures), or whose ``frames`` name the site's function or one of ``callers``
    (qualified names on the way to the public API)."""
    names = {c.split(".")[-1] for c in callers}
    out = []
    for entry in ei.load():
        if not entry.is_error:
            continue
        title = _EXC_PREFIX.sub("", " ".join(entry.title.replace("`", "").split()))
        sigs = [" ".join(s.split()) for s in entry.signatures] + [r for p in entry.patterns for r in pattern_literals(p)]
        said = (bool(site.regex.search(title)) or st.says(site, title) or st.covered(site, title) >= 0.6 * len(title)
                or any(len(s) >= st.MIN_LITERAL and (st.says(site, s) or st.covered(site, s) >= 0.8 * len(s)) for s in sigs))
        specs = [spec.rpartition(":") for spec in entry.frames]
        framed = any((path == site.path and fn == site.function.split(".")[-1]) or fn in names for path, _, fn in specs)
        if said or framed:
            out.append(entry)
    return out


def site_lines(site: st.Site) -> list[str]:
    """The lines for one raising site (see the module docstring)."""
    if site.compiled:
        lines = [f"raised in the compiled extension {site.path} (derived from its strings, not a verified entry)"]
        lines += _wrap("message", site.text())
        users, _ = st.public_callers(site)
        lines += _wrap("python modules that use it", ", ".join(u for u, _ in users) or "none found")
        return lines
    lines = [f"raised at {site.path}:{site.line} in {site.module}.{site.function} "
             f"(derived from the installed source, not a verified entry)"]
    lines += _wrap("raises", f"{site.exc}({site.text()!r})")
    lines += _wrap("when", site.condition or "unconditionally (no if around it)")
    callers, skipped = st.public_callers(site)
    for usage, how in callers:
        lines += _wrap("public API", f"{usage}: {how}")
    if not callers:
        lines += _wrap("public API", "none found by the call scan" + (f" (not expanded: {', '.join(skipped)})" if skipped else ""))
    elif skipped:
        lines += _wrap("not expanded", f"{', '.join(skipped)}: called from too many places to follow by name")
    if callers and not callers[0][1].startswith(("this function itself", site.function)):
        lines += _wrap("call scan", "static and by function name: a same-named function elsewhere can add a caller")
    routes = [how.split(": ", 1)[-1] for _, how in callers]
    chain = [part for r in routes for part in r.split(" -> ")]
    for entry in entries_at(site, chain):
        lines += _wrap("index entry at this site", f"{entry.short or entry.title} [{entry.page}#{entry.anchor}]")
    return lines


def site_answers(text: str) -> list[tuple[str, list[str]]]:
    """``[("derived:raising-site", lines)]`` per site (at most :data:`SHOWN_SITES`; a
    traceback's own frame first), or ``[]``."""
    exc, message = st.message_of(text)
    found = st.find(f"{exc}: {message}" if exc else message)
    if not found:
        return []
    trace = tb.frames(text)
    here = {(f.library, f.line) for f in trace if f.library}
    named = {f.library for f in trace if f.library}
    found.sort(key=lambda s: ((s.path, s.line) not in here, s.path not in named))
    return [("derived:raising-site", site_lines(s)) for s in found[:SHOWN_SITES]]


# ---------------------------------------------------------------------------- library call
_CALL = re.compile(r"([A-Za-z_][\w.]*)\(((?:[^()]|\([^()]*\))*)\)")


def _caret_expression(text: str, frame: tb.Frame) -> str:
    """The expression the traceback marks with ``^``/``~`` under ``frame``'s source line."""
    lines = ei.clean(text).splitlines()
    marker = f'line {frame.line}, in {frame.function}'
    for i, ln in enumerate(lines):
        if marker in ln and i + 2 < len(lines):
            src, marks = lines[i + 1], lines[i + 2]
            if marks.strip() and set(marks.strip()) <= set("^~"):
                cols = [c for c, ch in enumerate(marks) if ch in "^~"]
                return src[cols[0]:cols[-1] + 1]
    return ""


def _call_parts(expr: str) -> tuple[str, list[str]] | None:
    try:
        node = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError:
        node = None
    if isinstance(node, ast.Call):
        return ast.unparse(node.func), [ast.unparse(a) for a in node.args] + [f"{k.arg}={ast.unparse(k.value)}" if k.arg else f"**{ast.unparse(k.value)}" for k in node.keywords]
    calls = _CALL.findall(expr)
    if not calls:
        return None
    func, args = calls[-1]
    return func, [a.strip() for a in re.split(r",(?![^()]*\))", args) if a.strip()]


@functools.lru_cache(maxsize=None)
def _functions(path: str) -> tuple[tuple[str, int, int, tuple[str, ...]], ...]:
    """``(qualified name, first line, last line, parameter names)`` of each function of an
    installed file."""
    source = st.sources().get(path)
    if source is None:
        return ()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ()
    out = []

    def visit(body, prefix):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                params = tuple(p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs] if p.arg not in ("self", "cls"))
                out.append((prefix + node.name, node.lineno, node.end_lineno or node.lineno, params))
                visit(node.body, f"{prefix}{node.name}.<locals>.")
            elif isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")

    visit(tree.body, "")
    return tuple(out)


def function_at(path: str, line: int):
    """The innermost function of ``path`` holding ``line``, or None."""
    inside = [f for f in _functions(path) if f[1] <= line <= f[2]]
    return min(inside, key=lambda f: f[2] - f[1]) if inside else None


def _raiser_name(frame: tb.Frame) -> str:
    path = frame.path.replace("\\", "/")
    found = re.search(r"(?:site-packages|dist-packages)/([^/]+)", path)
    if found:
        return found.group(1)
    if re.search(r"[/\\]lib[/\\]python\d", path) or path.startswith("<"):
        return "Python"
    return path.split("/")[0] if not path.startswith("/") else path


def call_answers(text: str) -> list[tuple[str, list[str]]]:
    """``[("derived:library-call", lines)]`` when the innermost frame of the traceback is
    outside torchrl/tensordict and under one of their frames (torch, numpy or Python
    raised inside a call the library made), else ``[]``."""
    trace = tb.frames(text)
    library = [i for i, f in enumerate(trace) if f.library]
    if not library or library[-1] == len(trace) - 1:
        return []
    frame, inner = trace[library[-1]], trace[library[-1] + 1]
    if inner.user and not _raiser_name(inner):
        return []
    expr = _caret_expression(text, frame) or frame.source
    parts = _call_parts(expr) if expr else None
    owner = function_at(frame.library, frame.line)
    where = f"{frame.library}:{frame.line}" + (f" in {owner[0]}" if owner else "")
    raiser = f"{_raiser_name(inner)} ({inner.function})"
    if parts is None:
        return [("derived:library-call", [f"{raiser} raised it under {where} (derived from the traceback)"]
                 + _wrap("line", frame.source or "(not shown)"))]
    func, args = parts
    lines = [f"{raiser} raised it inside the call {func}({', '.join(args)}) at {where} "
             f"(derived from the traceback and the installed source)"]
    lines += _wrap("arguments", ", ".join(args) or "none")
    if owner:
        passed = [a for a in args if a.split("=")[-1] in owner[3]]
        qual = owner[0].replace(".<locals>", "")
        if passed:
            lines += _wrap("from your call", f"{', '.join(passed)}: parameter(s) of {qual}, so the value(s) your call "
                           f"passed reach this call unchanged")
        site = st.Site(frame.library, frame.line, owner[0], "", ("",))
        callers, _ = st.public_callers(site)
        for usage, how in callers[:4]:
            lines += _wrap("public API", f"{usage}: {how}")
    user = next((f for f in reversed(trace[:library[-1]]) if f.user), None)
    if user is not None:
        lines += _wrap("your line", f"{user.path}:{user.line}" + (f": {user.source}" if user.source else ""))
    return [("derived:library-call", lines)]


# ---------------------------------------------------------------------------- references
@functools.lru_cache(maxsize=None)
def _reference_files() -> tuple[tuple[str, str], ...]:
    files = sorted(BUNDLE_ROOT.glob("references/*.md")) + sorted(BUNDLE_ROOT.glob("sub-skills/*/references/*.md"))
    return tuple((p.relative_to(BUNDLE_ROOT).as_posix(), p.read_text(encoding="utf-8", errors="replace")) for p in files)


def reference_answers(message: str) -> list[tuple[str, list[str]]]:
    """``[("reference:text", lines)]`` per reference paragraph quoting ``message`` (the
    whole message, or for a message of 8+ words a run of 6 of its words), at most two."""
    flat = " ".join(message.split())
    if len(flat) < st.MIN_LITERAL:
        return []
    words = flat.split()
    needles = [flat] if len(words) < 8 else [" ".join(words[i:i + 6]) for i in range(0, len(words) - 5, 3)]
    out = []
    for path, text in _reference_files():
        for para in re.split(r"\n\s*\n", text):
            joined = " ".join(para.split())
            if any(n in joined for n in needles):
                at = text.find(para)
                line = text[:at].count("\n") + 1
                heads = re.findall(r"^#+ (.+)$", text[:at + len(para.split("\n", 1)[0])], re.M)
                section = f"#{ei.slug(heads[-1])}" if heads else ""
                shown = re.sub(r"<!--.*?-->", "", joined).strip()
                lines = [f"quoted in {path}{section} (line {line}): a text search of the references, not an error-index entry"]
                lines += _wrap("text", shown[:400] + ("..." if len(shown) > 400 else ""))
                out.append(("reference:text", lines))
                break
        if len(out) == 2:
            break
    return out


def not_found_line(message: str) -> str:
    """What was searched when no site, extension string or reference holds ``message``: the
    installed releases only (an older torchrl raised messages this one no longer holds)."""
    from torchrl_skill.stack.probe import installed_version

    files = len(st.sources())
    ext = ", ".join(st.extension_strings()) or "no compiled extension"
    here = f"torchrl {installed_version('torchrl')} / tensordict {installed_version('tensordict')}"
    return (f"not raised by the installed {here}: {files} source files and {ext} hold no template of it; "
            f"torch, another library, Python, or another torchrl/tensordict release raised it")


def answers(text: str) -> list[tuple[str, list[str]]]:
    """Every answer above for ``text``, raising sites first; ``[]`` when nothing holds it."""
    out = site_answers(text)
    out += call_answers(text)
    if not out:
        out += reference_answers(st.message_of(text)[1])
    return out
