"""Measure the bundle's time budgets (CONTRIBUTING.md, "Budgets") side by side in one run.

Times a bare `python -c "import torchrl"`, then every check script alone and the
all-checks runner, each as a fresh process, and prints each one's median wall time, its
ratio to the bare import, and the budget verdict:
  one script   <= bare import + 2 s
  all checks   <= 3 x bare import
It measures; it does not fail the test suite. Exit 0 always, unless a script errors.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import skill_report  # noqa: E402


def wall(cmd: list[str], repeat: int) -> float:
    """Median wall time in seconds of ``repeat`` fresh runs of ``cmd``."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        times.append(time.perf_counter() - start)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="example:\n  python benchmarks/check_budget.py --repeat 3")
    parser.add_argument("--repeat", type=int, default=3, help="runs per command; the median is reported (default 3)")
    parser.add_argument("--only", default=None, help="substring: time only scripts whose path contains it")
    args = parser.parse_args()

    bare = wall([sys.executable, "-c", "import torchrl"], args.repeat)
    print(f"{'bare import torchrl':58s} {bare:6.2f}s  1.00x")
    over = 0
    for script in skill_report.discover_scripts(ROOT):
        rel = script.relative_to(ROOT).as_posix()
        if args.only and args.only not in rel:
            continue
        seconds = wall([sys.executable, str(script)], args.repeat)
        runner = script.name == "run_all_checks.py"
        limit = 3 * bare if runner else bare + 2.0
        verdict = "ok" if seconds <= limit else "OVER"
        over += verdict == "OVER"
        budget = "3 x import" if runner else "import + 2 s"
        print(f"{rel:58s} {seconds:6.2f}s  {seconds / bare:4.2f}x  budget {budget} = {limit:5.2f}s  {verdict}")
    print(f"{over} over budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
