"""Every check of every script, run on empty and degenerate inputs, never PASSes
(CONTRIBUTING.md, "Scripts": a PASS is a proof on counted evidence).

In process and cheap: each declared check's function is called through
``skill_report.Report.run_check`` (the path ``run_declared`` takes) with a degenerate value
for each parameter it takes (``DEGENERATE``: an env with zero copies, a zero-length batch, an
empty file, zero steps, args whose counts are 0). A check still without ``proves=`` is named
in ``UNDECLARED`` (the list only shrinks: a new check must declare, and a declared check must
leave it); ``FIXED_INPUT`` names declared checks whose input is the bundle's own example,
which no argument can empty, with the reason.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect

import pytest
from torchrl_skill.report import skill_report as sr
from conftest import SCRIPTS, load_module, script_id

# script stem -> check names not declaring ``proves`` yet. audit_run's rows are the auditor's
# detectors, which count their own evidence over the audited run (src/torchrl_skill/audit/evidence.py:
# a detector below its minimum evidence is a SKIP); they move here to proves= when that
# count is handed to sr.evidence.
UNDECLARED: dict[str, set[str]] = {
    'audit_run': {'acting-module', 'action-bounds', 'batched-layout', 'data-freshness', 'env-actions', 'env-seeding', 'episode-stats', 'exit', 'exploration', 'grad-flow', 'grad-norms', 'identical-workers', 'info:frames-per-second', 'info:observation-scale', 'info:update-to-data', 'learning-rate', 'llm-first-step-ratio', 'llm-kl-to-reference', 'llm-mask-coverage', 'llm-reward-variance', 'llm-zero-advantage-groups', 'non-finite', 'optimizer-coverage', 'policy-distribution', 'policy-update', 'prioritized-replay', 'replay-rows', 'reward-variety', 'run', 'target-network', 'time-limit', 'training', 'transforms', 'transitions', 'value-estimator', 'value-range', 'vector-autoreset'},
}

# script stem -> {declared check: why no argument can empty its input}
FIXED_INPUT: dict[str, dict[str, str]] = {
    "smoke_env_rollout": {"backend:gymnasium": "probes the installed gymnasium distribution, not an input"},
    "check_user_env": {"env:seed-global-rng": "reads torch's global RNG around one env.set_seed call, which an env "
                                              "with zero copies makes all the same"},
    "check_loss_wiring": {"degenerate:value-key": "reads the critic's out_keys, not the batch"},
    "smoke_collector": {"collector:trajs-per-batch": "its own SerialEnv(2) and 32 frames; no argument sizes it"},
    "smoke_replay_buffer": {"sampler:slice-layout": "its own one-step writes of 2 envs; no argument sizes them",
                            "writer:max-value": "its own 100 rewards into a storage of 10; no argument sizes them"},
    "smoke_training_step": {"sac:update+SoftUpdate": "its own 32-step rollout and 16-row sample; no argument sizes them",
                            "dqn:update+HardUpdate": "its own 16-row batch; no argument sizes it"},
    "smoke_recurrent_actor": {"recurrent:missing-transforms-flagged": "judges its own bare and transformed CartPole"},
    "smoke_actor": {"noisy:exploration-type": "NoisyLinear's switch is read from the installed class; its batch is args.batch, "
                                              "but a layer is noisy or not whatever the batch"},
    "inspect_loss_keys": {f"keys:{name}": "reads the installed loss class and its own tiny batch; no argument empties it"
                          for name in ("ClipPPOLoss", "SACLoss", "DQNLoss")},
    "check_component_contracts": {
        "loss:sft-keys": "reads SFTLoss's key contract, not an input",
        "hf:backend": "probes the installed transformers distribution, not an input",
        "hf:generation-keys": "its own tiny Qwen2 model and prompts; no argument sizes them",
        "hf:grpo": "its own tiny Qwen2 model and batch; no argument sizes them"},
    "check_vla_schema": {"vla:schema-synthetic": "its own canonical batch and broken copy",
                         "vla:action-tokenizers": "its own action batch", "vla:tinyvla-forward-backward": "its own TinyVLA and batch"},
    "smoke_llm_grpo": {"llm:tokenizer-template": "its own tiny tokenizer and chat"},
    "smoke_services": {name: "a service lifecycle of its own (processes, Ray): nothing to empty, and the sweep starts no process"
                       for name in ("services:direct-lifecycle", "services:process-lifecycle", "services:python-executor",
                                    "services:ray-registry")},
    "trl_round_trips": {"trl:buffer-records": "its own records",
                        "trl:sft-trainer-on-torchrl-buffer": "a training run of its own tiny model; --steps 0 is refused (exit 2)",
                        "trl:torchrl-grpo-hf-reward": "a training run of its own tiny model; --steps 0 is refused (exit 2)"},
    "post_training_metrics": {"metrics:csv-logger": "logs its own 3 synthetic steps; no argument sizes them"},
    "check_torchrl_env": {
        **{name: "reads the installed stack, not an input" for name in (
            "versions", "tensordict-in-torchrl-range", "torchrl-requirements", "torch-matches-torchrl-build",
            "compiled-extension", "accelerator")},
        **{f"backend:{dist}": "probes an installed distribution, not an input" for dist in (
            "gymnasium", "dm_control", "mujoco", "vmas", "pettingzoo", "ray", "vllm", "sglang", "transformers", "lerobot",
            "av", "torchcodec", "moviepy", "tensorboard", "wandb", "hydra-core")},
        **{f"cli:{cli}": "runs an installed console script's --help" for cli in ("rlrender", "torchrl-render")}},
    "check_ray_scaling": {"ray:installed": "probes the installed ray distribution, not an input",
                          "ray:replay-buffer": "its input is a Ray session, which the sweep does not start",
                          "ray:collector": "its input is a Ray session, which the sweep does not start"},
}


def _zero_env():
    """A torchrl env with zero copies (batch_size [0]): every reset and rollout is empty."""
    import torch
    from tensordict import TensorDict
    from torchrl.data import Categorical, Composite, Unbounded
    from torchrl.envs import EnvBase

    class ZeroEnv(EnvBase):
        def __init__(self):
            super().__init__(device="cpu", batch_size=[0])
            self.observation_spec = Composite(observation=Unbounded(shape=(0, 3)), shape=(0,))
            self.action_spec = Unbounded(shape=(0, 1))
            self.reward_spec = Unbounded(shape=(0, 1))
            self.done_spec = Composite(done=Categorical(2, shape=(0, 1), dtype=torch.bool),
                                       terminated=Categorical(2, shape=(0, 1), dtype=torch.bool), shape=(0,))

        def _reset(self, td):
            return TensorDict(observation=torch.zeros(0, 3), done=torch.zeros(0, 1, dtype=torch.bool),
                              terminated=torch.zeros(0, 1, dtype=torch.bool), batch_size=[0])

        def _step(self, td):
            return TensorDict(observation=torch.zeros(0, 3), reward=torch.zeros(0, 1), done=torch.zeros(0, 1, dtype=torch.bool),
                              terminated=torch.zeros(0, 1, dtype=torch.bool), batch_size=[0])

        def _set_seed(self, seed):
            return seed

    return ZeroEnv()


# script stem -> {args attribute: "EMPTY_FILE" | "EMPTY_DIR"}: the input a mode reads, emptied
DEGENERATE_ARGS: dict[str, dict[str, str]] = {
    "smoke_collector": {"diagnose": "EMPTY_FILE"},
    "check_llm_wiring": {"target": "EMPTY_TARGET"},
    "smoke_replay_buffer": {"dumps": "EMPTY_DIR"},
    "check_provenance": {"provenance": "EMPTY_FILE"},
    "scan_api_drift": {"table": "EMPTY_FILE"},
}


def _degenerate_args(module, tmp_path):
    """The script's defaults with every count (int) at 0, every list empty, and the files it
    reads (DEGENERATE_ARGS) empty."""
    args = module.build_parser().parse_args([])
    for name, kind in DEGENERATE_ARGS.get(module.__name__.rpartition(".")[2], {}).items():
        path = tmp_path / f"degenerate_{name}"
        if kind == "EMPTY_DIR":
            path.mkdir()
        else:
            path = path.with_suffix(".py") if kind == "EMPTY_TARGET" else path
            path.write_text("")
        setattr(args, name, f"{path}:build" if kind == "EMPTY_TARGET" else str(path))
    for name, value in list(vars(args).items()):
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            setattr(args, name, 0)
        elif isinstance(value, list):
            setattr(args, name, [])
    return args


def _empty_target(tmp_path):
    from torchrl_skill.runtime import user_code as _user_code

    path = tmp_path / "empty_target.py"
    path.write_text('"""A file with nothing in it."""\n')
    return _user_code.parse_target(f"{path}:make_env")


def _degenerate_wiring():
    """The built-in PPO wiring's loss and estimator over a zero-length batch."""
    load_module("objectives-and-training/check_loss_wiring")  # puts its private modules on sys.path
    from torchrl_skill.checks.objectives import loss_wiring as _loss_wiring
    from torchrl.objectives.value import GAE

    wiring = _loss_wiring.wirings_from(_loss_wiring.default_wiring(), "default_wiring()", "default")[0]
    return {"loss": wiring.loss, "batch": wiring.batch[:0], "estimator": GAE(gamma=0.9, lmbda=0.9, value_network=wiring.loss.critic_network)}


