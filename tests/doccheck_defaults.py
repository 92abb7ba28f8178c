"""The stated-defaults rule of the docs test: a default that prose states is the live one.

A sentence may say what a keyword defaults to in three ways (inline code, markdown source):

    `strict_length=True` (default)        `kw=VALUE` then "(default)", ", the default",
    the default `ndim=1`                  "by default", "defaults", or "default" just before it
    `end_key=` (default `("next", "done")`)   `kw`/`kw=` then "(default `VALUE`)",
    `cat_results` at its default `None`       "default `VALUE`", "defaults to `VALUE`"

Its owner is the nearest callable named in inline code before it in the same section
(the span itself when it is ``Name(kw=VALUE)``) whose live signature has ``kw``. The stated
value must equal ``inspect.signature(owner).parameters[kw].default`` (a literal compared by
value and type, an enum member or a class by name). A statement whose owner no named
callable has is reported too: the docs must name whose default it is, or point to
``explain.py NAME``. Statements about a future release ("the default from v0.15") are not
read as today's default. tests/test_contract_negative.py feeds it a wrong and a right twin.
"""

from __future__ import annotations

import ast
import enum
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

import doccheck as dc

KW_VALUE = re.compile(r"^(?:(?P<owner>[A-Z][\w.]*)\(.*?)?\b(?P<kw>[a-z_]\w*)=(?P<value>[^,()]+?(?:\([^()]*\))?)\)?$", re.S)
KW_ONLY = re.compile(r"^(?P<kw>[a-z_]\w*)=?$")
# text right after `kw=VALUE` (and any further `k=v` spans) that marks it as the default
AFTER = re.compile(r"^[\s,]*(?:\(the default\b|\(default\)|\(defaults?\b|, the default\b|,? by default\b|defaults?\b|is the default\b)", re.I)
BEFORE = re.compile(r"\b(?:the|its|a|with)?\s*default\s*$", re.I)
# text after `kw` / `kw=` that introduces the stated value as the next span
VALUE_NEXT = re.compile(r"^[\s,]*(?:\(default\s*$|,?\s*default\s*$|\s*defaults\s+to\s*$|\s*at its default\s*$|\s*\(defaults to\s*$)", re.I)
FUTURE = re.compile(r"^[^.;]{0,40}\b(?:from|since|in|until|before)\s+v?\d+\.\d+", re.I)
CALLABLE_HEAD = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)(?:\(.*\))?$", re.S)


@dataclass(frozen=True)
class Stated:
    """One stated default: ``kw`` said to default to ``value`` (its source text)."""

    kw: str
    value: str
    line: int
    owners: tuple[str, ...]  # callables named before it in its section, nearest first
    future: bool


def _spans_with_text(inline_source: str) -> list[tuple[str, int, int]]:
    """(span text, start, end) of every `code` span in one paragraph's markdown source."""
    return [(m.group(2), m.start(), m.end()) for m in re.finditer(r"(`+)(.+?)\1", inline_source, re.S)]


def _callables(spans: list[str]) -> list[str]:
    names = []
    for span in spans:
        m = CALLABLE_HEAD.match(span.strip())
        if m and m.group("name")[:1].isupper():
            names.append(m.group("name"))
    return names


