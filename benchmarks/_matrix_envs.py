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


LINES_PATH = Path(__file__).resolve().parent / "_matrix_lines.json"


@dataclass(frozen=True)
class Line:
    """One release line: the newest torchrl and tensordict of the line on the registry, and the
    torch release it is run with (one whose torch ABI its compiled extension loads
    with, measured by :mod:`benchmarks._extension_abi`; see src/torchrl_skill/data/stack_lines.json).
    ``torchrl_dist`` is ``torchrl-nightly`` where a nightly stands in for the line's release
    (``stand_in`` says which and why); it is installed with ``--no-deps``, since it asks
    for ``tensordict-nightly`` and the line's tensordict release is installed instead."""

    name: str
    torchrl: str
    tensordict: str
    torch: str
    first_released: str = ""
    torchrl_dist: str = "torchrl"
    stand_in: str = ""

    def pins(self) -> list[str]:
        return [f"torch=={self.torch}", f"tensordict=={self.tensordict}"] + \
            ([] if self.nightly else [f"torchrl=={self.torchrl}"])

    def install_commands(self) -> list[str]:
        """What a user runs to get this line's stack (a nightly: its own ``--no-deps`` step)."""
        first = f"pip install {' '.join(self.pins())}"
        return [first, f"pip install --no-deps {self.torchrl_dist}=={self.torchrl}"] if self.nightly else [first]

    @property
    def nightly(self) -> bool:
        return self.torchrl_dist != "torchrl"


def load_lines(path: Path = LINES_PATH) -> dict[str, Line]:
    """``{line name: Line}`` from ``benchmarks/_matrix_lines.json``, oldest first."""
    data = json.loads(path.read_text(encoding="utf-8"))["lines"]
    return {name: Line(name, **row) for name, row in data.items()}


# torch per line: torchrl 0.11.1 to 0.13.3 load with torch 2.10, 2.11 and 2.12, 0.14.x with
# 2.14 only (src/torchrl_skill/data/stack_lines.json). The older lines are spread over those three; 2.10
# (CUDA 12 libraries: a 3.5 GB heavier install over the CUDA 13 base) goes to 0.12, so that
# the oldest line, 0.11, installs quickly enough to run in CI. 0.15 runs on 2.14.1, which the
# nightly's extension loads with.
LINES = load_lines()


def line_of(version: str) -> str:
    """``"0.14.1"`` -> ``"0.14"``."""
    return ".".join(version.split(".")[:2])


def _see_outer_venv(python: Path) -> None:
    """Run from a venv (CI's fresh one), ``--system-site-packages`` exposes the base
    interpreter's packages, not the venv's (measured: a venv made by /work/venvs/fresh's python
    has pyvenv.cfg ``home`` = the base, and imported ray from the base). A ``.pth`` file in the
    line's venv appends the running venv's site-packages after the line's own, so the line's
    torch/tensordict/torchrl still come first."""
    import site

    out = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True,
                         text=True, check=True, timeout=120).stdout.strip()
    pth = Path(out) / "_outer_venv.pth"
    if sys.prefix == sys.base_prefix:  # run from the base: a reused venv forgets an earlier outer venv
        pth.unlink(missing_ok=True)
    else:
        pth.write_text("".join(f"{p}\n" for p in site.getsitepackages()))


def venv_python(cache: Path, line: str) -> Path:
    return cache / "venvs" / line / "bin" / "python"


def installed(python: Path | str) -> dict[str, str | None]:
    """``{"torch", "tensordict", "torchrl"}`` versions as ``python`` sees them, read by the
    bundle's own detection (src/torchrl_skill/stack/probe.py: whatever the distribution is called, a
    nightly as its line's pre-release), plus ``"raw"``: ``{dist: (distribution, version)}``."""
    src = Path(__file__).resolve().parent.parent / "src"
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from torchrl_skill.stack import probe as _stack\n"
            "out = {d: _stack.installed_version(d) for d in _stack.STACK}\n"
            "out['raw'] = {d: (f.dist, f.raw) for d in _stack.STACK for f in [_stack.detect(d)] if f}\n"
            "print(json.dumps(out))")
    out = subprocess.run([str(python), "-c", code, str(src)], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def build(line: Line, cache: Path = DEFAULT_CACHE, rebuild: bool = False, log=print) -> dict:
    """The line's venv, built unless it exists with the right versions; returns its record:
    ``{"line", "python", "versions", "install_seconds", "pip_installed", "built"}``.

    ``install_seconds`` is pip's wall time for ``pip install torch==T tensordict==D
    torchrl==R`` (a nightly: then ``pip install --no-deps torchrl-nightly==R``) into the fresh venv (downloads included, pip's own HTTP cache as found);
    a reused venv keeps the record written when it was built. Raises RuntimeError with
    pip's last lines when the install fails.
    """
    root = cache / "venvs" / line.name
    record_path = cache / f"install-{line.name}.json"
    python = venv_python(cache, line.name)
    want = {"torch": line.torch, "tensordict": line.tensordict, "torchrl": line.torchrl}
    if python.exists():
        _see_outer_venv(python)  # before reading its versions: they may come through the outer venv
    if not rebuild and python.exists() and record_path.exists():
        have = installed(python)
        raw = {d: (have.get("raw", {}).get(d) or [None, have[d]])[1] for d in want}
        if all((raw[d] or "").split("+")[0] == v for d, v in want.items()):
            return {**json.loads(record_path.read_text()), "built": False}
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(root)], check=True, timeout=300)
    _see_outer_venv(python)
    log(f"[{line.name}] pip install {' '.join(line.pins())} into {root}")
    start = time.perf_counter()
    proc = subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
                           "--progress-bar", "off", *line.pins()], capture_output=True, text=True, timeout=3600)
    if proc.returncode == 0 and line.nightly:  # its own requirements name tensordict-nightly: the line's release stands in
        log(f"[{line.name}] pip install --no-deps {line.torchrl_dist}=={line.torchrl}")
        more = subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
                               "--progress-bar", "off", "--no-deps", f"{line.torchrl_dist}=={line.torchrl}"],
                              capture_output=True, text=True, timeout=3600)
        proc = subprocess.CompletedProcess(proc.args, more.returncode, proc.stdout + more.stdout, proc.stderr + more.stderr)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"pip install for line {line.name} failed: {proc.stderr.strip()[-800:]}")
    added = [d for ln in proc.stdout.splitlines() if ln.startswith("Successfully installed")
             for d in ln.split("Successfully installed", 1)[1].split()]
    record = {"line": line.name, "python": str(python), "versions": installed(python),
              "install_seconds": round(seconds, 1), "pip_installed": added,
              "measured": time.strftime("%Y-%m-%d")}
    record_path.write_text(json.dumps(record, indent=1) + "\n")
    return {**record, "built": True}


if __name__ == "__main__":  # build the environments alone: python benchmarks/_matrix_envs.py 0.11 0.13
    for name in sys.argv[1:] or list(LINES):
        rec = build(LINES[name])
        print(json.dumps({k: v for k, v in rec.items() if k != "pip_installed"}), f"{len(rec['pip_installed'])} dists")