def degenerate_namespace(module, tmp_path, cleanup) -> dict:
    """A factory of a degenerate value for every parameter name a declared check takes
    (built on first use: a script whose checks are all undeclared builds nothing)."""
    def env():
        made = _zero_env()
        cleanup.callback(made.close, raise_if_closed=False)
        return made

    made: dict = {}

    def once(name, factory):
        return lambda: made[name] if name in made else made.setdefault(name, factory())

    shared_env = once("env", env)
    wiring = once("wiring", _degenerate_wiring)
    return {
        "args": lambda: _degenerate_args(module, tmp_path), "cleanup": lambda: cleanup, "target": lambda: _empty_target(tmp_path),
        "guarded": lambda: True, "env": shared_env, "batched_env": shared_env, "reset": lambda: shared_env().reset(),
        "steps": lambda: 0, "time_limit_steps": lambda: 0, "expected_transforms": lambda: [], "wirings": lambda: [],
        "frames": lambda: 0, "batch_size": lambda: 0, "exported": lambda: [],
        "paths": lambda: [], "mapping": lambda: ({}, []), "claim": lambda: {},
        "rows": lambda: [], "frames_per_batch": lambda: 0,
        "tmp": lambda: str(tmp_path / "tmp"), "workdir": lambda: tmp_path,
        "selection": lambda: module.Selection(tmp_path, [], [], "degenerate") if hasattr(module, "Selection") else None,
        "loss": lambda: wiring()["loss"], "batch": lambda: wiring()["batch"], "estimator": lambda: wiring()["estimator"],
    }


