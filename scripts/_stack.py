"""The stack probe: which torch/tensordict/torchrl are installed, and whether the bundle
may run on them. Imports nothing but the standard library until torchrl itself (so it can
say, in one line, that something is missing). Re-exported by skill_report.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import platform
import re
import sys

# The range this bundle was verified on (references/repo-provenance.md). A lower
# bound alone would let a future release with renamed APIs pass silently. torch is
# left open above on purpose: a torch that does not match torchrl's build is a fault
# for check_torchrl_env.py to name (exit 1), not a reason to refuse to run (exit 2).
SUPPORTED = {
    "torch": ("2.1", None),
    "tensordict": ("0.14", "0.15"),
    "torchrl": ("0.14", "0.15"),
}
VERIFIED = {"torch": "2.14.1", "tensordict": "0.14.3", "torchrl": "0.14.1"}


def _release(version: str) -> tuple[int, ...]:
    """``"2.14.1+cpu"`` -> ``(2, 14, 1)``. Plain parsing: ``packaging`` may be absent when
    this runs (it arrives with torchrl, whose absence is what we are reporting)."""
    match = re.match(r"\d+(\.\d+)*", version.strip().lstrip("vV"))
    return tuple(int(x) for x in match.group(0).split(".")) if match else (0,)


def installed_version(dist: str) -> str | None:
    """Installed distribution version from its metadata, or None; never imports it."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def stack_versions() -> dict[str, str | None]:
    """``{"python", "torch", "tensordict", "torchrl"}`` versions (None when not installed)."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("torch", "tensordict", "torchrl"):
        try:
            found = importlib.util.find_spec(dist)
        except (ImportError, ValueError):  # a module set to None in sys.modules is hidden
            found = None
        out[dist] = installed_version(dist) if found else None
    return out


def require_stack(import_torchrl: bool = True) -> dict[str, str | None]:
    """Exit 2 unless torch, tensordict and torchrl are installed, in range and importable.

    The supported range is :data:`SUPPORTED` (verified on :data:`VERIFIED`). A torchrl
    that imports but whose compiled extension is broken is NOT rejected here: that is a
    check failure for ``scripts/check_torchrl_env.py`` to report, not a reason to refuse.
    Returns :func:`stack_versions`.
    """
    from _base import cannot_run, first_line

    versions = stack_versions()
    pins = " ".join(f"{d}=={v}" for d, v in VERIFIED.items())
    for dist, (low, high) in SUPPORTED.items():
        found = versions[dist]
        if found is None:
            cannot_run(f"{dist} is not installed", f"pip install {pins}")
        rel = _release(found)
        if rel < _release(low) or (high and rel >= _release(high)):
            rng = f">={low}" + (f",<{high}" if high else "")
            cannot_run(
                f"{dist} {found} is outside the range this bundle supports ({dist}{rng})",
                f"pip install {pins} (or use a bundle verified for {dist} {found})",
            )
    if import_torchrl:
        # torchrl's logger binds its stream at import and defaults to stdout; a JSON
        # report must own stdout (torchrl/_utils.py reads TORCHRL_CONSOLE_STREAM).
        os.environ.setdefault("TORCHRL_CONSOLE_STREAM", "stderr")
        with contextlib.redirect_stdout(sys.stderr):
            try:
                import torchrl  # noqa: F401
            except Exception as err:  # an import failure is a stack fault, reported in one line
                missing = _missing_requirement(err)
                fix = f"pip install '{missing}'" if missing else f"install matching releases: pip install {pins}"
                cannot_run(f"import torchrl failed: {first_line(err)}", fix)
        plain_torchrl_logs()
    return versions


def _missing_requirement(err: BaseException) -> str | None:
    """The requirement string torchrl declares for the module ``err`` says is missing
    (e.g. ``"hoptorch>=0.1.4"``), read from torchrl's own metadata; None otherwise."""
    name = getattr(err, "name", None) if isinstance(err, ModuleNotFoundError) else None
    if not name:
        return None
    top = name.split(".")[0].lower().replace("_", "-")
    for req in importlib.metadata.requires("torchrl") or []:
        if "extra ==" in req:
            continue
        dist = re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0]
        if dist.lower().replace("_", "-") == top:
            return req.split(";")[0].strip()
    return None


def plain_torchrl_logs() -> None:
    """Quiet and plain torchrl log lines while a check runs.

    torchrl/_utils.py (0.14.1) logs at INFO by default ("check_env_specs succeeded!",
    "Initialized LazyTensorStorage ..."), lines that land between a script's report rows;
    the level drops to WARNING unless the user set RL_LOGGING_LEVEL (torchrl's own switch).
    It also formats every record with green escape codes whatever the stream; in a
    redirected log they show as ``[92m``, so they are dropped there (a terminal keeps them)."""
    import logging

    logger = logging.getLogger("torchrl")
    if "RL_LOGGING_LEVEL" not in os.environ:
        logger.setLevel(logging.WARNING)
        for handler in logger.handlers:
            handler.setLevel(logging.WARNING)
    for handler in logger.handlers:
        stream = getattr(handler, "stream", None)
        if stream is not None and not (hasattr(stream, "isatty") and stream.isatty()):
            handler.setFormatter(logging.Formatter("%(asctime)s [%(name)s][%(levelname)s] %(message)s"))
