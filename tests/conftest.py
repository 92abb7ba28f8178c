"""Shared fixtures: the bundle root, script discovery, and subprocess helpers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BUNDLE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BUNDLE / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TORCHRL_CONSOLE_STREAM", "stderr")

import skill_report  # noqa: E402

SCRIPTS = skill_report.discover_scripts(BUNDLE)


def script_id(path: Path) -> str:
    return path.relative_to(BUNDLE).as_posix()


def run_python(args: list[str], timeout: int = 300, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` from an unrelated working directory (scripts must not depend on cwd)."""
    full_env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})}
    full_env.pop("TORCHRL_CONSOLE_STREAM", None)  # the scripts must keep stdout clean by themselves
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout,
        cwd=str(cwd or BUNDLE.parent), env=full_env,
    )


@pytest.fixture(scope="session")
def bundle() -> Path:
    return BUNDLE
