"""Reading a traceback for ``explain.py --error``: its frames, and which error-index entries
the text confirms rather than only resembles.

A message that torch, tensordict or Python raises on behalf of many callers (the index's
``generic`` list: ``tensor shape is incompatible with dest shape``, ``'NoneType' object has
no attribute``, ...) says nothing about which caller raised it: tensordict's
``expand_as_right`` raises the same text for a replay buffer's index write-back and for
``MaskedCategorical.entropy()`` (torchrl 0.14.1). So an entry is *confirmed* only by a
matched signature or pattern that holds no generic text, or by a traceback frame that the
entry names in ``frames``; an entry matched by a generic text alone is a *candidate*, and
explain lists candidates with the frame that would tell them apart, never as an answer.

Nothing here imports torch (``--error`` runs without it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from torchrl_skill.explain import error_index as ei

# CPython's traceback line, and pytest's "path.py:123: in func" form.
_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>[<>\w.]+)')
_PYTEST_FRAME = re.compile(r"^(?P<path>\S+\.py):(?P<line>\d+): in (?P<func>[<>\w.]+)", re.M)
_LIBRARY = re.compile(r"(?:^|[/\\])((?:torchrl|tensordict)[/\\].+\.py)$")
# Python, site-packages and torch frames are neither the library asked about nor the user's code.
_ELSEWHERE = re.compile(r"site-packages|dist-packages|[/\\]lib[/\\]python\d|<frozen|^<")


@dataclass(frozen=True)
class Frame:
    """One traceback frame. ``library``: the path under site-packages for a torchrl or
    tensordict frame (``torchrl/modules/distributions/discrete.py``), else ""; ``user``:
    True for a frame of neither the library, Python nor an installed package; ``source``:
    the source line the traceback shows under it ("" when none)."""

    path: str
    line: int
    function: str
    library: str
    user: bool
    source: str

    def spec(self) -> str:
        """``library_path:function`` (the form of an entry's ``frames``)."""
        return f"{self.library}:{self.function}"


def frames(text: str) -> list[Frame]:
    """Every frame of ``text`` in order (outermost first, as a traceback prints them;
    chained tracebacks one after the other)."""
    text = ei.clean(text)
    lines = text.splitlines()
    out = []
    for number, line in enumerate(lines):
        found = _FRAME.search(line) or _PYTEST_FRAME.match(line)
        if not found:
            continue
        path = found.group("path").replace("\\", "/")
        lib = _LIBRARY.search(path)
        library = lib.group(1).replace("\\", "/") if lib else ""
        nxt = lines[number + 1] if number + 1 < len(lines) else ""
        source = "" if _FRAME.search(nxt) or _PYTEST_FRAME.match(nxt) or ei.is_exception_line(nxt) else nxt.strip()
        out.append(Frame(path, int(found.group("line")), found.group("func"), library,
                         not library and not _ELSEWHERE.search(path), source))
    return out


def frame_matches(spec: str, frame: Frame) -> bool:
    """True when an entry's ``frames`` item (``torchrl/x/y.py:function``) names ``frame``.
    Also when the frame's module is the item's parent package: an older release held in
    one module what a later one split into a package of that name (0.14's
    ``torchrl/data/replay_buffers/replay_buffers/tensordict.py`` is
    ``torchrl/data/replay_buffers/replay_buffers.py`` in 0.11-0.13)."""
    path, _, function = spec.rpartition(":")
    if not frame.library or frame.function != function:
        return False
    parent = path.rpartition("/")[0]
    return frame.library.endswith(path) or (parent.count("/") > 1 and frame.library.endswith(parent + ".py"))


@dataclass(frozen=True)
class Hit:
    """One entry that matched: ``score`` (``_error_index.match``'s, plus a bonus when a frame
    confirms it), ``matched`` (the text that matched), ``confirmed`` and ``evidence`` (why:
    a distinctive text, a frame, or "generic message only")."""

    score: float
    entry: ei.ErrorEntry
    matched: str
    confirmed: bool
    evidence: str


def _matched_texts(entry: ei.ErrorEntry, flat: str) -> list[str]:
    found = [s for s in entry.signatures if " ".join(s.split()) in flat]
    for pattern in entry._compiled:
        hits = list(pattern.finditer(flat))
        if hits:
            found.append(hits[-1].group(0))
    return found


def answer(text: str, entries=None) -> tuple[list[Hit], list[Frame]]:
    """``(hits, frames)``: every entry whose signature or pattern occurs in ``text``, confirmed
    ones first (best first), then candidates; near misses (score below 50) are left out.
    A frame named by an entry's ``frames`` adds 60 less 2 per frame between it and the
    raise (the innermost frame weighs most)."""
    trace = frames(text)
    flat = " ".join(ei.clean(text).split())
    hits = []
    for score, entry, matched in ei.match(text, entries, limit=10_000):
        if score < 50:
            continue
        distinctive = [m for m in _matched_texts(entry, flat) if not ei.is_generic(m)]
        depths = [depth for depth, frame in enumerate(reversed(trace)) for spec in entry.frames if frame_matches(spec, frame)]
        if depths:
            frame = list(reversed(trace))[min(depths)]
            hits.append(Hit(score + 60 - 2 * min(depths), entry, matched, True,
                            f"raised through {frame.spec()} (line {frame.line}), a frame this entry names"))
        elif distinctive:
            hits.append(Hit(score, entry, distinctive[0], True, f"matched {distinctive[0]!r}"))
        else:
            where = ", ".join(entry.frames) or "no frame recorded"
            hits.append(Hit(score, entry, matched, False, f"generic message only; this cause raises it through: {where}"))
    hits.sort(key=lambda h: (not h.confirmed, -h.score))
    return hits, trace


def raising_frames(trace: list[Frame]) -> tuple[Frame | None, Frame | None, Frame | None]:
    """``(raiser, torchrl caller, user line)`` of the last traceback in ``trace``: the
    innermost torchrl/tensordict frame, the innermost torchrl frame (the caller of a
    tensordict helper, when the raiser is one), and the innermost frame of the user's code
    outside the raiser (the line that called into the library)."""
    library = [f for f in trace if f.library]
    raiser = library[-1] if library else None
    caller = next((f for f in reversed(library) if f.library.startswith("torchrl/")), None)
    # the user's line calls into the library: a frame inside the raise (numpy's mtrand.pyx,
    # a relative path) is not it
    outer = trace[:max(i for i, f in enumerate(trace) if f is raiser)] if raiser is not None else trace
    user = next((f for f in reversed(outer) if f.user), None)
    return raiser, caller, user
