"""Shared by the envs-and-transforms triggers: the correct 6-feature env of the env fixtures."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "envs"))

from _envs_fixture_base import SixFeatureEnv  # noqa: E402,F401