def declared_checks(module) -> list:
    """A script's checks: every module-level list of ``sr.Check`` (CHECKS, DIAGNOSE_CHECKS,
    BUILD, ...), and check_loss_wiring's per-wiring checks."""
    checks = [c for value in vars(module).values() if isinstance(value, list) and value
              and all(isinstance(c, sr.Check) for c in value) for c in value]
    if module.__name__.endswith(".check_loss_wiring"):
        from torchrl_skill.checks.objectives import loss_wiring as _loss_wiring

        checks += module.wiring_checks(_loss_wiring.Wiring(name="degenerate", loss=None, batch=None))
    if module.__name__.endswith(".inspect_loss_keys"):  # declared per run: the list mode and the default losses
        args = module.build_parser().parse_args([])
        checks += module.declared_checks(argparse.Namespace(list=True), []) + module.declared_checks(args, [])
    return checks


CHECK_SCRIPTS = [s for s in SCRIPTS if s.stem not in ("explain", "run_all_checks")]


def degenerate_passes(module, tmp_path, stem: str) -> list[str]:
    """Each declared check of ``module`` (but ``FIXED_INPUT[stem]``) that PASSes on degenerate
    input: ``"name: detail (evidence n)"``; empty when none does."""
    fixed = FIXED_INPUT.get(stem, {})
    swept = [c for c in declared_checks(module) if c.proves and c.name not in fixed]
    passed, report = [], sr.Report(f"{stem}.py", json_mode=True, timeout=120)
    with contextlib.ExitStack() as cleanup:
        namespace = degenerate_namespace(module, tmp_path, cleanup)
        for check in swept:
            # a value no entry of degenerate_namespace makes is given as None: nothing at all
            kwargs = {p: namespace[p]() if p in namespace else None for p in sr.check_params(check)}
            kwargs.update({p: namespace[p]() for p in inspect.signature(check.fn).parameters if p in namespace and p not in kwargs})
            try:
                report.run_check(check.name, check.fn, check.proves, kwargs=kwargs)
            except sr.CannotRun:  # exit 2 on an input it cannot run on (an empty target file): no pass
                continue
            row = report.result(check.name)
            if row.status == "pass":
                passed.append(f"{check.name}: {row.detail} (evidence {row.evidence})")
    return passed


