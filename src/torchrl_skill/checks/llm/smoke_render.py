"""Smoke of TorchRL rendering: save_render_checkpoint, then rlrender to jsonl, npz and frames.

Writes, in a temporary folder, a factory module (native ``PendulumEnv`` with a small
``AngleToPixels`` transform adding a uint8 ``"pixels"`` [32, 32, 3] key, and a
``TensorDictModule`` policy reading ``th``/``thdot``), saves the policy with
``torchrl.render.save_render_checkpoint(..., format="archive")``, runs rlrender's
``torchrl.render.cli.main`` in-process to ``.jsonl``, ``.npz`` and PNG frames and checks
the files (steps, keys, return, frame count and size). --subprocess renders the jsonl with
the installed ``rlrender`` executable instead (a fresh interpreter: the console script end to
end, about 6 s); the other formats stay in-process, since they share that entry point and
differ only in the writer cli.main calls. --mp4 tries mp4: torchrl
0.14.1 encodes mp4 only through torchcodec (>= 0.10.0, with FFmpeg libraries; PyAV is
not used), so without torchcodec it reports missing, never pass.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from torchrl_skill.report import skill_report as sr  # noqa: E402

EXAMPLE = "python $SKILL_DIR/sub-skills/llm-vla-and-services/scripts/smoke_render.py --subprocess --mp4 --json"
STEPS = 5

FACTORY = '''
import torch
from tensordict.nn import TensorDictModule
from torchrl.data import Unbounded
from torchrl.envs import PendulumEnv, TransformedEnv
from torchrl.envs.transforms import Transform


class AngleToPixels(Transform):
    # PendulumEnv is state-only; rlrender's pixels backend needs a "pixels" key to film
    def __init__(self):
        super().__init__(in_keys=["th"], out_keys=["pixels"])

    def _apply_transform(self, th):
        img = torch.full((*th.shape, 32, 32, 3), 40, dtype=torch.uint8)
        col = ((th.sin() * 0.5 + 0.5) * 31).long().clamp(0, 31)
        img.scatter_(-2, col.reshape(*th.shape, 1, 1, 1).expand(*th.shape, 32, 1, 3), 255)
        return img

    def _reset(self, tensordict, tensordict_reset):
        return self._call(tensordict_reset)

    def transform_observation_spec(self, observation_spec):
        observation_spec["pixels"] = Unbounded(shape=(32, 32, 3), dtype=torch.uint8, device=observation_spec.device)
        return observation_spec


class TwoIn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    def forward(self, th, thdot):
        x = torch.stack([th.reshape(-1), thdot.reshape(-1)], -1)
        return self.net(x).reshape(th.shape + (1,))


def make_env(**kwargs):
    return TransformedEnv(PendulumEnv(), AngleToPixels())


def make_policy(**kwargs):
    return TensorDictModule(TwoIn(), in_keys=["th", "thdot"], out_keys=["action"])
'''


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("--subprocess", action="store_true", help="render the jsonl with the installed rlrender executable in a child process (about 6 s more)")
    parser.add_argument("--mp4", action="store_true", help="also try an mp4 (torchrl 0.14.1 needs torchcodec>=0.10.0; reports missing without it)")
    return parser


def run_rlrender(tmp: Path, ckpt: Path, fmt: str, use_subprocess: bool) -> tuple[int, str]:
    """Render ``ckpt`` with rlrender (``render_factory.py`` in ``tmp``) to ``tmp/out.<fmt>``.

    In process through ``torchrl.render.cli.main``, or the installed executable with
    ``use_subprocess``. Returns (exit code, last "rlrender" line of stderr, or '').
    """
    argv = [
        "--ckpt", str(ckpt), "--env", "render_factory:make_env", "--policy", "render_factory:make_policy",
        "--format", fmt, "--out", str(tmp / f"out.{fmt}"), "--max-steps", str(STEPS), "--num-trajs", "1", "--seed", "0",
    ]
    if use_subprocess:
        exe = shutil.which("rlrender") or str(Path(sys.executable).with_name("rlrender"))
        if not Path(exe).exists():
            raise sr.CheckFailed("rlrender executable not found next to this interpreter; reinstall torchrl")
        proc = subprocess.run([exe, *argv], cwd=tmp, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PYTHONPATH": str(tmp)})
        return proc.returncode, (proc.stderr.strip().splitlines() or [""])[-1]
    from torchrl.render.cli import main as rlrender_main

    sys.path.insert(0, str(tmp))
    err = io.StringIO()
    try:  # rlrender prints the output path on stdout: keep the report's stdout clean
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = rlrender_main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        sys.path.remove(str(tmp))
        sys.modules.pop("render_factory", None)
    lines = [ln for ln in err.getvalue().splitlines() if "rlrender" in ln]
    return int(code or 0), (lines[-1] if lines else "")


def check_checkpoint(workdir) -> sr.Passed:
    import torch
    from torchrl.render import load_checkpoint, save_render_checkpoint

    sys.path.insert(0, str(workdir))
    try:
        import render_factory

        torch.manual_seed(0)
        path = save_render_checkpoint(workdir / "policy.pt", render_factory.make_policy(),
                                      env_metadata={"env_name": "pendulum"}, format="archive")
    finally:
        sys.path.remove(str(workdir))
        sys.modules.pop("render_factory", None)
    payload = load_checkpoint(path)
    sr.expect(payload.get("env_name") == "pendulum", f"checkpoint env_name {payload.get('env_name')!r}")
    sr.evidence(1, "checkpoints saved and read back")
    return sr.Passed(f"save_render_checkpoint(format='archive') -> {Path(path).name}; load_checkpoint env_name 'pendulum'",
                     Path(path))


def check_jsonl(args, workdir, checkpoint) -> str:
    code, err = run_rlrender(workdir, checkpoint, "jsonl", args.subprocess)
    sr.expect(code == 0, f"rlrender --format jsonl exit {code}: {err}")
    rows = [json.loads(ln) for ln in (workdir / "out.jsonl").read_text().splitlines() if ln.strip()]
    meta = rows[0]["metadata"]["trajectories"][0]
    sr.expect(meta["num_steps"] == STEPS, f"jsonl trajectory has {meta['num_steps']} steps, expected {STEPS}")
    runner = "rlrender" if args.subprocess else "cli.main"
    sr.evidence(meta['num_steps'], "trajectory steps rendered")
    return f"{runner} jsonl: {len(rows)} records, {meta['num_steps']} steps, return {meta['return']:.3f}"


def check_npz(args, workdir, checkpoint) -> str:
    import numpy as np

    code, err = run_rlrender(workdir, checkpoint, "npz", False)
    sr.expect(code == 0, f"rlrender --format npz exit {code}: {err}")
    with np.load(workdir / "out.npz") as data:
        act = data["traj_000/action"]
        sr.expect(act.shape == (STEPS, 1), f"npz traj_000/action shape {act.shape}")
        n = len(data.files)
    sr.evidence(act.shape[0], "trajectory steps rendered")
    return f"npz: {n} arrays, traj_000/action {act.shape}"


def check_frames(args, workdir, checkpoint) -> str:
    sr.optional_backend("pillow", module="PIL", install="pip install pillow")
    code, err = run_rlrender(workdir, checkpoint, "frames", False)
    sr.expect(code == 0, f"rlrender --format frames exit {code}: {err}")
    from PIL import Image

    pngs = sorted((workdir / "out.frames").rglob("*.png"))
    sr.expect(len(pngs) == STEPS + 1, f"{len(pngs)} PNG frames written, expected {STEPS + 1} (reset + {STEPS} steps)")
    with Image.open(pngs[0]) as img:
        size = img.size
    sr.expect(size == (32, 32), f"frame size {size}, expected (32, 32) from the 'pixels' key")
    sr.evidence(len(pngs), "frames written")
    return f"frames: {len(pngs)} PNGs of {size[0]}x{size[1]} from the 'pixels' key"


def check_mp4(args, workdir, checkpoint) -> str:
    import importlib.util

    # torchrl 0.14.1 writes mp4 through torchcodec only (torchrl/record/loggers, VideoRecorder);
    # PyAV alone is not enough
    code, err = run_rlrender(workdir, checkpoint, "mp4", False)
    if importlib.util.find_spec("torchcodec") is None:
        # frames ARE captured here, so the failure must be the torchcodec one
        sr.expect(code != 0 and "requires torchcodec" in err,
                  f"without torchcodec expected rlrender's torchcodec error, got exit {code}: {err!r}")
        raise sr.BackendMissing(
            "torchcodec not installed: rlrender --format mp4 needs torchcodec>=0.10.0 and FFmpeg "
            f"libraries (PyAV is not used); pip install 'torchcodec>=0.10.0'. rlrender said: {err}"
        )
    sr.expect(code == 0, f"rlrender --format mp4 exit {code}: {err}")
    size = (workdir / "out.mp4").stat().st_size
    sr.expect(size > 0, "empty mp4")
    sr.evidence(int(size > 0), "mp4 files written")
    return f"mp4 written ({size} bytes)"


CHECKS = [
    sr.Check("render:checkpoint", check_checkpoint, gives="checkpoint", proves="save_render_checkpoint writes an archive load_checkpoint reads back"),
    sr.Check("render:rlrender-jsonl", check_jsonl, proves="rlrender --format jsonl writes every step of the trajectory"),
    sr.Check("render:rlrender-npz", check_npz, proves="rlrender --format npz writes every step's action"),
    sr.Check("render:rlrender-frames", check_frames, proves="rlrender --format frames writes one PNG per step from the 'pixels' key"),
    sr.Check("render:rlrender-mp4", check_mp4, flag="mp4", proves="rlrender --format mp4 writes a non-empty video"),
]


def run_checks(args, report) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "render_factory.py").write_text(FACTORY)
        sr.run_declared(CHECKS, report, args=args, workdir=workdir)


def main(argv=None):
    return sr.standard_main(__file__, build_parser, run_checks, argv)
