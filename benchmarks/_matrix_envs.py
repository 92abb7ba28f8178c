"""The environments of the version matrix: one virtual environment per torchrl release line.

Each line's environment is a venv made with ``--system-site-packages`` over the interpreter
that runs the matrix (the verified stack of ``requirements.txt``), into which pip installs
that line's torch, tensordict and torchrl. pip installs into the venv only what the base
does not already satisfy: the line's torch with its own CUDA libraries and triton, the
tensordict and torchrl releases; numpy, gymnasium, ray, transformers and the test tools
come from the base. The 0.14 line therefore installs nothing: it is the base itself.

Cached under ``~/.cache/torchrl-skill-matrix`` (``--cache``): ``venvs/<line>/`` and
``install-<line>.json`` (what was installed and how long pip took, measured when the venv
was built; a rebuild measures again).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CACHE = Path(os.environ.get("TORCHRL_SKILL_MATRIX_CACHE", Path.home() / ".cache" / "torchrl-skill-matrix"))


@dataclass(frozen=True)
class Line:
    """One release line: the newest torchrl and tensordict of the line on PyPI, and the
    torch release it is run with (one whose torch ABI its compiled extension loads
    with, measured by :mod:`benchmarks._extension_abi`; see scripts/stack_lines.json)."""

    name: str
    torchrl: str
    tensordict: str
    torch: str

    def pins(self) -> list[str]:
        return [f"torch=={self.torch}", f"tensordict=={self.tensordict}", f"torchrl=={self.torchrl}"]


# torch per line: torchrl 0.11.1 to 0.13.3 load with torch 2.10, 2.11 and 2.12, 0.14.x with
# 2.14 only (scripts/stack_lines.json). The older lines are spread over those three; 2.10
# (CUDA 12 libraries: a 3.5 GB heavier install over the CUDA 13 base) goes to 0.12, so that
# the oldest line, 0.11, installs quickly enough to run in CI.
LINES = {
    "0.11": Line("0.11", "0.11.1", "0.11.0", "2.11.0"),
    "0.12": Line("0.12", "0.12.0", "0.12.4", "2.10.0"),
    "0.13": Line("0.13", "0.13.3", "0.13.0", "2.12.1"),
    "0.14": Line("0.14", "0.14.1", "0.14.3", "2.14.1"),
}


def venv_python(cache: Path, line: str) -> Path:
    return cache / "venvs" / line / "bin" / "python"


def installed(python: Path | str) -> dict[str, str | None]:
    """``{"torch", "tensordict", "torchrl"}`` versions as ``python`` sees them (metadata only)."""
    code = ("import importlib.metadata as m, json\n"
            "def v(d):\n    try:\n        return m.version(d)\n    except m.PackageNotFoundError:\n        return None\n"
            "print(json.dumps({d: v(d) for d in ('torch', 'tensordict', 'torchrl')}))")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def build(line: Line, cache: Path = DEFAULT_CACHE, rebuild: bool = False, log=print) -> dict:
    """The line's venv, built unless it exists with the right versions; returns its record:
    ``{"line", "python", "versions", "install_seconds", "pip_installed", "built"}``.

    ``install_seconds`` is pip's wall time for ``pip install torch==T tensordict==D
    torchrl==R`` into the fresh venv (downloads included, pip's own HTTP cache as found);
    a reused venv keeps the record written when it was built. Raises RuntimeError with
    pip's last lines when the install fails.
    """
    root = cache / "venvs" / line.name
    record_path = cache / f"install-{line.name}.json"
    python = venv_python(cache, line.name)
    want = {"torch": line.torch, "tensordict": line.tensordict, "torchrl": line.torchrl}
    if not rebuild and python.exists() and record_path.exists():
        have = installed(python)
        if all((have[d] or "").split("+")[0] == v for d, v in want.items()):
            return {**json.loads(record_path.read_text()), "built": False}
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(root)], check=True, timeout=300)
    log(f"[{line.name}] pip install {' '.join(line.pins())} into {root}")
    start = time.perf_counter()
    proc = subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
                           "--progress-bar", "off", *line.pins()], capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"pip install for line {line.name} failed: {proc.stderr.strip()[-800:]}")
    added = [ln.split("Successfully installed", 1)[1].split() for ln in proc.stdout.splitlines()
             if ln.startswith("Successfully installed")]
    record = {"line": line.name, "python": str(python), "versions": installed(python),
              "install_seconds": round(seconds, 1), "pip_installed": added[0] if added else [],
              "measured": time.strftime("%Y-%m-%d")}
    record_path.write_text(json.dumps(record, indent=1) + "\n")
    return {**record, "built": True}


if __name__ == "__main__":  # build the environments alone: python benchmarks/_matrix_envs.py 0.11 0.13
    for name in sys.argv[1:] or list(LINES):
        rec = build(LINES[name])
        print(json.dumps({k: v for k, v in rec.items() if k != "pip_installed"}), f"{len(rec['pip_installed'])} dists")
