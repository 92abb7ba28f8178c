"""The command line every check script shares: the parser, its common flags and the
argument types that turn a bad value into exit 2 with one line. Re-exported by skill_report
(``sr.make_parser``, ``sr.add_timeout_flag``, ...).
"""

from __future__ import annotations

import argparse
from typing import Callable

EXIT_CODES_HELP = (
    "exit codes:\n"
    "  0    no check failed (skip and missing optional backends are allowed)\n"
    "  1    at least one check failed\n"
    "  2    cannot run: bad arguments, a path that does not exist or cannot be read, a\n"
    "       target that cannot be imported, or torch/tensordict/torchrl missing or outside\n"
    "       the supported range (reason and fix on stderr, one line)\n"
    "  130  interrupted (Ctrl-C); whatever the script started is stopped\n"
    "  143  terminated (SIGTERM: timeout, a tool's time limit; 129 for SIGHUP); stopped as on Ctrl-C"
)


class _OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one stderr line and exits 2."""

    def error(self, message: str):  # type: ignore[override]
        from torchrl_skill.report.base import cannot_run

        cannot_run(message, f"run {self.prog} --help")


def make_parser(doc: str | None, example: str) -> argparse.ArgumentParser:
    """Build the contract CLI: ``--json``, the example and the exit codes in ``--help``.

    ``doc``: the script's module docstring (its first paragraph becomes the description).
    ``example``: one or more command lines shown under "example:".
    """
    description = (doc or "").strip().split("\n\n")[0]
    epilog = f"example:\n  {example.strip()}\n\n{EXIT_CODES_HELP}"
    parser = _OneLineParser(
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print one JSON report on stdout, nothing else")
    return parser


def add_device_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--device`` (default ``cpu``); checks run on CPU unless asked otherwise."""
    parser.add_argument("--device", default="cpu", help="torch device to run on (default: cpu)")


def add_timeout_flag(parser: argparse.ArgumentParser, default: float = 60.0) -> None:
    """Add ``--timeout SECONDS`` (default 60): the most one check may run (``Report.timeout``)."""
    parser.add_argument(
        "--timeout",
        type=number_above(0.0),
        default=default,
        metavar="SECONDS",
        help=f"wall-clock limit for each check that runs your code; a hang fails that check (default: {default:g})",
    )


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type=`` accepting integers >= ``minimum`` (bad values exit 2)."""

    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise ValueError(text)
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def number_above(minimum: float) -> Callable[[str], float]:
    """An argparse ``type=`` accepting finite numbers > ``minimum`` (bad values exit 2)."""

    def parse(text: str) -> float:
        value = float(text)
        if not value > minimum or value == float("inf"):
            raise ValueError(text)
        return value

    parse.__name__ = f"number > {minimum:g}"
    return parse
