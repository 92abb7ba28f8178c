"""Explain any public TorchRL/TensorDict name from the installed library, or look up an error."""

import sys
from pathlib import Path

# The bundle's code is the package under src/ (its __init__.py gives the map); src/ holds only
# torchrl_skill, so putting it first on sys.path never shadows a user's module.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from torchrl_skill.explain.cli import main  # noqa: E402

if __name__ == "__main__":
    from torchrl_skill.report.skill_report import main_guard
    from torchrl_skill.explain import names

    names.HIDE = True  # a fresh interpreter: keep Ray/vLLM/SGLang out (explain/names.py)
    main_guard(main)
