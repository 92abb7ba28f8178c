"""Check TorchRL's Ray scale-out on a local one-CPU Ray: RayReplayBuffer, Ray collector, clean exit."""

import sys
from pathlib import Path

# The bundle's code is the package under src/ (its __init__.py gives the map); src/ holds only
# torchrl_skill, so putting it first on sys.path never shadows a user's module.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))
from torchrl_skill.checks.collectors.check_ray_scaling import main  # noqa: E402

if __name__ == "__main__":
    from torchrl_skill.report.skill_report import main_guard

    main_guard(main)
