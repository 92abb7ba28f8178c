"""The error index: every troubleshooting entry of the bundle, as data (scripts/error_index.json).

One entry is one fault: the exact error text (``signatures``, substrings of the real
message) or regular expressions (``patterns``) that identify it, or, for a silent fault,
only a symptom ``title``; its cause, fix, the command that verifies the fix, the torchrl
versions, and its proof. From this file come:

- the troubleshooting pages: the block between :data:`BEGIN_MARK` and :data:`END_MARK`
  in each ``references/troubleshooting.md`` is :func:`render` of that area's entries
  (tests/test_error_index.py fails when a page is stale; regenerate it with
  ``python tests/render_docs.py``);
- ``python scripts/explain.py --error TEXT`` (:func:`match`, best first);
- the cause sentences checkers print (``by_id()["reward-emitted-from-reset"]``).

Proof: ``proof`` names what reproduces the entry on the verified stack. An entry with a
signature or pattern names its trigger, ``tests/error_triggers/<id_with_underscores>.py``,
which raises the real error (tests/test_error_index.py asserts the index matches the real
message); a symptom entry names a test (``tests/test_x.py::test_name``). An entry that
cannot be reproduced here says why in ``unreproducible`` instead.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

INDEX_PATH = Path(__file__).resolve().parent / "error_index.json"
SCHEMA_ID = "torchrl-skill.errors/1"
BEGIN_MARK = "<!-- BEGIN GENERATED from scripts/error_index.json: edit the index, then run python tests/render_docs.py -->"
END_MARK = "<!-- END GENERATED -->"
AREAS = (
    "root",
    "envs-and-transforms",
    "collectors-and-replay",
    "modules-and-policies",
    "objectives-and-training",
    "llm-vla-and-services",
    "development-and-testing",
)
REQUIRED = ("id", "area", "title", "cause", "fix", "verify", "versions")
OPTIONAL = ("section", "short", "context", "signatures", "patterns", "names", "reports", "proof", "unreproducible")


@dataclass(frozen=True)
class ErrorEntry:
    """One troubleshooting entry. Text fields are markdown; ``signatures`` are exact
    substrings of the real message, ``patterns`` Python regular expressions."""

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
    _compiled: tuple = field(default=(), repr=False, compare=False)

    @property
    def is_error(self) -> bool:
        """True when the entry is identified by error text (else it is a silent symptom)."""
        return bool(self.signatures or self.patterns)

    @property
    def page(self) -> str:
        """Bundle-relative path of the troubleshooting page this entry is rendered on."""
        base = "references" if self.area == "root" else f"sub-skills/{self.area}/references"
        return f"{base}/troubleshooting.md"

    @property
    def anchor(self) -> str:
        return slug(self.title)

    def plain(self, name: str) -> str:
        """A text field with markdown emphasis and links reduced to plain text (for CLI lines)."""
        text = getattr(self, name)
        text = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", text)
        return " ".join(text.replace("**", "").split())


def slug(title: str) -> str:
    """GitHub's heading anchor (lowercase, punctuation dropped, spaces to hyphens)."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-").rstrip("-")


def _entry(raw: dict, where: str) -> ErrorEntry:
    unknown = set(raw) - set(REQUIRED) - set(OPTIONAL)
    missing = [k for k in REQUIRED if not str(raw.get(k, "")).strip()]
    if unknown or missing:
        raise ValueError(f"{where}: unknown fields {sorted(unknown)}, missing {missing}")
    if raw["area"] not in AREAS:
        raise ValueError(f"{where}: area {raw['area']!r} is not one of {AREAS}")
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", raw["id"]):
        raise ValueError(f"{where}: id {raw['id']!r} is not kebab-case")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
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


def load(path: Path = INDEX_PATH) -> tuple[ErrorEntry, ...]:
    """Every entry of the index, in file order. Raises ValueError naming a malformed entry."""
    return _load_cached(str(path))


def by_id(path: Path = INDEX_PATH) -> dict[str, ErrorEntry]:
    return {e.id: e for e in load(path)}


def _norm(text: str) -> str:
    return " ".join(text.split())


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]{2,}", text.lower())}


def match(text: str, entries: tuple[ErrorEntry, ...] | None = None, limit: int = 5) -> list[tuple[float, ErrorEntry, str]]:
    """Entries whose signature or pattern occurs in ``text``, best first, as
    ``(score, entry, what matched)``.

    Score: an exact signature scores 100 plus its length (a longer, more specific text
    wins); a pattern 90 plus the matched length; when nothing matches exactly, the entries
    sharing most words with the text's last error line score below 50 (a near miss,
    shown as such by explain). Whitespace is normalised on both sides.
    """
    entries = load() if entries is None else entries
    flat = _norm(text)
    scored: dict[str, tuple[float, ErrorEntry, str]] = {}
    for entry in entries:
        for sig in entry.signatures:
            if _norm(sig) in flat:
                score = 100 + len(sig)
                if score > scored.get(entry.id, (0,))[0]:
                    scored[entry.id] = (score, entry, sig)
        for pattern in entry._compiled:
            found = pattern.search(flat)
            if found:
                score = 90 + len(found.group(0))
                if score > scored.get(entry.id, (0,))[0]:
                    scored[entry.id] = (score, entry, found.group(0))
    if not scored:
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        probe = _words(lines[-1] if lines else text)
        for entry in entries:
            target = _words(" ".join(entry.signatures) or entry.title)
            if probe and target:
                overlap = len(probe & target) / len(probe | target)
                if overlap >= 0.25:
                    scored[entry.id] = (round(50 * overlap, 1), entry, "similar words")
    return sorted(scored.values(), key=lambda row: -row[0])[:limit]


def render(area: str, entries: tuple[ErrorEntry, ...] | None = None) -> str:
    """The generated block of ``area``'s troubleshooting.md, marks included."""
    entries = [e for e in (load() if entries is None else entries) if e.area == area]
    out = [BEGIN_MARK, ""]
    if len(entries) >= 6:
        out.append("## Contents")
        sections = []
        for e in entries:
            if e.section and e.section not in sections:
                sections.append(e.section)
        for e in entries:
            out.append(f"- [{e.short or e.title}](#{e.anchor})")
        out.append("")
    current = None
    for e in entries:
        if e.section and e.section != current:
            out += [f"## {e.section}", ""]
            current = e.section
        out.append(f"### {e.title}")
        if e.context:
            out.append(e.context)
        out.append(f"**Cause:** {e.cause}")
        out.append(f"**Fix:** {e.fix}")
        out.append(f"**Verify:** {e.verify}")
        out.append(f"**Versions:** {e.versions}")
        proof = _proof_line(e)
        if proof:
            out.append(f"**Proof:** {proof}")
        out.append("")
    out.append(END_MARK)
    return "\n".join(out)


def _proof_line(e: ErrorEntry) -> str:
    if e.proof:
        return f"`{e.proof}`"
    if e.unreproducible:
        return f"not reproduced here: {e.unreproducible}"
    return ""
