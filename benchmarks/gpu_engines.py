"""The GPU half of the LLM stack, on a machine with a CUDA GPU: one JSON result.

NOT VERIFIED ON GPU: written and checked on a CPU-only machine (only its refusal ran).
With CUDA it installs, from the package registry, one venv per engine (vLLM pins torch
2.13, SGLang 0.5.23 pins torch 2.14.1) under --venvs, then runs three parts, each in its
own process with a share of --budget seconds (default 600), and writes --out:

- collector: torchrl's Collector stepping PendulumEnv with a policy on cuda (main python);
- vllm: vLLM's CUDA build (make_async_vllm_engine, Ray) serving a tiny Qwen2 built from a
  config, vLLMWrapper generating, then a weight update over NCCL (VLLMWeightSyncScheme),
  proven by the engine's log-probs moving to the new weights;
- sglang: an SGLang server on that model, SGLangWrapper generating, then a weight update
  (SGLangWeightSyncScheme, NCCL), proven the same way.

On one GPU, trainer and engine share the device; NCCL refuses two ranks on one device
("Duplicate GPU detected"), so on a one-GPU machine the weight-update parts are expected to
record that error (the part then fails, naming it). Exit: 0 every part passed; 1 a part
failed (the JSON says which and why); 2 no CUDA GPU (one line), bad arguments, or an
install that failed. Nothing is downloaded at run time beyond the pip installs: the model
is built from a config.

    python benchmarks/gpu_engines.py --out gpu_engines.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PARTS = HERE / "_gpu_parts.py"
# One venv per engine: each pins its own torch. torchrl/tensordict as verified.
VENVS = {
    "vllm": ["vllm==0.32.0", "tensordict==0.14.3", "torchrl==0.14.1", "ray==2.60.0", "transformers==5.19.0"],
    "sglang": ["sglang==0.5.23", "tensordict==0.14.3", "torchrl==0.14.1", "transformers"],
}
SHARE = {"collector": 0.1, "vllm": 0.45, "sglang": 0.45}  # of --budget, per part


def cuda_devices() -> int:
    """CUDA GPUs visible to the main python's torch (0 without a driver or a GPU)."""
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                           capture_output=True, text=True)
    try:
        return int(probe.stdout.strip() or 0)
    except ValueError:
        return 0


def ensure_venv(name: str, folder: Path, log: Path) -> tuple[Path, float]:
    """``folder/name`` with ``VENVS[name]`` installed (kept when it already imports); its python and install seconds."""
    venv = folder / name
    py = venv / "bin" / "python"
    start = time.monotonic()
    check = "import torchrl, " + ("vllm" if name == "vllm" else "sglang")
    if py.exists() and subprocess.run([str(py), "-c", check], capture_output=True).returncode == 0:
        return py, 0.0
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    with log.open("a") as out:
        subprocess.run([str(py), "-m", "pip", "install", "-q", *VENVS[name]], check=True, stdout=out, stderr=out)
    return py, time.monotonic() - start


def run_part(py: Path, part: str, limit: float, scratch: Path) -> dict:
    """Run one part of _gpu_parts.py in its own session; its JSON line, or why there is none."""
    result = scratch / f"{part}.json"
    start = time.monotonic()
    proc = subprocess.Popen([str(py), str(PARTS), part, str(result)], cwd=str(scratch), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=(scratch / f"{part}.log").open("w"))
    try:
        proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
    finally:
        try:
            os.killpg(proc.pid, 9)  # anything the part left (engine processes, a server)
        except ProcessLookupError:
            pass
    seconds = round(time.monotonic() - start, 1)
    if result.exists():
        return {**json.loads(result.read_text()), "seconds": seconds}
    tail = (scratch / f"{part}.log").read_text()[-800:]
    return {"ok": False, "error": f"no result (exit {proc.returncode}, limit {limit:.0f} s)", "log_tail": tail,
            "seconds": seconds}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("gpu_engines.json"), help="the JSON result (default: %(default)s)")
    parser.add_argument("--venvs", type=Path, default=Path("/work/venvs"), help="where the engine venvs go")
    parser.add_argument("--budget", type=float, default=600.0, help="seconds for all parts together (default: 600)")
    parser.add_argument("--parts", nargs="+", choices=list(SHARE), default=list(SHARE))
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    gpus = cuda_devices()
    if gpus == 0:
        print("gpu_engines.py: no CUDA GPU visible (torch.cuda.device_count() == 0); run it on a machine with one",
              file=sys.stderr)
        return 2
    args.venvs.mkdir(parents=True, exist_ok=True)
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / f"gpu_engines_{os.getpid()}"
    scratch.mkdir()
    report = {"gpus": gpus, "installs": {}, "parts": {}}
    try:
        pythons = {"collector": Path(sys.executable)}
        for name in ("vllm", "sglang"):
            if name in args.parts:
                try:
                    pythons[name], secs = ensure_venv(name, args.venvs, scratch / "install.log")
                    report["installs"][name] = {"seconds": round(secs, 1), "packages": VENVS[name]}
                except subprocess.CalledProcessError:
                    tail = (scratch / "install.log").read_text()[-400:].strip().splitlines()[-1:]
                    print(f"gpu_engines.py: pip install for {name} failed: {tail}", file=sys.stderr)
                    return 2
        for part in args.parts:
            report["parts"][part] = run_part(pythons[part], part, args.budget * SHARE[part], scratch)
    except KeyboardInterrupt:
        print("gpu_engines.py: interrupted", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report["ok"] = all(p.get("ok") for p in report["parts"].values())
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps({k: {"ok": v.get("ok"), "seconds": v.get("seconds")} for k, v in report["parts"].items()}))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
