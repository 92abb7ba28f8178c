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
import importlib.util
import os
import signal
import time
from pathlib import Path

from torchrl_skill.report import skill_report as sr  # noqa: E402

ENTRY = sr.BUNDLE_ROOT / "scripts" / "run_all_checks.py"  # this runner's own entry point, not one of the checks

AREAS = list(sr.AREAS)
# Dispatch to workers (rows still print in discovery order). The longest scripts start first,
# so that no worker is left alone with one at the end: measured with --jobs 1 on 2 idle cores
# (2026-12-02), these took 0.5-2.5 s each and every other script 0.2 s or less.
LONGEST_FIRST = ("check_llm_wiring", "audit_run", "check_torchrl_env", "smoke_services", "scan_api_drift",
                 "smoke_collector")
# Scripts that share a heavy import run on the worker that has it, which pays it once:
# transformers with the tiny Qwen2 model takes about 1.5 s.
SHARED_IMPORT = {"check_llm_wiring": "transformers", "smoke_llm_grpo": "transformers"}
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
    """Import the package module a check script (an entry point) runs: its module-level env
    factories are then picklable by reference for spawned worker processes. A file that is no
    entry point (a check script written elsewhere, the tests' planted ones) is loaded from
    its path under its stem."""
    try:
        return importlib.import_module(sr.entry_module(path))
    except ValueError:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


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
    return [sr.CheckResult(f"{prefix}{c.name}", c.status, c.seconds, c.detail, c.proves, c.evidence) for c in sub.checks]


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
    orphan what it started. See :func:`_outlive_signals` for what the checks' own processes get.
    """
    _outlive_signals()
    import tempfile

    tempfile.tempdir = scratch
    from torchrl_skill.audit import runner

    runner.START = runner.fork_child  # torchrl is imported here: the auditor's child skips that import
    while (job := conn.recv()) is not None:
        conn.send(script_rows(Path(job[0]), job[1]))


def _swallow(signum, frame) -> None:
    """A worker's handler for SIGTERM and SIGHUP: the runner decides (see :func:`_outlive_signals`)."""


def _outlive_signals() -> None:
    """Make this worker outlive SIGINT, SIGTERM and SIGHUP, but not what its checks start.

    SIGTERM and SIGHUP get a handler that does nothing, not SIG_IGN: an ignored signal stays
    ignored in every process a check execs or forks, and a check's process that ignores
    SIGTERM no longer stops when its library asks it to (torchrl's PythonExecutorService
    sends SIGTERM, then waits 1 s before SIGKILL: 2 s more on smoke_services.py). A handled
    signal is reset to the default by exec, and a fork's child gets the default back here.
    One the runner found ignored (SIGHUP under nohup) stays ignored, as it does for a script
    run alone. SIGINT stays ignored in what the checks start: a terminal's Ctrl-C reaches the
    whole process group, and the runner stops everything itself, with one line and no
    traceback from a check's own processes.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    handled = [sig for sig in (signal.SIGTERM, signal.SIGHUP) if signal.getsignal(sig) is not signal.SIG_IGN]
    for sig in handled:
        signal.signal(sig, _swallow)
    os.register_at_fork(after_in_child=lambda: [signal.signal(sig, signal.SIG_DFL) for sig in handled])


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


def dispatch_order(paths: list[Path]) -> list[tuple[int, Path]]:
    """``(discovery index, path)`` pairs, the scripts named in ``LONGEST_FIRST`` first in that
    order, then the others in discovery order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    return sorted(enumerate(paths), key=lambda item: (rank.get(item[1].stem, len(rank)), item[0]))


def next_job(todo: list[tuple[int, Path]], has: set[str], elsewhere: set[str]) -> int | None:
    """Position in ``todo`` of the script for an idle worker, or None for "wait".

    ``has``: the ``SHARED_IMPORT`` groups this worker has imported (or is importing);
    ``elsewhere``: those of the other live workers. A script of a group this worker has comes
    first; a script of a group another worker has is left for that worker.
    """
    for pos, (_, path) in enumerate(todo):
        if path.stem in SHARED_IMPORT and SHARED_IMPORT[path.stem] in has:
            return pos
    for pos, (_, path) in enumerate(todo):
        group = SHARED_IMPORT.get(path.stem)
        if group is None or group not in elsewhere:
            return pos
    return None


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
    todo, done, busy, printed = dispatch_order(paths), {}, {}, 0  # busy: {conn: (index, process)}
    idle: list = []
    groups: dict = {}  # {process: the SHARED_IMPORT groups it has run}
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
            # a worker holding a group asks first: it takes that group's scripts before another would
            for conn, proc in sorted(idle, key=lambda pair: -len(groups.get(pair[1], ()))):
                has = groups.setdefault(proc, set())
                pos = next_job(todo, has, set().union(*(g for p, g in groups.items() if p is not proc)))
                if pos is None and not busy:  # nobody else to leave it to
                    pos = 0 if todo else None
                if pos is None:
                    continue
                index, path = todo.pop(pos)
                if path.stem in SHARED_IMPORT:
                    has.add(SHARED_IMPORT[path.stem])
                idle.remove((conn, proc))
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
                    groups.pop(proc, None)
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
             if p.resolve() != ENTRY and (not args.only or sr.script_area(p) in args.only)]
    jobs = min(args.jobs or os.cpu_count() or 1, len(paths))
    if jobs <= 1 or "fork" not in __import__("multiprocessing").get_all_start_methods():
        for path in paths:
            run_script(path, report)
    else:
        run_parallel(paths, jobs, report)


def main(argv=None) -> int:
    return sr.standard_main(__file__, build_parser, run_checks, argv)
