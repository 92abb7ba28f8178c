"""Measure what the run-time auditor costs a training run (CONTRIBUTING.md, "Budgets": at most 1.15x).

Runs each workload of benchmarks/audit_workloads/ three ways, round-robin (every command
once per round, so a load that comes and goes slows them alike), each a fresh process:
plain (``python workload.py --frames N``), audited to the end (``audit_run.py workload.py
--max-frames HUGE``: the run is as long as the plain one) and audited with the early stop
(no --max-frames: the auditor stops once every detector has its verdict). Prints each
command's median wall time and CPU time (user + system of the whole process tree: the
measure a busy machine disturbs least) and their ratios to the plain run. It measures; no
test asserts it.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = Path(__file__).resolve().parent / "audit_workloads"
AUDIT = ROOT / "scripts" / "audit_run.py"
BUDGET = 1.15
EXAMPLE = "python benchmarks/audit_overhead.py --repeat 3 --only dqn"
EXIT_CODES = (
    "exit codes:\n"
    "  0    the audited run of every workload is within 1.15x the plain run's wall time\n"
    "  1    at least one is over it (named on its row)\n"
    "  2    cannot measure: a bad argument, or a run that exits other than 0, 1 or 5 (its last stderr line)\n"
    "  130  interrupted (Ctrl-C)"
)


def commands(workload: Path, frames: int) -> dict[str, list[str]]:
    target = [str(workload), "--frames", str(frames)]
    return {
        "plain": [sys.executable, *target],
        "audited": [sys.executable, str(AUDIT), str(workload), "--max-frames", str(10 * frames), "--seconds", "600", "--", *target[1:]],
        "audited, early stop": [sys.executable, str(AUDIT), str(workload), "--seconds", "600", "--", *target[1:]],
    }


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], cwd: str) -> tuple[float, float]:
    """``(wall seconds, CPU seconds)`` of one run of ``argv`` and every process it waited for."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    cpu, start = _children_cpu(), time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode not in (0, 1, 5):
        print(f"audit_overhead.py: error: {' '.join(argv)} exited {proc.returncode}: {(proc.stderr.strip().splitlines() or ['?'])[-1]}",
              file=sys.stderr)
        raise SystemExit(2)
    return took, _children_cpu() - cpu


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.strip(),
        epilog=f"example:\n  {EXAMPLE}\n\n{EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--repeat", type=int, default=3, help="rounds; each command's median over them is reported (default: 3)")
    parser.add_argument("--frames", type=int, default=4000, help="frames each workload collects (default: 4000)")
    parser.add_argument("--only", default="", metavar="TEXT", help="run only the workloads whose file name contains TEXT")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    over = 0
    with tempfile.TemporaryDirectory() as cwd:
        for workload in sorted(WORKLOADS.glob("*.py")):
            if args.only not in workload.name:
                continue
            cmds = commands(workload, args.frames)
            times: dict[str, list[tuple[float, float]]] = {label: [] for label in cmds}
            for _ in range(args.repeat):
                for label, cmd in cmds.items():
                    times[label].append(timed(cmd, cwd))
            wall = {label: statistics.median(t[0] for t in got) for label, got in times.items()}
            cpu = {label: statistics.median(t[1] for t in got) for label, got in times.items()}
            print(f"{workload.name} ({args.frames} frames, median of {args.repeat}):          wall            CPU")
            for label in cmds:
                ratio, cpu_ratio = wall[label] / wall["plain"], cpu[label] / cpu["plain"]
                flag = ""
                if label == "audited":
                    flag = "  within 1.15x" if ratio <= BUDGET else "  OVER 1.15x"
                    over += ratio > BUDGET
                print(f"  {label:<22} {wall[label]:7.2f} s {ratio:5.2f}x   {cpu[label]:7.2f} s {cpu_ratio:5.2f}x{flag}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
