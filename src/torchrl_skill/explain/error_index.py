"""The error index: every troubleshooting entry of the bundle, as data (src/torchrl_skill/data/error_index.json).

One entry is one fault: the stable part of the real error text (``signatures``, exact
substrings: no sizes, paths or user keys) and regular expressions for the parts that vary
(``patterns``), or, for a silent fault, only a symptom ``title``; its cause, fix, the
command that verifies the fix, the torchrl versions, the TorchRL names it is about
(``names``), and its proof. From this file come:

- the troubleshooting pages: the block between :data:`BEGIN_MARK` and :data:`END_MARK`
  of each area's page is :func:`render` of that area's entries (tests/test_error_index.py
  fails when a page is stale; regenerate with ``python tests/render_docs.py``). ``also``
  puts a one-line pointer on other areas' pages (one entry, one place); ``page`` splits an
  area over several ``troubleshooting*.md`` files when one would pass the route budget;
- ``python scripts/explain.py --error TEXT`` (:func:`match`, best first) and the notes
  ``explain.py NAME`` prints for the entries whose ``names`` list NAME;
- the cause sentences checkers print (``by_id()["reward-emitted-from-reset"]``).

Proof: an entry with a signature or pattern names its trigger in ``proof``,
``tests/error_triggers/<id_with_underscores>.py``, which raises the real error on the
verified stack (tests/test_error_index.py asserts the index matches the real message and
ranks the entry first); a symptom entry names a test (``tests/test_x.py::test_name``). An
entry that cannot be reproduced here says why in ``unreproducible`` instead.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from torchrl_skill import data

from torchrl_skill.report.base import AREAS, bundle_text  # noqa: E402  ("root" and the six sub-skills)

INDEX_PATH = data.ERROR_INDEX
SCHEMA_ID = "torchrl-skill.errors/1"
BEGIN_MARK = "<!-- BEGIN GENERATED from src/torchrl_skill/data/error_index.json: edit the index, then run python tests/render_docs.py -->"
END_MARK = "<!-- END GENERATED -->"
DEFAULT_PAGE = "troubleshooting.md"


@dataclass(frozen=True)
class ErrorEntry:
    """One troubleshooting entry. Text fields are markdown; ``signatures`` are exact
    substrings of the real message (its stable part: no sizes, paths or user keys),
    ``patterns`` Python regular expressions for the parts that vary. ``names``: the
    TorchRL/TensorDict names the entry is about (explain.py shows it for them). ``also``:
    other areas whose page carries a one-line pointer to this entry. ``page_name``: the
    file (under the area's ``references/``) it is rendered on, when an area's entries are
    split over several pages (JSON field ``page``). ``frames``: the library functions
    whose traceback frame confirms this entry, as ``path/under/site-packages.py:function``
    (``torchrl/modules/distributions/discrete.py:entropy``); an entry whose only matching
    text is a :func:`generic_messages` text is a candidate until a frame confirms it.
    ``since``/``until``: the first torchrl release the entry applies to / no longer applies
    to (None: not known, or still applies); ``verified_on``: the torchrl releases on which
    its proof ran and held (stamped by ``benchmarks/stamp_versions.py`` from the version
    matrix)."""

    id: str
    area: str
    title: str
    cause: str
    fix: str
    verify: str
    versions: str
    section: str = ""
    short: str = ""
    context: str = ""
    signatures: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    reports: tuple[str, ...] = ()
    proof: str = ""
    unreproducible: str = ""
    also: tuple[str, ...] = ()
    page_name: str = DEFAULT_PAGE
    frames: tuple[str, ...] = ()
    since: str | None = None
    until: str | None = None
    verified_on: tuple[str, ...] = ()
    _compiled: tuple = field(default=(), repr=False, compare=False)

    @property
    def is_error(self) -> bool:
        """True when the entry is identified by error text (else it is a silent symptom)."""
        return bool(self.signatures or self.patterns)

    @property
    def page(self) -> str:
        """Bundle-relative path of the troubleshooting page this entry is rendered on."""
        return page_path(self.area, self.page_name)

    @property
    def anchor(self) -> str:
        return slug(self.title)

    @property
    def trigger(self) -> str:
        """Bundle-relative path of the trigger that proves an error entry."""
        return f"tests/error_triggers/{self.id.replace('-', '_')}.py"

    def plain(self, name: str) -> str:
        """A text field with markdown emphasis and links reduced to plain text (for CLI lines).

        Records the read (``_base.bundle_text``): a report row built from it is marked
        unverified when the installed torchrl is on none of the lines in ``verified_on``."""
        bundle_text(self.verified_on)
        text = getattr(self, name)
        text = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", text)
        return " ".join(text.replace("**", "").split())


def page_path(area: str, name: str = DEFAULT_PAGE) -> str:
    """Bundle-relative path of ``area``'s page ``name`` (root: ``references/``)."""
    base = "references" if area == "root" else f"sub-skills/{area}/references"
    return f"{base}/{name}"


def slug(title: str) -> str:
    """GitHub's heading anchor (lowercase, punctuation dropped, spaces to hyphens)."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-").rstrip("-")


@functools.lru_cache(maxsize=1)
def _entry_validator():
    """A jsonschema validator of one entry (``$defs/entry`` of data/error_index.schema.json, the
    one place the fields are written); None where jsonschema is not installed (it is pinned in
    requirements.txt; the test suite validates the bundled index on every run)."""
    try:
        import jsonschema
    except ImportError:
        return None
    schema = json.loads(data.ERROR_INDEX_SCHEMA.read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator({**schema["$defs"]["entry"], "$defs": schema["$defs"]})


def _entry(raw: dict, where: str) -> ErrorEntry:
    validator = _entry_validator()
    if validator is not None:
        errors = sorted(validator.iter_errors(raw), key=lambda e: list(e.absolute_path))
        if errors:
            err = errors[0]
            field = ".".join(str(p) for p in err.absolute_path) or "entry"
            raise ValueError(f"{where}: {field}: {err.message}")
    # what a schema cannot state: another area than its own, a pattern that compiles
    if raw["area"] in raw.get("also", []):
        raise ValueError(f"{where}: also names the entry's own area {raw['area']!r}; list other areas")
    values = {("page_name" if k == "page" else k): tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
    try:
        compiled = tuple(re.compile(p) for p in values.get("patterns", ()))
    except re.error as err:
        raise ValueError(f"{where}: bad pattern: {err}") from None
    return ErrorEntry(**values, _compiled=compiled)


@functools.lru_cache(maxsize=None)
def _load_cached(path: str) -> tuple[ErrorEntry, ...]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if data.get("schema") != SCHEMA_ID:
        raise ValueError(f"{path}: schema is {data.get('schema')!r}, expected {SCHEMA_ID!r}")
    entries = tuple(_entry(raw, f"{Path(path).name} entry {i} ({raw.get('id')})") for i, raw in enumerate(data["entries"]))
    ids = [e.id for e in entries]
    doubled = sorted({i for i in ids if ids.count(i) > 1})
    if doubled:
        raise ValueError(f"{path}: ids used twice: {doubled}")
    return entries


@dataclass(frozen=True)
class GenericMessage:
    """A message torch, tensordict or Python raises on behalf of many callers: ``text`` (its
    stable part), ``raised_by`` (``tensordict/utils.py:expand_as_right``, ``torch`` for a
    kernel's message, ``python`` for the interpreter's) and ``called_as`` (the name its
    callers use, counted by tests/test_explain_tracebacks.py in the installed source)."""

    text: str
    raised_by: str
    called_as: str = ""


@functools.lru_cache(maxsize=None)
def generic_messages(path: Path = INDEX_PATH) -> tuple[GenericMessage, ...]:
    """The index's ``generic`` list: matching one of these texts alone never confirms an entry."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return tuple(GenericMessage(**item) for item in data.get("generic", []))


def is_generic(matched: str, path: Path = INDEX_PATH) -> bool:
    """True when the matched text of a signature or pattern holds a generic message."""
    flat = _norm(matched)
    return any(_norm(g.text) in flat for g in generic_messages(path))


def load(path: Path = INDEX_PATH) -> tuple[ErrorEntry, ...]:
    """Every entry of the index, in file order. Raises ValueError naming a malformed entry."""
    return _load_cached(str(path))


def by_id(path: Path = INDEX_PATH) -> dict[str, ErrorEntry]:
    return {e.id: e for e in load(path)}


def _norm(text: str) -> str:
    return " ".join(text.split())


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]{2,}", text.lower())}


