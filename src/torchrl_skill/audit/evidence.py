"""Minimum evidence: what a detector must have seen before its verdict is one (both sides).

A PASS is a proof only when it was measured on enough events. Each detector states its
minimum (optimizer steps, episodes, resets, samples, calls) with :func:`need`: short of it,
the row is a SKIP that says how many it saw, how many it needs and how to get them. A
``Short`` skip differs from a plain one ("the component was not used"): the child stops a
run early only when no detector is short (see d_training.py), and a test can tell the two
apart.

While the run goes on, the early stop judges every detector on the sections so far, marked
``observed["live"]`` (:func:`live`). A monitor that judges a trend over the run (entropy
over time) answers ``Short`` then while its measure sits near its fault line, so the run
goes on until the measure crosses the line or leaves it behind; once the run ended it gives
its verdict on what it saw.
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

MORE = "run longer: raise --max-frames (or --seconds)"


class Short(sr.CheckSkipped):
    """The component was used, but the run ended before the detector saw its minimum evidence."""


def need(seen: int, needed: int, what: str, unit: str, more: str = MORE) -> None:
    """Raise :class:`Short` unless ``seen >= needed``: ``"WHAT: saw SEEN UNIT, NEEDED needed to
    judge; MORE"``."""
    if seen < needed:
        raise Short(f"{what}: saw {seen} {unit}, {needed} needed to judge; {more}")


def live(observed: dict) -> bool:
    """Whether ``observed`` is the early stop's view of a run still going on (d_training.py),
    not the run's end."""
    return bool(observed.get("live"))


def readiness(module, observed: dict) -> bool | None:
    """Whether ``module.judge`` has its verdict on ``observed``: True (a pass or a fail), False
    (short of evidence), None (its component was not seen, or the judge could not run)."""
    try:
        module.judge(observed)
    except Short:
        return False
    except sr.CheckSkipped:
        return None
    except sr.CheckFailed:
        return True
    except Exception:  # a judge that cannot read a half-built section yet has no opinion
        return None
    return True


def optimizer_label(o: dict) -> str:
    """``"Adam #1 (stepped at train.py:52)"``: an optimizer as the invariant rows name it, from
    their per-optimizer summaries (``cls``, ``n``: its order of first step, ``site``)."""
    return f"{o['cls']} #{o['n']} (stepped at {o['site']})"
