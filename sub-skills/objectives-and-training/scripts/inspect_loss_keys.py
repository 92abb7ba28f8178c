"""Print the effective in_keys, out_keys and tensor_keys defaults of torchrl loss classes."""

import sys
from pathlib import Path

# The bundle's code is the package under src/ (its __init__.py gives the map); src/ holds only
# torchrl_skill, so putting it first on sys.path never shadows a user's module.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))
from torchrl_skill.checks.objectives.inspect_loss_keys import main  # noqa: E402

if __name__ == "__main__":
    from torchrl_skill.report.skill_report import main_guard

    main_guard(main)
