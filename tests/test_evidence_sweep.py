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
import skill_report as sr
from conftest import SCRIPTS, load_module, script_id

# script stem -> check names not declaring ``proves`` yet (scripts other helpers are converting).
UNDECLARED: dict[str, set[str]] = {
    'audit_run': {'acting-module', 'action-bounds', 'batched-layout', 'data-freshness', 'env-actions', 'env-seeding', 'episode-stats', 'exit', 'exploration', 'grad-flow', 'grad-norms', 'identical-workers', 'info:frames-per-second', 'info:observation-scale', 'info:update-to-data', 'learning-rate', 'llm-first-step-ratio', 'llm-kl-to-reference', 'llm-mask-coverage', 'llm-reward-variance', 'llm-zero-advantage-groups', 'non-finite', 'optimizer-coverage', 'policy-distribution', 'policy-update', 'prioritized-replay', 'replay-rows', 'reward-variety', 'run', 'target-network', 'time-limit', 'training', 'transforms', 'value-estimator', 'value-range', 'vector-autoreset'},
    'check_torchrl_env': {'accelerator', 'backend:av', 'backend:dm_control', 'backend:gymnasium', 'backend:hydra-core', 'backend:lerobot', 'backend:moviepy', 'backend:mujoco', 'backend:pettingzoo', 'backend:ray', 'backend:sglang', 'backend:tensorboard', 'backend:torchcodec', 'backend:transformers', 'backend:vllm', 'backend:vmas', 'backend:wandb', 'cli:rlrender', 'cli:torchrl-render', 'compiled-extension', 'core:check_env_specs', 'core:pendulum-rollout', 'core:prioritized-replay', 'core:replay-buffer', 'core:step_mdp', 'core:tensordict-module', 'tensordict-in-torchrl-range', 'torch-matches-torchrl-build', 'torchrl-requirements', 'versions'},
    'check_component_contracts': {'buffer:token-round-trip', 'hf:backend', 'hf:generation-keys', 'hf:grpo', 'loss:classic-ppo', 'loss:grpo', 'loss:sft-keys', 'rollouts:collector-protocol'},
    'check_llm_wiring': {'llm-wiring:advantage', 'llm-wiring:behaviour-logprobs', 'llm-wiring:load', 'llm-wiring:loss-mask', 'llm-wiring:reference', 'llm-wiring:samples-per-prompt', 'llm-wiring:update'},
    'check_vla_schema': {'vla:action-tokenizers', 'vla:schema-file', 'vla:schema-synthetic', 'vla:tinyvla-forward-backward'},
    'post_training_metrics': {'metrics:csv-logger', 'metrics:fixed-batch', 'metrics:plot'},
    'report_llm_backends': {'backend:lerobot', 'backend:sglang', 'backend:vllm'},
    'smoke_llm_grpo': {'llm:chatenv-generate', 'llm:collector-replay', 'llm:grpo-loss', 'llm:logprob-recompute', 'llm:sft-loss', 'llm:tokenizer-template'},
    'smoke_render': {'render:checkpoint', 'render:rlrender-frames', 'render:rlrender-jsonl', 'render:rlrender-mp4', 'render:rlrender-npz'},
    'smoke_services': {'services:direct-lifecycle', 'services:process-lifecycle', 'services:python-executor', 'services:ray-registry'},
    'trl_round_trips': {'trl:buffer-records', 'trl:sft-trainer-on-torchrl-buffer', 'trl:torchrl-grpo-hf-reward'},
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
    "smoke_replay_buffer": {"dumps": "EMPTY_DIR"},
    "check_provenance": {"provenance": "EMPTY_FILE"},
    "scan_api_drift": {"table": "EMPTY_FILE"},
}


def _degenerate_args(module, tmp_path):
    """The script's defaults with every count (int) at 0, every list empty, and the files it
    reads (DEGENERATE_ARGS) empty."""
    args = module.build_parser().parse_args([])
    for name, kind in DEGENERATE_ARGS.get(module.__name__, {}).items():
        path = tmp_path / f"degenerate_{name}"
        path.mkdir() if kind == "EMPTY_DIR" else path.write_text("")
        setattr(args, name, str(path))
    for name, value in list(vars(args).items()):
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            setattr(args, name, 0)
        elif isinstance(value, list):
            setattr(args, name, [])
    return args


def _empty_target(tmp_path):
    import _user_code

    path = tmp_path / "empty_target.py"
    path.write_text('"""A file with nothing in it."""\n')
    return _user_code.parse_target(f"{path}:make_env")


def _degenerate_wiring():
    """The built-in PPO wiring's loss and estimator over a zero-length batch."""
    import _loss_wiring
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
        "selection": lambda: module.Selection(tmp_path, [], [], "degenerate") if hasattr(module, "Selection") else None,
        "loss": lambda: wiring()["loss"], "batch": lambda: wiring()["batch"], "estimator": lambda: wiring()["estimator"],
    }


def declared_checks(module) -> list:
    """A script's checks: every module-level list of ``sr.Check`` (CHECKS, DIAGNOSE_CHECKS,
    BUILD, ...), and check_loss_wiring's per-wiring checks."""
    checks = [c for value in vars(module).values() if isinstance(value, list) and value
              and all(isinstance(c, sr.Check) for c in value) for c in value]
    if module.__name__ == "check_loss_wiring":
        import _loss_wiring

        checks += module.wiring_checks(_loss_wiring.Wiring(name="degenerate", loss=None, batch=None))
    if module.__name__ == "inspect_loss_keys":  # declared per run: the list mode and the default losses
        args = module.build_parser().parse_args([])
        checks += module.declared_checks(argparse.Namespace(list=True), []) + module.declared_checks(args, [])
    return checks


CHECK_SCRIPTS = [s for s in SCRIPTS if s.stem not in ("explain", "run_all_checks")]


@pytest.mark.parametrize("script", CHECK_SCRIPTS, ids=script_id)
def test_no_check_passes_on_empty_or_degenerate_input(script, tmp_path):
    module = load_module(script)
    checks = declared_checks(module)
    undeclared = {c.name for c in checks if not c.proves}
    assert undeclared == UNDECLARED.get(script.stem, set()), (
        f"checks without proves= (declare them, and update UNDECLARED): {sorted(undeclared)}")
    fixed = FIXED_INPUT.get(script.stem, {})
    swept = [c for c in checks if c.proves and c.name not in fixed]
    passed, report = [], sr.Report(str(script), json_mode=True, timeout=120)
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
    assert not passed, "passed on degenerate input:\n" + "\n".join(passed)


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