# The words of Python's own error templates ("'X' object has no attribute 'y'", "got an
# unexpected keyword argument", "missing 1 required positional argument", "cannot import
# name ... from ..."), the package names and English glue: two messages sharing only
# these share nothing.
GENERIC = frozenset("""
    the and for with from not but was were are has have been its this that into than then when
    object attribute type module name named import cannot can could must should got given
    unexpected keyword argument arguments missing required positional takes expected invalid
    found failed error value values none nonetype true false call called instead please one
    torch torchrl tensordict data
""".split())


def distinctive(words: set[str]) -> set[str]:
    """``words`` without :data:`GENERIC` ones, dunders (``__init__``) and exception class
    names (``keyerror``)."""
    return {w for w in words if w not in GENERIC and not w.startswith("__")
            and not w.endswith(("error", "exception", "warning"))}


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PYTEST_E = re.compile(r"^E {1,}", re.M)  # pytest prefixes each line of the failure with "E   "
_EXC_LINE = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure)|AssertionError|KeyError|StopIteration)\b(?::|$)")


def clean(text: str) -> str:
    """``text`` without ANSI colour codes and pytest's ``E`` line prefixes."""
    return _PYTEST_E.sub("", _ANSI.sub("", text))


def _exception_spans(text: str) -> list[tuple[int, int]]:
    """Character spans (in :func:`_norm` of ``text``) of the raised errors' messages: from
    each line that starts with an exception name to the next traceback header or frame."""
    lines = text.splitlines()
    spans, pos, start = [], 0, None
    offsets = []
    for line in lines:
        words = line.split()
        offsets.append(pos)
        pos += len(" ".join(words)) + (1 if words else 0)
    offsets.append(pos)
    for i, line in enumerate(lines):
        is_exc = bool(_EXC_LINE.match(line))
        ends = line.startswith(("Traceback (most recent call last)", "During handling", "The above exception")) or line.lstrip().startswith('File "')
        if start is not None and (ends or is_exc):
            spans.append((offsets[start], offsets[i]))
            start = None
        if is_exc:
            start = i
    if start is not None:
        spans.append((offsets[start], offsets[-1]))
    return spans