def stated_defaults(text: str) -> list[Stated]:
    """Every stated default of a markdown text (prose, tables, headings; code blocks are not
    prose). Owners, nearest first: callables in inline code before it in its paragraph, then
    after it there, then in earlier paragraphs of its section, then CamelCase words of the
    section heading."""
    found: list[Stated] = []
    section_names: list[str] = []
    heading_words: list[str] = []
    in_heading = False
    for tok in dc._tokens(text):
        if tok.type == "heading_open":
            section_names, heading_words, in_heading = [], [], True
        if tok.type == "heading_close":
            in_heading = False
        if tok.type != "inline" or not tok.map:
            continue
        source = tok.content
        if in_heading:
            heading_words = re.findall(r"\b[A-Z][a-z]+[A-Z]\w*\b", re.sub(r"`[^`]*`", " ", source))
        spans = _spans_with_text(source)
        for i, (span, start, end) in enumerate(spans):
            owners = tuple(reversed(_callables([s for s, _, _ in spans[:i]]))) + tuple(_callables([s for s, _, _ in spans[i + 1:]]))
            owners += tuple(reversed(section_names)) + tuple(heading_words)
            m = KW_VALUE.match(span.strip())
            if m and "=" in span:
                rest = source[end:]
                while True:  # skip a list of further `k=v` spans: "`low=-1`, `high=1` defaults"
                    nxt = re.match(r"^[\s,]*(?:and\s+)?`[a-z_]\w*=[^`]*`", rest)
                    if not nxt:
                        break
                    rest = rest[nxt.end():]
                if AFTER.match(rest) or BEFORE.search(source[:start]):
                    own = (m.group("owner"),) if m.group("owner") else ()
                    found.append(Stated(m.group("kw"), m.group("value").strip(), tok.map[0] + 1, own + owners,
                                        bool(FUTURE.match(re.sub(AFTER, "", rest, count=1)))))
                continue
            m = KW_ONLY.match(span.strip())
            if m and i + 1 < len(spans):
                between = source[end:spans[i + 1][1]]
                if VALUE_NEXT.match(between):
                    after = source[spans[i + 1][2]:]
                    found.append(Stated(m.group("kw"), spans[i + 1][0].strip(), tok.map[0] + 1, owners,
                                        bool(FUTURE.match(after))))
        section_names += _callables([s for s, _, _ in spans])
    return found


def _resolve(name: str):
    head, *rest = name.split(".")
    obj = dc.api_names().get(head)
    if obj is None:
        return dc.other_library_object(name)
    for attr in rest:
        obj = getattr(obj, attr, None)
    return obj


def _parameter(owner: str, kw: str):
    """``owner``'s parameter ``kw`` (a class: its ``__init__``, and the ``__init__`` of each
    base class while the one before passes ``**kwargs`` on), or None."""
    obj = _resolve(owner)
    if obj is None or not callable(obj):
        return None
    targets = [vars(k)["__init__"] for k in obj.__mro__ if "__init__" in vars(k)] if inspect.isclass(obj) else [obj]
    for target in targets:
        try:
            params = inspect.signature(target).parameters
        except (TypeError, ValueError):
            return None
        if kw in params:
            return params[kw]
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return None
    return None


def same_value(stated: str, default) -> bool | None:
    """Whether the stated text names ``default``: a literal by value and type (an int for a
    float is allowed, never a bool for a number), a dotted name by identity (an alias such
    as ``ExplorationType.RANDOM`` is the same member); None when it cannot be compared."""
    try:
        value = ast.literal_eval(stated)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        if re.fullmatch(r"[A-Za-z_][\w.]*", stated):
            obj = _resolve(stated)
            if obj is not None:
                return obj is default or (isinstance(default, enum.Enum) and obj == default)
        return None
    numbers = (int, float)
    if isinstance(value, bool) or isinstance(default, bool) or not (isinstance(value, numbers) and isinstance(default, numbers)):
        if type(value) is not type(default):
            return False
    return value == default


def check_stated_defaults(md: Path) -> list[str]:
    """A problem for each stated default that is not the live one or whose owner no callable
    named before it has (see the module docstring)."""
    where = md.relative_to(dc.BUNDLE) if md.is_relative_to(dc.BUNDLE) else md
    problems = []
    for s in stated_defaults(md.read_text()):
        if s.future:
            continue
        owner = next((o for o in s.owners if _parameter(o, s.kw) is not None), None)
        if owner is None:
            problems.append(f"{where}:{s.line}: a default of `{s.kw}` is stated, but no callable named before it in its "
                            f"section takes `{s.kw}`: name the owner, or point to explain.py NAME")
            continue
        default = _parameter(owner, s.kw).default
        if default is inspect.Parameter.empty:
            problems.append(f"{where}:{s.line}: `{s.kw}` of {owner} has no default (stated `{s.value}`)")
        elif same_value(s.value, default) is False:
            problems.append(f"{where}:{s.line}: stated default `{s.kw}={s.value}` of {owner}; the installed default is {default!r}")
    return problems
