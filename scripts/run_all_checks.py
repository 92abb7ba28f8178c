"""Run every bundled check script in one process and print one table.

Discovers scripts/*.py and sub-skills/*/scripts/*.py, runs each one's checks with its
default arguments (the same checks `python <script>` runs), and keeps the exit-code
contract: 0 when no check failed, 1 when one did, 2 when the stack cannot run at all.
Rows are named `<area>/<script>:<check>`.
"""

from __future__ import annotations

import importlib
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


def run_script(path: Path, into: sr.Report) -> None:
    """Run one script's checks with default arguments; append its rows to ``into``."""
    area = sr.script_area(path)
    prefix = f"{area}/{path.stem}:"
    sub = sr.Report(str(path), json_mode=True, versions=into.versions)
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
    before = len(into.checks)
    into.extend(sub, prefix)
    if not into.json_mode:
        for row in into.checks[before:]:
            sr.print_row(row)


def run_checks(args, report: sr.Report) -> None:
    for path in sr.discover_scripts():
        if path.resolve() == Path(__file__).resolve():
            continue
        if args.only and sr.script_area(path) not in args.only:
            continue
        run_script(path, report)


def main(argv=None) -> int:
    return sr.standard_main(__file__, build_parser, run_checks, argv)


if __name__ == "__main__":
    sr.main_guard(main)