def is_exception_line(line: str) -> bool:
    """True for a line that starts with an exception name (``KeyError: ...``)."""
    return bool(_EXC_LINE.match(line))


def last_error_line(text: str) -> str:
    """The last line that names an exception (``KeyError: ...``), else the last non-empty line."""
    lines = [ln.strip() for ln in clean(text).splitlines() if ln.strip()]
    exc = [ln for ln in lines if _EXC_LINE.match(ln)]
    return (exc or lines or [""])[-1]


def match(text: str, entries: tuple[ErrorEntry, ...] | None = None, limit: int = 5) -> list[tuple[float, ErrorEntry, str]]:
    """Entries whose signature or pattern occurs in ``text``, best first, as
    ``(score, entry, what matched)``.

    ``text`` may be one message or a whole log: tracebacks, worker output, pytest's ``E``
    prefixes and colour codes are fine, and sizes, paths and keys may differ from the
    entry's example (signatures hold only the stable part of a message; patterns the rest).
    Score: a signature 100, a pattern 90, plus the matched length up to 80 (the more
    specific text wins), plus 20 when the match lies in a raised error's message rather
    than in a warning or log line. When nothing matches, the entries sharing most words
    with the last error line score below 50: a near miss, which explain shows as such. A
    near miss must share at least one :func:`distinctive` word (a TorchRL name, a key, a
    method): entries that share only "object has no attribute" are left out.
    Whitespace is normalised on both sides.
    """
    entries = load() if entries is None else entries
    text = clean(text)
    flat = _norm(text)
    spans = _exception_spans(text)

    def score(base: int, at: int, length: int) -> float:
        raised = any(lo <= at < hi for lo, hi in spans)
        return base + min(length, 80) + (20 if raised else 0)

    scored: dict[str, tuple[float, ErrorEntry, str]] = {}
    for entry in entries:
        for sig in entry.signatures:
            needle = _norm(sig)
            at = flat.rfind(needle)
            if needle and at >= 0:
                value = score(100, at, len(needle))
                if value > scored.get(entry.id, (0,))[0]:
                    scored[entry.id] = (value, entry, sig)
        for pattern in entry._compiled:
            found = None
            for found in pattern.finditer(flat):
                pass  # the last occurrence: nearest the final error
            if found:
                value = score(90, found.start(), len(found.group(0)))
                if value > scored.get(entry.id, (0,))[0]:
                    scored[entry.id] = (value, entry, found.group(0))
    if not scored:
        probe = _words(last_error_line(text) or text)
        for entry in entries:
            target = _words(" ".join(entry.signatures) or entry.title)
            if probe and target and distinctive(probe & target):
                overlap = len(probe & target) / len(probe | target)
                if overlap >= 0.25:
                    scored[entry.id] = (round(50 * overlap, 1), entry, "similar words")
    ranked = sorted(scored.values(), key=lambda row: -row[0])
    return ranked[:limit]


