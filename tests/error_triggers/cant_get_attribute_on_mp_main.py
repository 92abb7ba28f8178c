"""A script that defines its policy network class under `if __name__ == "__main__":` and
gives it to a multi-process collector: the spawned worker cannot unpickle it (its stderr,
then the parent's error). The script shuts its weight sync scheme down, so it exits."""

import subprocess
import sys
import tempfile
from pathlib import Path

SUBPROCESS = True
SCRIPT = Path(__file__).resolve().parents[1] / "fixtures" / "collectors" / "failed_start_exits.py"


def trigger():
    with tempfile.TemporaryDirectory() as folder:
        proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300, cwd=folder)
    return proc.stderr
