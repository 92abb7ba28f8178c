"""rlrender run in this process on the render smoke's factory (sub-skills/llm-vla-and-services/
scripts/smoke_render.py): a PendulumEnv, with or without its "pixels" transform."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "src"


def rlrender_error(fmt: str, pixels: bool) -> str:
    """rlrender's stderr lines for ``--format fmt`` (the ``rlrender: error: ...`` line)."""
    import contextlib
    import io

    import torch

    sys.path.insert(0, str(SCRIPTS))
    from torchrl_skill.checks.llm import smoke_render
    from torchrl.render import save_render_checkpoint
    from torchrl.render.cli import main as rlrender_main

    factory = smoke_render.FACTORY
    if not pixels:
        factory = factory.replace("return TransformedEnv(PendulumEnv(), AngleToPixels())", "return PendulumEnv()")
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        (tmp / "render_factory.py").write_text(factory)
        sys.path.insert(0, folder)
        err = io.StringIO()
        try:
            import render_factory

            torch.manual_seed(0)
            ckpt = save_render_checkpoint(tmp / "policy.pt", render_factory.make_policy(), format="archive")
            argv = ["--ckpt", str(ckpt), "--env", "render_factory:make_env", "--policy", "render_factory:make_policy",
                    "--format", fmt, "--out", str(tmp / f"out.{fmt}"), "--max-steps", "3", "--num-trajs", "1"]
            with contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):
                rlrender_main(argv)
        finally:
            sys.path.remove(folder)
            sys.modules.pop("render_factory", None)
    return "\n".join(ln for ln in err.getvalue().splitlines() if "rlrender" in ln)
