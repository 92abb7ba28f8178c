"""Named causes of check_user_env.py, carried as structured ids.

A cause id is the ``id`` of an entry of src/torchrl_skill/data/error_index.json (area
envs-and-transforms); its cause and fix sentences are read from there, so the checker,
``explain.py --error`` and the troubleshooting page say the same thing. A check raises
:class:`EnvFault` (a ``skill_report.CheckFailed`` carrying ``cause_id``) or, for an
exception no entry names, :class:`UnknownFault` (with the line that raised it). A later
check's fault is reported under a root cause of the reset output by :func:`diagnosed`,
which compares ids, never output text.
"""

from __future__ import annotations

import functools

from torchrl_skill.explain import error_index as _error_index
from torchrl_skill.report import skill_report as sr
from torchrl_skill.runtime.user_code import TimeLimitExceeded, error_site

AREA = "envs-and-transforms"

# Faults in the reset output that make later checks fail for their own reasons.
ROOT_CAUSES = (
    "reward-emitted-from-reset", "done-true-after-reset", "key-missing-from-reset", "transform-skips-reset", "action-mask-mismatch",
)
# Causes a later check may report when the real fault is one of ROOT_CAUSES.
FOLLOW_FROM_RESET = frozenset({
    *ROOT_CAUSES, "key-missing-under-next", "key-not-in-spec", "value-outside-spec", "batched-tensordict-to-unbatched-env",
})


def cause_entry(cause_id: str) -> _error_index.ErrorEntry:
    """The error-index entry of ``cause_id`` (KeyError when the index lacks it)."""
    return _error_index.by_id()[cause_id]


class EnvFault(sr.CheckFailed):
    """A fault with a named cause.

    ``cause_id``: an error-index id; ``observed``: what the check saw; ``raised_by``: the
    call that raised, when the fault was read from an exception; ``follows``: the check
    that found the root cause this fault is reported under.
    """

    def __init__(self, cause_id: str, observed: str, *, raised_by: str | None = None, follows: str | None = None):
        self.cause_id, self.observed, self.raised_by, self.follows = cause_id, observed, raised_by, follows
        entry = cause_entry(cause_id)
        head = f"[{cause_id}] " + (f"follows from the root cause found by {follows}; this check saw: " if follows else "")
        tail = "; then rerun this check" if follows else ""
        cause, fix = entry.plain("cause").rstrip("."), entry.plain("fix").rstrip(".")
        super().__init__(f"{head}{self.seen}; cause: {cause}; fix: {fix}{tail}")

    @property
    def seen(self) -> str:
        return f"{self.raised_by} raised {self.observed}" if self.raised_by else self.observed

    def under(self, root: "EnvFault") -> "EnvFault":
        """This fault reported under ``root`` (found by ``root.follows`` or env:reset-output)."""
        return EnvFault(root.cause_id, self.seen, follows="env:reset-output")


class UnknownFault(sr.CheckFailed):
    """An exception that no error-index entry names; the detail says where it was raised."""

    cause_id = None

    def __init__(self, what: str, err: BaseException):
        self.seen = f"{what} raised {sr.first_line(err)}"
        super().__init__(f"{self.seen} (no known cause; raised at {error_site(err)})")

    def under(self, root: EnvFault) -> EnvFault:
        return EnvFault(root.cause_id, self.seen, follows="env:reset-output")


def diagnose(text: str) -> str | None:
    """The cause id whose signature or pattern occurs in the error ``text``, else None.

    Reads the envs entries of the error index (``_error_index.match``; exact matches only,
    best first). check_env_specs' keys mismatch prints both key sets every time, so its
    entries match on which set holds what (patterns), not on the message's labels."""
    entries = tuple(e for e in _error_index.load() if e.area == AREA)
    found = [entry for score, entry, _ in _error_index.match(text, entries, limit=3) if score >= 90]
    return found[0].id if found else None


def fault_from(err: BaseException, what: str) -> sr.CheckFailed:
    """An EnvFault when the index names ``err``'s cause, else an UnknownFault."""
    cause = diagnose(f"{type(err).__name__}: {err}")
    if cause:  # the whole message on one line: check_env_specs names the keys on its second and third lines
        return EnvFault(cause, sr.one_line(f"{type(err).__name__}: {err}")[:600], raised_by=what)
    return UnknownFault(what, err)


def diagnosed(fn=None, *, root_of=None):
    """Decorate a check: an unexpected exception becomes its named fault; with ``root_of``
    (``env -> EnvFault | None``, a root cause of the reset output), a fault that such a root
    cause explains is reported under it. Time limits, skips and interrupts pass through."""
    if fn is None:
        return functools.partial(diagnosed, root_of=root_of)

    @functools.wraps(fn)
    def check(*args, **kwargs):
        try:
            try:
                return fn(*args, **kwargs)
            except (sr.CheckFailed, sr.CheckSkipped, sr.BackendMissing, TimeLimitExceeded):
                raise
            except Exception as err:
                raise fault_from(err, "the check") from None
        except (EnvFault, UnknownFault) as fault:
            if root_of is None or (fault.cause_id is not None and fault.cause_id not in FOLLOW_FROM_RESET):
                raise
            root = root_of(kwargs["env"] if "env" in kwargs else args[0])
            if root is None or root.cause_id == fault.cause_id:
                raise
            raise fault.under(root) from None

    return check