@pytest.mark.parametrize("script", CHECK_SCRIPTS, ids=script_id)
def test_no_check_passes_on_empty_or_degenerate_input(script, tmp_path):
    module = load_module(script)
    undeclared = {c.name for c in declared_checks(module) if not c.proves}
    assert undeclared == UNDECLARED.get(script.stem, set()), (
        f"checks without proves= (declare them, and update UNDECLARED): {sorted(undeclared)}")
    passed = degenerate_passes(module, tmp_path, script.stem)
    assert not passed, "passed on degenerate input:\n" + "\n".join(passed)


def test_the_sweep_finds_a_check_counting_what_it_did_not_check(tmp_path):
    """Negative control of the sweep itself: a script whose check counts a fixed 8 rows passes
    on a zero-length batch and is named; its twin counting the rows it read is not."""
    import types

    def build_parser():
        parser = sr.make_parser("A broken script.", "python broken.py")
        parser.add_argument("--batch-size", type=int, default=8)
        return parser

    def counts_fixed(batch_size):
        sr.evidence(8, "rows")  # the defect: not the rows it read
        return f"{batch_size} rows finite"

    def counts_read(batch_size):
        sr.evidence(batch_size, "rows")
        return f"{batch_size} rows finite"

    broken = types.ModuleType("broken_script")
    broken.build_parser = build_parser
    broken.CHECKS = [sr.Check("rows:fixed-count", counts_fixed, proves="every row is finite"),
                     sr.Check("rows:read-count", counts_read, proves="every row is finite")]
    assert [p.split(":", 2)[:2] for p in degenerate_passes(broken, tmp_path, "broken_script")] == [["rows", "fixed-count"]]


def test_the_sweep_rejects_a_check_that_passes_on_nothing():
    """Negative control: a declared check that counts its (empty) input passes nothing, and one
    that forgets to count is a SKIP too; a check that counts the items it checked passes."""
    import torch

    def counts(batch):
        sr.evidence(batch.numel(), "steps")
        return "all finite" if torch.isfinite(batch).all() else "not finite"

    def forgets(batch):
        return "all finite"

    report = sr.Report("x.py", json_mode=True)
    for name, fn, batch in [("counts-empty", counts, torch.zeros(0)), ("forgets", forgets, torch.zeros(4)),
                            ("counts-full", counts, torch.zeros(4))]:
        report.run_check(name, fn, "every step is finite", kwargs={"batch": batch})
    assert [report.result(n).status for n in ("counts-empty", "forgets", "counts-full")] == ["skip", "skip", "pass"]


def test_exemption_lists_name_real_checks():
    names = {s.stem: {c.name for c in declared_checks(load_module(s))} for s in CHECK_SCRIPTS}
    for listing in (UNDECLARED, FIXED_INPUT):
        for stem, checks in listing.items():
            assert set(checks) <= names.get(stem, set()), (stem, set(checks) - names.get(stem, set()))
