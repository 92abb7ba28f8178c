"""Child-process bookkeeping for the check scripts: prove a check left nothing running.

Re-exported by skill_report (``sr.child_processes``, ``sr.leftover_processes``).
"""

from __future__ import annotations

import time


def is_resource_tracker(cmdline: list[str]) -> bool:
    """Whether a command line is multiprocessing's resource tracker (``python -B -c "from
    multiprocessing.resource_tracker import main; ..."``: the name is in its 4th word)."""
    return any("resource_tracker" in part for part in cmdline)


def child_processes() -> dict[int, str]:
    """Live (non-zombie) descendants of this process, ``{pid: "name cmdline[:2]"}``.

    Used to prove a check left nothing running. Needs psutil (in requirements.txt);
    raises :class:`BackendMissing` without it. ``multiprocessing``'s resource tracker is
    excluded: the standard library keeps it alive until the interpreter exits.
    """
    try:
        import psutil
    except ImportError:
        from torchrl_skill.report.base import BackendMissing

        raise BackendMissing("psutil not installed; install: pip install psutil") from None
    out = {}
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            cmd = proc.cmdline()
            if is_resource_tracker(cmd):
                continue
            out[proc.pid] = " ".join([proc.name(), *cmd[:2]])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def leftover_processes(before: dict[int, str], grace: float = 10.0) -> dict[int, str]:
    """Descendants absent from ``before`` still alive after up to ``grace`` seconds."""
    deadline = time.monotonic() + grace
    while True:
        left = {pid: desc for pid, desc in child_processes().items() if pid not in before}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)
