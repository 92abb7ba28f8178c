"""Smoke-test TorchRL collectors on PendulumEnv: Collector into a replay buffer, weight sync."""

import sys
from pathlib import Path

if __name__ == "__mp_main__":
    # A spawned collector worker imports this file before anything else. Ctrl-C in a
    # terminal reaches the whole process group: the main process stops its workers, so a
    # worker ignores SIGINT instead of dying mid-import with a traceback of its own.
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)

# The bundle's code is the package under src/ (its __init__.py gives the map); src/ holds only
# torchrl_skill, so putting it first on sys.path never shadows a user's module.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))
from torchrl_skill.checks.collectors.smoke_collector import main  # noqa: E402

if __name__ == "__main__":
    from torchrl_skill.report.skill_report import main_guard

    main_guard(main)
