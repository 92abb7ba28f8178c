"""Run every bundled check script and print one table.

Discovers scripts/*.py and sub-skills/*/scripts/*.py, runs each one's checks with its
default arguments (the same checks `python <script>` runs), and keeps the exit-code
contract: 0 when no check failed, 1 when one did, 2 when the stack cannot run at all.
Rows are named `<area>/<script>:<check>`, in discovery order. The scripts run in
--jobs worker processes (default: one per core), forked after torchrl is imported once;
--jobs 1 runs them one after another in this process. Ctrl-C stops every worker and what
it started, and exits 130.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import skill_report as sr  # noqa: E402

AREAS = list(sr.AREAS)
EXAMPLE = "python $SKILL_DIR/scripts/run_all_checks.py --only envs-and-transforms --json"


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument(
        "--only",
        action="append",
        choices=AREAS,
        metavar="AREA",
        help=f"run only this area's scripts (repeatable): {', '.join(AREAS)}",
    )
    parser.add_argument(
        "--jobs",
        type=sr.int_at_least(1),
        default=None,
        metavar="N",
        help="worker processes running scripts side by side (default: one per core; 1: all in this process)",
    )
    return parser


def load_script(path: Path):
    """Import a check script by its plain module name, its folder on sys.path.

    Plain names (not a synthetic one) keep module-level env factories picklable by
    reference for spawned worker processes.
    """
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(path.stem)


def script_rows(path: Path, versions: dict | None = None) -> list[sr.CheckResult]:
    """Run one script's checks with default arguments; its rows, named ``<area>/<script>:<check>``.

    A script that refuses to run (exit 2) or raises outside a check is one ``fail`` row of
    that script, not the runner's crash. KeyboardInterrupt propagates.
    """
    prefix = f"{sr.script_area(path)}/{path.stem}:"
    sub = sr.Report(str(path), json_mode=True, versions=versions)
    start = time.perf_counter()
    try:
        with sub.quiet_stdout():
            module = load_script(path)
            args = module.build_parser().parse_args([])
            sub.timeout = getattr(args, "timeout", None)  # as standard_main gives it when run alone
            module.run_checks(args, sub)
    except sr.CannotRun:
        sub.add("cannot-run", "fail", "the script refused to run (see the line on stderr)")
    except Exception as err:  # a broken script is that script's failure, not the runner's
        sub.add("script-error", "fail", sr.first_line(err), time.perf_counter() - start)
    return [sr.CheckResult(f"{prefix}{c.name}", c.status, c.seconds, c.detail) for c in sub.checks]


def run_script(path: Path, into: sr.Report) -> None:
    """Run one script's checks in this process; append (and in text mode print) its rows."""
    _record(script_rows(path, into.versions), into)


def _record(rows: list[sr.CheckResult], into: sr.Report) -> None:
    into.checks.extend(rows)
    if not into.json_mode:
        for row in rows:
            sr.print_row(row)


def _worker(conn, scratch: str) -> None:
    """A forked worker: run each script path it receives, send back its rows; None ends it.

    Its temporary files go under ``scratch`` (``tempfile.tempdir``), which the runner removes
    whatever happened: a worker killed mid-script (Ctrl-C) leaves nothing in /tmp.

    Ctrl-C and SIGTERM (``timeout`` signals the whole process group) are left to the runner,
    which kills the workers and everything they started: a worker that died first would
    orphan what it started.
    """
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    import tempfile

    tempfile.tempdir = scratch
    from _audit import runner

    runner.START = runner.fork_child  # torchrl is imported here: the auditor's child skips that import
    while (job := conn.recv()) is not None:
        conn.send(script_rows(Path(job[0]), job[1]))


def _kill_tree(procs) -> None:
    """Kill ``procs`` (multiprocessing workers) and every process they started."""
    import psutil

    victims = []
    for proc in procs:
        try:
            root = psutil.Process(proc.pid)
            victims += root.children(recursive=True) + [root]
        except psutil.Error:
            continue
    for victim in victims:
        try:
            victim.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(victims, timeout=5)


def run_parallel(paths: list[Path], jobs: int, report: sr.Report) -> None:
    """Run ``paths`` in ``jobs`` forked workers; record rows in the order of ``paths``.

    Workers are forked after this process imported torchrl, so each starts with it loaded,
    and each runs many scripts (a heavy import, transformers, is paid once per worker). A
    worker that dies mid-script (killed, out of memory, ``os._exit``) is that script's
    ``fail`` row and is replaced; the other scripts run on.
    """
    import multiprocessing
    from multiprocessing.connection import wait

    import shutil
    import tempfile

    ctx = multiprocessing.get_context("fork")
    todo, done, busy, printed = list(enumerate(paths)), {}, {}, 0  # busy: {conn: (index, process)}
    idle: list = []
    scratch = tempfile.mkdtemp(prefix="torchrl-checks-")

    def start():
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child, scratch), daemon=False)
        proc.start()
        child.close()
        return parent, proc

    try:
        idle = [start() for _ in range(jobs)]
        while printed < len(paths):
            while todo and idle:
                conn, proc = idle.pop()
                index, path = todo.pop(0)
                conn.send((str(path), report.versions))
                busy[conn] = (index, proc)
            for conn in wait([*busy, *(p.sentinel for _, p in busy.values())]):
                match = conn if conn in busy else next((c for c, (_, p) in busy.items() if p.sentinel == conn), None)
                if match is None or match not in busy:
                    continue
                index, proc = busy.pop(match)
                try:
                    done[index] = match.recv()
                    idle.append((match, proc))
                except (EOFError, OSError):  # the worker died inside this script
                    path = paths[index]
                    proc.join(timeout=5)
                    done[index] = [sr.CheckResult(f"{sr.script_area(path)}/{path.stem}:script-error", "fail", 0.0,
                                                  f"its worker process died (exit code {proc.exitcode}) while running it")]
                    idle.append(start())
            while printed in done:
                _record(done.pop(printed), report)
                printed += 1
        for conn, proc in idle:
            conn.send(None)
            proc.join(timeout=30)
    except BaseException:
        _kill_tree([p for _, p in idle] + [p for _, p in busy.values()])
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_checks(args, report: sr.Report) -> None:
    paths = [p for p in sr.discover_scripts()
             if p.resolve() != Path(__file__).resolve() and (not args.only or sr.script_area(p) in args.only)]
    jobs = min(args.jobs or os.cpu_count() or 1, len(paths))
    if jobs <= 1 or "fork" not in __import__("multiprocessing").get_all_start_methods():
        for path in paths:
            run_script(path, report)
    else:
        run_parallel(paths, jobs, report)


def main(argv=None) -> int:
    return sr.standard_main(__file__, build_parser, run_checks, argv)


if __name__ == "__main__":
    sr.main_guard(main)
