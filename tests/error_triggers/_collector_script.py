"""Run a multi-process collector in a fresh script (spawned workers must import their env
factory by module), returning its stderr: the workers' tracebacks and the parent's error."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

TEMPLATE = '''
import sys, torch
sys.path.insert(0, {triggers!r})
from _tiny import TinyEnv
from torchrl.collectors import MultiSyncCollector
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.envs import SerialEnv

{body}

if __name__ == "__main__":
    collector = MultiSyncCollector([make_env], None, frames_per_batch=20, total_frames=20,
                                   replay_buffer={buffer}, auto_register_policy_transforms=False)
    try:
        for _ in collector:
            pass
    finally:
        collector.shutdown()
'''


def run(body: str, buffer: str = "None", timeout: int = 300) -> str:
    """``body`` defines ``make_env``; ``buffer`` is the replay_buffer expression."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "collect.py"
        path.write_text(TEMPLATE.format(triggers=str(Path(__file__).resolve().parent), body=body, buffer=buffer))
        proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=timeout, cwd=folder)
    return proc.stderr
