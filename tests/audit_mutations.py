"""The run-time auditor's mutation suites, as data: for every detector, realistic variants of
its fault class in different API forms and code shapes, each with its fixed twin, plus
correct runs nearest to a fault (they must pass) and short runs (the component used, the
run too short: the row must say so, not pass).

Each entry is one audited run of a fixture under tests/fixtures/audit/ (``target`` relative
to it, its own ``argv``, ``--max-frames``). ``tests/record_audit_mutations.py`` runs them
all under the real auditor and keeps what each detector's ``judge`` reads
(``tests/fixtures/audit/mutations/recorded.json``); ``tests/test_audit_mutations.py`` judges
every recording, re-runs one entry per detector live to show the recordings are what the
auditor sees today, and checks the table in tests/README.md (:func:`table`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

AUDIT = Path(__file__).resolve().parent / "fixtures" / "audit"
RECORDED = AUDIT / "mutations" / "recorded.json"


@dataclass(frozen=True)
class Run:
    """One audited run: ``expect`` is ``fail`` (a fault variant), ``pass`` (its fixed twin, or
    a correct run nearest to a fault) or ``short`` (too little evidence: a SKIP that says so).
    ``says``: text the row must contain (a FAIL names the fixture's file and line)."""

    detector: str
    name: str
    kind: str  # "broken", "fixed", "clean" or "short"
    target: str
    argv: tuple
    max_frames: int
    shape: str
    says: tuple = ()

    @property
    def key(self) -> str:
        return f"{self.detector}/{self.name}/{self.kind}"

    @property
    def expect(self) -> str:
        return {"broken": "fail", "fixed": "pass", "clean": "pass", "short": "short"}[self.kind]


def pair(detector, name, target, shape, max_frames, says=(), argv=None, fixed_argv=None, where=None):
    """A fault variant and its fixed twin (``--variant NAME`` / ``--variant NAME --fixed`` unless
    given); the FAIL must name ``where`` (default: the target's file name) with a line."""
    argv = tuple(argv) if argv is not None else ("--variant", name)
    fixed_argv = tuple(fixed_argv) if fixed_argv is not None else (*argv, "--fixed")
    where = ((where or Path(target).name) + ":",)
    return [Run(detector, name, "broken", target, argv, max_frames, shape, where + tuple(says)),
            Run(detector, name, "fixed", target, fixed_argv, max_frames, shape)]


def clean(detector, name, target, shape, max_frames, argv, says=()):
    return [Run(detector, name, "clean", target, tuple(argv), max_frames, shape, tuple(says))]


def short(detector, name, target, max_frames, argv, says=("needed to judge",)):
    return [Run(detector, name, "short", target, tuple(argv), max_frames, "too short a run", tuple(says))]


TN, TD3 = "mutations/target_network.py", "mutations/td3_hydra/train.py"
SERIAL = "env.batched=serial"
RUNS: list[Run] = [
    # target-network: updater kinds and stepping places; loss(td) versus sub-methods
    *pair("target-network", "soft-never", TN, "SoftUpdate, never stepped", 800, ["never called"]),
    *pair("target-network", "hard-per-batch", TN, "HardUpdate, stepped per batch of updates", 800, ["0.25 per optimizer step"]),
    *pair("target-network", "soft-per-batch", TN, "SoftUpdate, stepped per batch of updates", 800, ["0.25 per optimizer step"]),
    *pair("target-network", "soft-every-k", TN, "SoftUpdate, stepped every 10th update", 800, ["per optimizer step"]),
    *pair("target-network", "rebuilt", TN, "SoftUpdate built at every update", 800, ["each construction copies"]),
    *pair("target-network", "other-loss", TN, "updater built for a loss rebuilt later", 800, ["updates another DQNLoss"]),
    *pair("target-network", "no-updater", TN, "no updater", 800, ["no SoftUpdate/HardUpdate"]),
    *pair("target-network", "td3-no-updater", TD3, "hydra-style TD3, loss.value_loss/actor_loss, no updater", 600,
          ["TD3Loss"], argv=(SERIAL, "loss.target_update=none"), fixed_argv=(SERIAL,), where="utils.py"),
    *pair("target-network", "td3-per-batch", TD3, "hydra-style TD3, updater stepped per batch", 600,
          ["per optimizer step"], argv=(SERIAL, "loss.target_update_at=batch"), fixed_argv=(SERIAL,)),
    *clean("target-network", "hard-last-copy", TN, "HardUpdate whose one copy is the run's last call", 5000,
           ["--variant", "hard-last-copy"], ["target changed 1 times"]),
    *clean("target-network", "td3-every-critic-step", TD3, "hydra-style TD3, updater stepped with the critic", 600,
           [SERIAL, "loss.target_update_at=critic"]),
    *short("target-network", "few-steps", TN, 50, ["--variant", "soft-never", "--fixed"]),
    # optimizer-coverage
    *pair("optimizer-coverage", "critic-module", "mutations/optimizer_coverage.py", "SAC, optimizer over the critic module", 300,
          ["qvalue_network_params"]),
    *pair("optimizer-coverage", "no-alpha", "mutations/optimizer_coverage.py", "SAC, log_alpha left out", 300, ["log_alpha"]),
    *pair("optimizer-coverage", "actor-only", "mutations/optimizer_coverage.py", "SAC, actor parameters only", 300, ["no stepping optimizer holds"]),
    *pair("optimizer-coverage", "stale-loss", "mutations/optimizer_coverage.py", "SAC, optimizer from a loss later rebuilt", 300,
          ["never received a gradient"]),
    *pair("optimizer-coverage", "ppo-actor-only", "mutations/optimizer_coverage.py", "PPO, critic never optimized", 400, ["no stepping optimizer holds"]),
    *pair("optimizer-coverage", "extra-module", "mutations/optimizer_coverage.py", "PPO, an unused module in the optimizer", 400,
          ["never received a gradient"]),
    *pair("optimizer-coverage", "td3-critic-module", TD3, "hydra-style TD3, critic optimizer over the module", 600,
          ["qvalue_network_params"], argv=(SERIAL, "optim.critic_params=module"), fixed_argv=(SERIAL,)),
    *short("optimizer-coverage", "few-steps", "mutations/optimizer_coverage.py", 100, ["--variant", "ppo-actor-only", "--fixed"]),
    # exploration
    *pair("exploration", "rollout-no-context", "mutations/exploration.py", "env.rollout outside an exploration context", 400,
          ["every checked action equals"]),
    *pair("exploration", "deterministic-type", "mutations/exploration.py", "Collector(exploration_type=DETERMINISTIC)", 400,
          ["every checked action equals"]),
    *pair("exploration", "no-noise", "mutations/exploration.py", "deterministic actor, no noise module", 400, ["has no exploration module"]),
    *pair("exploration", "noise-never-stepped", "mutations/exploration.py", "AdditiveGaussianModule never stepped", 600, ["never called"]),
    *pair("exploration", "noise-per-update", "mutations/exploration.py", "AdditiveGaussianModule.step() per update", 600, ["per update"]),
    *pair("exploration", "noise-no-frames", "mutations/exploration.py", "AdditiveGaussianModule.step() without frames", 600, ["counted"]),
    *pair("exploration", "td3-never-stepped", TD3, "hydra-style TD3, noise never stepped", 600, ["never called"],
          argv=(SERIAL, "exploration.step=never"), fixed_argv=(SERIAL,), where="utils.py"),
    *pair("exploration", "td3-per-update", TD3, "hydra-style TD3, noise stepped per update", 600, ["per update"],
          argv=(SERIAL, "exploration.step=update"), fixed_argv=(SERIAL,)),
    *short("exploration", "inside-random-frames", "coverage/ddpg.py", 1000, [], ["init_random_frames=25000"]),
    # transforms
    *pair("transforms", "dropped", "mutations/transforms.py", "append_transform result dropped", 300, ["never stepped"]),
    *pair("transforms", "factory-dropped", "mutations/transforms.py", "the same in a factory handed to the Collector", 300, ["never stepped"]),
    *pair("transforms", "wrapped-dropped", "mutations/transforms.py", "the same, the Collector wrapping the env (max_frames_per_traj)", 300,
          ["never stepped"]),
    *pair("transforms", "serial-dropped", "mutations/transforms.py", "the same in a SerialEnv's factory", 300, ["never stepped"]),
    *pair("transforms", "call-only", "mutations/transforms.py", "user transform without _reset", 300, ["overrides _call but not _reset", "(defined at transforms.py:"]),
    *pair("transforms", "rollout-base", "mutations/transforms.py", "env.rollout on the base env", 300, ["never stepped"]),
    *short("transforms", "few-steps", "mutations/transforms.py", 5, ["--variant", "dropped", "--fixed", "--frames-per-batch", "5"]),
    # time-limit
    *pair("time-limit", "done", "mutations/time_limit.py", "custom env returning done at the limit", 300, ["terminated` at exactly step 20", "drift.py:"]),
    *pair("time-limit", "terminated", "mutations/time_limit.py", "custom env returning terminated at the limit", 300, ["terminated` at exactly step 20"]),
    *pair("time-limit", "budget-transform", "mutations/time_limit.py", "a user transform terminating at a budget", 300, ["terminated` at exactly step 20"]),
    *pair("time-limit", "rollout", "mutations/time_limit.py", "env.rollout, no collector", 300, ["terminated` at exactly step 20"]),
    *pair("time-limit", "serial", "mutations/time_limit.py", "SerialEnv", 300, ["terminated` at exactly step 20"], where="drift.py"),
    *pair("time-limit", "parallel", "mutations/time_limit.py", "ParallelEnv", 300, ["terminated` at exactly step 20"], where="time_limit.py"),
    *short("time-limit", "few-episodes", "mutations/time_limit.py", 30, ["--variant", "done", "--frames-per-batch", "30"]),
    # batched-layout
    *pair("batched-layout", "flatten", "mutations/batched_layout.py", "GAE on [env*time]", 400, ["before reshape(-1)"]),
    *pair("batched-layout", "recompute", "mutations/batched_layout.py", "loss recomputing over the script's GAE", 400, ["computed advantages itself"]),
    *pair("batched-layout", "shuffled", "mutations/batched_layout.py", "GAE on shuffled minibatches", 400, ["not the following step's state"]),
    *pair("batched-layout", "cat-rollouts", "mutations/batched_layout.py", "TD(lambda) on concatenated env.rollout results", 400,
          ["not the following step's state"]),
    *pair("batched-layout", "slice", "mutations/batched_layout.py", "SliceSampler over flattened one-step batches", 400, ["cross trajectories"]),
    *pair("batched-layout", "prb-slice", "mutations/batched_layout.py", "PrioritizedSliceSampler, the same", 400, ["cross trajectories"]),
    *short("batched-layout", "few-steps", "mutations/batched_layout.py", 8, ["--variant", "flatten", "--fixed", "--frames-per-batch", "8"]),
    # vector-autoreset
    *pair("vector-autoreset", "gymenv-num-envs", "mutations/vector_autoreset.py", "GymEnv(num_envs=2)", 400, ["NEXT_STEP"]),
    *pair("vector-autoreset", "transformed", "mutations/vector_autoreset.py", "TransformedEnv over GymEnv(num_envs=2)", 400, ["NEXT_STEP"]),
    *pair("vector-autoreset", "rollout", "mutations/vector_autoreset.py", "env.rollout, no collector", 400, ["NEXT_STEP"]),
    *pair("vector-autoreset", "collector-factory", "mutations/vector_autoreset.py", "a factory the Collector calls", 400, ["NEXT_STEP"]),
    *pair("vector-autoreset", "serial-of-vector", "mutations/vector_autoreset.py", "SerialEnv of GymEnv(num_envs=2)", 400, ["NEXT_STEP"]),
    *pair("vector-autoreset", "appended", "mutations/vector_autoreset.py", "GymEnv(num_envs=2).append_transform(...)", 400, ["NEXT_STEP"]),
    # identical-workers
    *pair("identical-workers", "kwargs-dict", "mutations/identical_workers.py", "SerialEnv, create_env_kwargs as one dict", 240, ["create_env_kwargs"]),
    *pair("identical-workers", "unseeded", "mutations/identical_workers.py", "SerialEnv, unseeded generators", 240, ["set_seed was never called"]),
    *pair("identical-workers", "seed-in-factory", "mutations/identical_workers.py", "a factory seeding every env alike", 240, ["distinct first resets"]),
    *pair("identical-workers", "parallel-kwargs", "mutations/identical_workers.py", "ParallelEnv, create_env_kwargs as one dict", 240,
          ["create_env_kwargs"]),
    *pair("identical-workers", "rollout", "mutations/identical_workers.py", "env.rollout of a SerialEnv, one dict of kwargs", 240,
          ["create_env_kwargs"]),
    *pair("identical-workers", "td3-same-seed", TD3, "hydra-style TD3, create_env_kwargs as one dict in utils.py", 600,
          ["create_env_kwargs"], argv=(SERIAL, "env.same_seed=true"), fixed_argv=(SERIAL,), where="utils.py"),
    *clean("identical-workers", "deterministic", "mutations/identical_workers.py", "a reset deterministic by design, seeded apart", 240,
           ["--variant", "deterministic"], ["deterministic by design"]),
    # prioritized-replay
    *pair("prioritized-replay", "never", "mutations/prioritized_replay.py", "never updated", 300, ["never updated"]),
    *pair("prioritized-replay", "mean-loss", "mutations/prioritized_replay.py", "rb.update_priority(index, mean loss)", 300, ["one value for every"]),
    *pair("prioritized-replay", "expanded", "mutations/prioritized_replay.py", "td_error overwritten by the expanded loss", 300, ["one value for every"]),
    *pair("prioritized-replay", "raised", "mutations/prioritized_replay.py", "update raising inside try/except", 300, ["raised"]),
    *pair("prioritized-replay", "other-buffer", "mutations/prioritized_replay.py", "update on another buffer", 300, ["never updated"]),
    *pair("prioritized-replay", "signed", "mutations/prioritized_replay.py", "signed TD error", 300, ["negative"]),
    *short("prioritized-replay", "few-samples", "mutations/prioritized_replay.py", 50, ["--variant", "never", "--fixed"]),
    # episode-stats
    *pair("episode-stats", "root-done", "mutations/episode_stats.py", "data['done']", 300, ["data['next', 'done']"]),
    *pair("episode-stats", "root-terminated", "mutations/episode_stats.py", "data['terminated']", 300, ["data['next', 'terminated']"]),
    *pair("episode-stats", "root-truncated", "mutations/episode_stats.py", "data['truncated']", 300, ["data['next', 'truncated']"]),
    *pair("episode-stats", "get-method", "mutations/episode_stats.py", "data.get('done')", 300, ["data['next', 'done']"]),
    *pair("episode-stats", "serial-batch", "mutations/episode_stats.py", "SerialEnv [env, time] batch", 300, ["data['next', 'done']"]),
    *pair("episode-stats", "rollout", "mutations/episode_stats.py", "env.rollout result", 300, ["data['next', 'done']"]),
    *short("episode-stats", "one-batch", "mutations/episode_stats.py", 100, ["--variant", "root-done", "--fixed"]),
    # env-seeding
    *pair("env-seeding", "eval-set-seed", "mutations/env_seeding.py", "evaluation env re-seeded in _set_seed", 400, ["after collection started"]),
    *pair("env-seeding", "reset-reseed", "mutations/env_seeding.py", "_reset re-seeding", 400, ["after collection started"]),
    *pair("env-seeding", "random-alias", "mutations/env_seeding.py", "torch.random.manual_seed in _set_seed", 400, ["after collection started"]),
    *pair("env-seeding", "train-set-seed", "mutations/env_seeding.py", "the training env re-seeded mid-run", 400, ["after collection started"]),
    *pair("env-seeding", "serial-set-seed", "mutations/env_seeding.py", "SerialEnv.set_seed seeding sub-envs", 400, ["after collection started"]),
    *pair("env-seeding", "periodic-reset", "mutations/env_seeding.py", "_reset re-seeding every 3rd episode", 400, ["after collection started"]),
]
# One entry per detector re-run live in the test suite (the recordings are what the auditor sees;
# every variant's recording is judged). vector-autoreset's is TransformedEnv (4 s alone), not the
# SerialEnv of vector envs (11 s alone, 25 s in the suite).
LIVE = ["target-network/soft-per-batch/broken", "optimizer-coverage/no-alpha/broken", "exploration/noise-no-frames/broken",
        "transforms/serial-dropped/broken", "time-limit/budget-transform/broken", "batched-layout/cat-rollouts/broken",
        "vector-autoreset/transformed/broken", "identical-workers/seed-in-factory/broken", "prioritized-replay/expanded/broken",
        "episode-stats/get-method/broken", "env-seeding/random-alias/broken"]


def observed_for(run: Run, observed: dict) -> dict:
    """What ``run.detector``'s judge reads of a whole observation: the run's meta, how it
    ended (no traceback) and the detector's own section."""
    end = {k: v for k, v in observed.get("end", {}).items() if k != "traceback"}
    return {"meta": observed["meta"], "end": end, "sections": {run.detector: observed["sections"].get(run.detector, {})}}


def observe(run: Run) -> dict:
    """Audit ``run`` for real (a child process, torchrl instrumented, bounded by its
    --max-frames) and return its recording: ``{"argv", "max_frames", "observed"}``."""
    from torchrl_skill.audit import runner

    outcome = runner.run(str(AUDIT / run.target), list(run.argv), 300.0, run.max_frames)
    if not outcome.observed:
        raise RuntimeError(f"{run.key}: the audited run reported nothing; last output: {outcome.log[-500:]}")
    return {"argv": list(run.argv), "max_frames": run.max_frames, "observed": observed_for(run, outcome.observed)}


def load_recorded() -> dict:
    return json.loads(RECORDED.read_text()) if RECORDED.exists() else {}


def verdict(run: Run, observed: dict) -> tuple[str, str]:
    """``(status, detail)`` of ``run.detector``'s row on ``observed``: pass, fail, short or skip."""
    from torchrl_skill.audit import cli as audit_run
    from torchrl_skill.report import skill_report as sr
    from torchrl_skill.audit.evidence import Short

    module = next(m for m in audit_run.MODULES if m.NAME == run.detector)
    try:
        return "pass", audit_run.detector_check(module)(observed)
    except sr.CheckFailed as err:
        return "fail", str(err)
    except Short as err:
        return "short", str(err)
    except sr.CheckSkipped as err:
        return "skip", str(err)


def table(recorded: dict) -> str:
    """The tests/README.md table: per detector, fault variants caught, fixed twins passed,
    correct nearest cases passed, short runs said short (judged on ``recorded`` now)."""
    rows = {}
    for run in RUNS:
        status = verdict(run, recorded[run.key]["observed"])[0] if run.key in recorded else "missing"
        counts = rows.setdefault(run.detector, {k: [0, 0] for k in ("broken", "fixed", "clean", "short")})
        counts[run.kind][0] += status == run.expect
        counts[run.kind][1] += 1
    lines = ["| Detector | Variants caught | Fixed twins passed | Correct nearest cases passed | Short runs said short |",
             "| --- | --- | --- | --- | --- |"]
    for name, c in rows.items():
        cell = [f"{ok}/{n}" if n else "-" for ok, n in (c["broken"], c["fixed"], c["clean"], c["short"])]
        lines.append(f"| `{name}` | {' | '.join(cell)} |")
    return "\n".join(lines)


README = Path(__file__).resolve().parent / "README.md"
BEGIN, END = "<!-- BEGIN audit-mutations: python tests/record_audit_mutations.py --readme -->", "<!-- END audit-mutations -->"


def readme_table() -> str:
    """The table as tests/README.md holds it now (between BEGIN and END)."""
    text = README.read_text()
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip() if BEGIN in text else ""


def write_readme_table(recorded: dict) -> None:
    text = README.read_text()
    head, rest = text.split(BEGIN, 1)
    README.write_text(f"{head}{BEGIN}\n{table(recorded)}\n{END}{rest.split(END, 1)[1]}")
