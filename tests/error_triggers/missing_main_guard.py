"""A script that starts a spawn process at import time, run as __main__: returns the
child's stderr (the worker's traceback), since the error is raised in the worker."""

import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = """
import multiprocessing as mp
mp.set_start_method("spawn", force=True)
p = mp.Process(target=print)
p.start()
p.join()
"""


def trigger():
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "unguarded.py"
        path.write_text(SCRIPT)
        proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300, cwd=folder)
    return proc.stderr