def pages(entries: tuple[ErrorEntry, ...] | None = None) -> list[tuple[str, str]]:
    """``(area, page file name)`` of every page that has entries or pointers, in area order."""
    entries = load() if entries is None else entries
    found = {(e.area, e.page_name) for e in entries} | {(a, DEFAULT_PAGE) for e in entries for a in e.also}
    return [(a, n) for a in AREAS for n in sorted({n for area, n in found if area == a})]


def render(area: str, entries: tuple[ErrorEntry, ...] | None = None, page: str = DEFAULT_PAGE) -> str:
    """The generated block of ``area``'s page ``page``, marks included.

    Compact on purpose (a route's token budget counts this page): per entry the heading
    (the exact error text or the symptom) and one paragraph line: context, cause, fix,
    verify, versions. The proof stays in the index (a trigger or a test,
    checked by tests/test_error_index.py); an entry that cannot be reproduced here says so.
    A ``## Contents`` list is added when the block is long. Entries of other areas that
    list this area in ``also`` get a one-line pointer at the end (only on the area's
    first page)."""
    everything = load() if entries is None else entries
    mine = [e for e in everything if e.area == area and e.page_name == page]
    body: list[str] = []
    current = None
    for e in mine:
        if e.section and e.section != current:
            body += [f"## {e.section}", ""]
            current = e.section
        body.append(f"### {e.title}")
        tail = f" Not reproduced here: {e.unreproducible}" if e.unreproducible and not e.proof else ""
        # one markdown paragraph either way; one line keeps long pages under the
        # 100 lines after which a reference needs a Contents list
        lead = f"{e.context} " if e.context else ""
        body.append(f"{lead}**Cause:** {e.cause} **Fix:** {e.fix} **Verify:** {e.verify} **Versions:** {e.versions}{tail}")
        body.append("")
    pointers = [e for e in everything if area in e.also] if page == DEFAULT_PAGE else []
    if pointers:
        here = page_path(area, page)
        body += ["## Kept on another page", ""]
        for e in pointers:
            link = os.path.relpath(e.page, os.path.dirname(here))
            body.append(f"- {e.short or e.title}: [{e.area}]({link}#{e.anchor})")
        body.append("")
    out = [BEGIN_MARK, ""]
    if len(body) > 85:  # the page (with its own header) would pass 100 lines: doccheck wants a Contents list
        out.append("## Contents")
        out += [f"- [{e.short or e.title}](#{e.anchor})" for e in mine]
        out.append("")
    return "\n".join(out + body + [END_MARK])
