"""Measure the bundle's time budgets (CONTRIBUTING.md, "Budgets") side by side in one run.

Times a bare `python -c "import torchrl"`, every check script alone (its default run: no
arguments) and the all-checks runner, each as a fresh process from an empty folder,
round-robin (every command once per round), so a load that comes and goes slows them
alike. Prints each command's median wall time, its ratio to the bare import, and its
budget: one script <= import + 2 s; scripts/explain.py on one name <= import + 1 s; all
checks in one run (scripts/run_all_checks.py) <= 2.5 x import. A script whose default run
cannot be lighter than a heavier command (its floor: the LLM scripts import transformers'
Qwen2 modules, audit_run.py runs its example) gets that floor + 2 s, the floor timed in the
same rounds and printed with it. It measures; no test asserts it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))  # the bundle's package
from torchrl_skill.report import skill_report  # noqa: E402

EXAMPLE = "python benchmarks/check_budget.py --repeat 3 --only objectives-and-training"
EXIT_CODES = (
    "exit codes:\n"
    "  0    every command measured is within its budget\n"
    "  1    at least one command is over its budget (each is named on its row)\n"
    "  2    cannot measure: a bad argument, or a command that exits other than 0 or 1\n"
    "       (its last stderr line is shown)\n"
    "  130  interrupted (Ctrl-C); the command being timed is stopped"
)
SCRIPT_EXTRA_S = 2.0
# Scripts whose default run is lighter than a check suite get a tighter budget.
EXTRA_S = {"scripts/explain.py": 1.0}  # explain.py with no argument explains one name
RUNNER = "scripts/run_all_checks.py"
RUNNER_RATIO = 2.5
# Floors: the least a script's default run must do, timed as a command of its own.
QWEN2 = ("import torchrl + the tiny Qwen2's modules",
         ["-c", "import torchrl, tokenizers, transformers.models.qwen2.modeling_qwen2"])
AUDITED_EXAMPLE = ("plain run of audit_run.py's example",
                   [str(ROOT / "sub-skills" / "development-and-testing" / "assets" / "modern_example.py")])
FLOORS = {
    "scripts/audit_run.py": AUDITED_EXAMPLE,  # its child imports torchrl and trains the example
    "sub-skills/llm-vla-and-services/scripts/check_llm_wiring.py": QWEN2,
    "sub-skills/llm-vla-and-services/scripts/smoke_llm_grpo.py": QWEN2,
}


@dataclass
class Command:
    label: str
    argv: list[str]
    times: list[float]

    def budget(self, bare: float, floors: dict[str, float]) -> tuple[float, str]:
        """``(seconds, how it is set)`` for a bare import taking ``bare`` seconds and the
        ``FLOORS`` commands' medians in ``floors`` (by label)."""
        if self.label == RUNNER:
            return RUNNER_RATIO * bare, f"{RUNNER_RATIO:g} x import"
        extra = EXTRA_S.get(self.label, SCRIPT_EXTRA_S)
        if self.label in FLOORS:
            return floors[FLOORS[self.label][0]] + extra, f"floor + {extra:g} s"
        return bare + extra, f"import + {extra:g} s"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.strip(),
        epilog=f"example:\n  {EXAMPLE}\n\n{EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--repeat", type=skill_report.int_at_least(1), default=3,
                        help="rounds; each command's median over them is reported (default: 3)")
    parser.add_argument("--only", default=None, metavar="TEXT",
                        help="time only the scripts whose bundle path contains TEXT (the bare import always runs)")
    return parser


def wall(argv: list[str]) -> float:
    """Seconds one fresh run of ``argv`` takes, from an empty folder; exits 2 if it errors."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    with tempfile.TemporaryDirectory(prefix="torchrl-skill-budget-") as cwd:
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
        seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        last = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        print(f"check_budget.py: error: {' '.join(argv[1:])} exited {proc.returncode}: {last[:300]}", file=sys.stderr)
        raise SystemExit(2)
    return seconds


def commands(only: str | None) -> list[Command]:
    found = []
    for script in skill_report.discover_scripts(ROOT):
        rel = script.relative_to(ROOT).as_posix()
        if only is None or only in rel:
            found.append(Command(rel, [sys.executable, str(script)], []))
    return found


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    bare = Command("bare import torchrl", [sys.executable, "-c", "import torchrl"], [])
    timed = commands(args.only)
    needed = {FLOORS[c.label][0]: FLOORS[c.label][1] for c in timed if c.label in FLOORS}
    floors = [Command(label, [sys.executable, *argv], []) for label, argv in needed.items()]
    for _ in range(args.repeat):
        for command in [bare, *floors, *timed]:
            command.times.append(wall(command.argv))
    base = statistics.median(bare.times)
    print(f"{bare.label:62s} {base:6.2f}s  1.00x")
    floor_s = {c.label: statistics.median(c.times) for c in floors}
    for label, seconds in floor_s.items():
        print(f"{'floor: ' + label:62s} {seconds:6.2f}s  {seconds / base:4.2f}x")
    over = 0
    for command in timed:
        seconds = statistics.median(command.times)
        limit, how = command.budget(base, floor_s)
        verdict = "ok" if seconds <= limit else "OVER"
        over += verdict == "OVER"
        print(f"{command.label:62s} {seconds:6.2f}s  {seconds / base:4.2f}x  budget {how} = {limit:5.2f}s  {verdict}")
    print(f"{over} of {len(timed)} over budget; medians of {args.repeat} round(s), bare import {base:.2f}s")
    return 1 if over else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("check_budget.py: interrupted", file=sys.stderr)
        sys.exit(130)
