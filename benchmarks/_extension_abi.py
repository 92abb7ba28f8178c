"""Which torch releases each torchrl release's compiled extension loads with, measured.

torchrl ships one C++ extension, ``torchrl/_torchrl*.so`` (the segment trees behind
prioritized replay). It links against libtorch, whose C++ ABI changes between torch minor
releases, and torchrl's metadata declares only ``torch>=2.1.0``: pip will install any
torch. This module loads each torchrl wheel's extension in a fresh interpreter per
(torchrl, torch) pair: ``import torch``, load the ``.so`` with
``importlib.machinery.ExtensionFileLoader`` (as ``import torchrl._torchrl`` does), then
fill a ``SumSegmentTreeFp32(8)`` through its ``torch.Tensor`` overload of ``update`` and
read back ``query(0, 8)``. A pair "loads" when the sum is right; otherwise the first line
of the error (``undefined symbol: ...`` from the dynamic linker) is recorded.

The torch releases come from the matrix environments (benchmarks/_matrix_envs.py) and
from torch wheels installed alone with ``pip install --no-deps --target`` and layered in
front of one of them (their own CUDA libraries are needed to ``import torch``).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

PROBE = r"""
import importlib.machinery, importlib.util, json, sys
import torch
out = {"torch": torch.__version__}
try:
    loader = importlib.machinery.ExtensionFileLoader("torchrl._torchrl", sys.argv[1])
    spec = importlib.util.spec_from_file_location("torchrl._torchrl", sys.argv[1], loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    tree = mod.SumSegmentTreeFp32(8)
    tree.update(torch.arange(8), torch.arange(8, dtype=torch.float32))
    total = float(tree.query(0, 8))
    out["loads"] = total == 28.0
    out["error"] = None if out["loads"] else f"SumSegmentTreeFp32 query(0, 8) gave {total}, expected 28.0"
except Exception as err:
    out["loads"] = False
    out["error"] = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
print("ABI " + json.dumps(out))
"""


@dataclass(frozen=True)
class TorchEnv:
    """An interpreter that imports one torch release: ``python`` plus ``pythonpath``
    (a ``--target`` folder holding a torch wheel alone, layered in front), may be empty."""

    torch: str
    python: str
    pythonpath: tuple[str, ...] = field(default=())


def extract_extension(wheel: Path, into: Path) -> Path:
    """``torchrl/_torchrl*.so`` of a torchrl wheel, extracted once under ``into/<wheel stem>/``."""
    dest = into / wheel.stem
    found = glob.glob(str(dest / "torchrl" / "_torchrl*.so"))
    if found:
        return Path(found[0])
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.startswith("torchrl/_torchrl") and n.endswith(".so")]
        if not names:
            raise RuntimeError(f"{wheel.name} holds no torchrl/_torchrl*.so")
        zf.extract(names[0], dest)
    return dest / names[0]


def torch_only(wheel: Path, into: Path, extras: tuple[Path, ...] = ()) -> Path:
    """A torch wheel installed alone (``--no-deps --target``) under ``into/<wheel stem>``.
    ``PIP_CONSTRAINT=/dev/null``: a pip configuration's constraints file capping torch (for
    the venvs' installs) must not refuse the one release being measured, alone, here.
    ``extras``: wheels layered with it where the base's differ from what this torch pins
    (torch 2.15.0 needs nvidia-nvshmem-cu13 3.7.2 over the verified stack's 3.4.5: without it
    any extension load fails on an nvshmem symbol, a fault of the layering, not of torchrl)."""
    dest = into / wheel.stem
    for one in (wheel, *extras):
        done = dest / (one.name.split("-")[0] + "-" + one.name.split("-")[1] + ".dist-info")
        if one is wheel and (dest / "torch" / "__init__.py").exists() or one is not wheel and done.exists():
            continue
        subprocess.run([os.environ.get("PYTHON", "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                        "--target", str(dest), str(one)], check=True, timeout=1800,
                       env={**os.environ, "PIP_CONSTRAINT": os.devnull})
    return dest


def probe(env: TorchEnv, extension: Path) -> dict:
    """``{"torch", "loads", "error"}`` for one pair, from a fresh interpreter."""
    run_env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    if env.pythonpath:
        run_env["PYTHONPATH"] = os.pathsep.join(env.pythonpath)
    else:
        run_env.pop("PYTHONPATH", None)
    proc = subprocess.run([env.python, "-c", PROBE, str(extension)], capture_output=True, text=True,
                          timeout=600, env=run_env, cwd="/")
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("ABI ")), None)
    if line is None:  # the interpreter itself died (a crash while loading is a failure too)
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"torch": env.torch, "loads": False, "error": f"exit {proc.returncode}: {tail[:200]}"}
    return json.loads(line[4:])


def short_error(error: str | None) -> str | None:
    """The recorded error without the long mangled tail: ``undefined symbol: _ZN5torch8autograd...``."""
    if error and "undefined symbol: " in error:
        sym = error.split("undefined symbol: ", 1)[1].split()[0]
        return f"undefined symbol: {sym[:40]}..."
    return error[:200] if error else error


def measure(torchrl_wheels: list[Path], envs: list[TorchEnv], work: Path, log=print, labels: dict | None = None) -> dict:
    """``{torchrl version: {"loads": [torch...], "fails": {torch: error}}}`` for every pair.
    ``labels`` names a wheel by another version (a nightly's ``2026.10.27`` as
    ``0.15.0.dev20261027``, the form src/torchrl_skill/stack/probe.py reads it in); default: its file name's."""
    out: dict[str, dict] = {}
    for wheel in sorted(torchrl_wheels):
        version = (labels or {}).get(wheel) or wheel.name.split("-")[1]
        ext = extract_extension(wheel, work)
        row = out.setdefault(version, {"loads": [], "fails": {}})
        for env in envs:
            res = probe(env, ext)
            torch_v = res["torch"].split("+")[0] + ("+cpu" if res["torch"].endswith("+cpu") else "")
            if res["loads"]:
                row["loads"].append(torch_v)
            else:
                row["fails"][torch_v] = short_error(res["error"])
            log(f"  torchrl {version} + torch {torch_v}: {'loads' if res['loads'] else short_error(res['error'])}")
    return out
