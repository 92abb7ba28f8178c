"""Roll out a TorchRL env with common transforms and verify what each transform writes.

Default: the native PendulumEnv (no extra dependency) inside TransformedEnv with
StepCounter, RewardSum, InitTracker and DoubleToFloat; a rollout of --steps steps is
checked key by key (step_count 1..N, episode_reward = running sum of reward, is_init True
only at step 0, every spec key under "next"). --env gym:<ID> runs a gymnasium env through
GymEnv instead; --batched serial|parallel runs --num-envs copies in SerialEnv or
ParallelEnv (worker processes, spawn) and checks that each copy got its own seed;
--check-specs also runs check_env_specs on each env built.
"""

from __future__ import annotations

import contextlib
import functools

from torchrl_skill.report import skill_report as sr  # noqa: E402

EXAMPLE = (
    "python $SKILL_DIR/sub-skills/envs-and-transforms/scripts/smoke_env_rollout.py --env gym:CartPole-v1 "
    "--batched parallel --num-envs 2 --steps 8 --check-specs --json"
)


def _env_choice(text: str) -> str:
    if text == "pendulum" or (text.startswith("gym:") and len(text) > 4):
        return text
    raise ValueError(text)


_env_choice.__name__ = "env (pendulum or gym:<ID>)"


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("--env", type=_env_choice, default="pendulum", help="pendulum (default) or gym:<ID>, e.g. gym:Pendulum-v1")
    parser.add_argument("--steps", type=sr.int_at_least(1), default=10, help="rollout length (default: 10)")
    parser.add_argument("--check-specs", action="store_true", help="also run check_env_specs on every env built")
    parser.add_argument(
        "--batched",
        choices=["serial", "parallel"],
        default=None,
        help="also run --num-envs copies in SerialEnv (same process) or ParallelEnv (worker processes)",
    )
    parser.add_argument("--num-envs", type=sr.int_at_least(1), default=2, help="copies for --batched (default: 2)")
    return parser


def make_base_env(env_id: str):
    """Module-level (picklable by reference) factory of the untransformed env.

    ``env_id``: ``"pendulum"`` -> ``torchrl.envs.PendulumEnv()``; ``"gym:<ID>"`` ->
    ``torchrl.envs.GymEnv(ID)`` (gymnasium). Source: torchrl 0.14.1 torchrl/envs/__init__.py.
    """
    if env_id == "pendulum":
        from torchrl.envs import PendulumEnv

        return PendulumEnv()
    from torchrl.envs import GymEnv

    return GymEnv(env_id.split(":", 1)[1])


def add_transforms(env):
    """Wrap ``env`` in TransformedEnv(Compose(...)); returns the transformed env.

    Writes: ``step_count`` ([*B, 1], int64), ``episode_reward`` ([*B, 1], running sum of
    ``reward``), ``is_init`` ([*B, 1], bool, True right after reset); DoubleToFloat casts
    float64 observations (gymnasium Box(float64) spaces) to float32.
    """
    from torchrl.envs import Compose, DoubleToFloat, InitTracker, RewardSum, StepCounter, TransformedEnv

    return TransformedEnv(env, Compose(DoubleToFloat(), StepCounter(), RewardSum(), InitTracker()))


def random_actions(env):
    """``RandomPolicy(env.action_spec)``: a uniform draw from the action spec at each step,
    as ``env.rollout(n)`` without a policy makes. Why not that default: it samples the root
    ``Composite`` (``EnvBase.rand_action``), whose ``rand`` builds its output with
    ``TensorDict.from_dict``, and that imports pandas on first use when pandas is
    installed (tensordict 0.14.3 ``TensorDictBase.from_any``), about 0.5 s of the run
    spent on nothing a transform does. A leaf spec's ``rand`` returns a tensor directly.
    """
    from torchrl.envs.utils import RandomPolicy

    return RandomPolicy(env.action_spec)


def verify_rollout(env, td, steps: int) -> str:
    """Check a rollout ``td`` of batch [*env.batch_size, steps] key by key (see module doc)."""
    import torch

    bs = tuple(env.batch_size)
    sr.expect(td.batch_size == torch.Size([*bs, steps]), f"rollout batch {list(td.batch_size)}, expected {[*bs, steps]}")
    keys = set(td.keys(True, True))
    need = [("next", *k) if isinstance(k, tuple) else ("next", k) for k in env.full_observation_spec.keys(True, True)]
    need += [("next", k) if isinstance(k, str) else ("next", *k) for k in env.reward_keys + env.done_keys]
    missing = [k for k in need if k not in keys]
    sr.expect(not missing, f"rollout lacks {missing} (every observation/reward/done key must be under 'next')")
    done = td["next", "done"]
    sr.expect(not done[..., :-1, :].any(), "an episode ended before the last step; use a longer horizon env or fewer --steps")
    count = td["next", "step_count"].squeeze(-1)
    want = torch.arange(1, steps + 1).expand_as(count)
    sr.expect(torch.equal(count, want), f"StepCounter wrote {count.tolist()}, expected 1..{steps}")
    reward = td["next", "reward"]
    sr.expect(
        torch.allclose(td["next", "episode_reward"], reward.cumsum(-2), atol=1e-4),
        "RewardSum episode_reward is not the running sum of reward",
    )
    init = td["is_init"].squeeze(-1)
    sr.expect(bool(init[..., 0].all()) and not bool(init[..., 1:].any()), f"InitTracker is_init {init.tolist()}, expected True at step 0 only")
    floats = [k for k in keys if td.get(k).dtype == torch.float64]
    sr.expect(not floats, f"float64 entries remain after DoubleToFloat: {floats}")
    sr.evidence(td.batch_size.numel(), "rollout steps checked")
    return (
        f"rollout {list(td.batch_size)}: {len(need)} keys under 'next', step_count 1..{steps}, "
        f"episode_reward = cumsum(reward), is_init only at step 0, no float64"
    )


def check_gym_backend(args) -> str:
    if not args.env.startswith("gym:"):
        raise sr.CheckSkipped("not asked for (pass --env gym:<ID>)")
    return sr.optional_backend("gymnasium", "gymnasium", "pip install gymnasium")


def check_single(args, cleanup):
    """The transformed env alone, rolled out for --steps steps and checked key by key."""
    import torch

    if args.env.startswith("gym:"):
        sr.optional_backend("gymnasium", "gymnasium", "pip install gymnasium")
    torch.manual_seed(0)
    env = add_transforms(make_base_env(args.env))
    cleanup.callback(env.close, raise_if_closed=False)
    env.set_seed(0)
    td = env.rollout(args.steps, random_actions(env))
    return sr.Passed(f"{args.env}: " + verify_rollout(env, td, args.steps), env)


def check_specs(env) -> str:
    from torchrl.envs.utils import check_env_specs

    check_env_specs(env, seed=0)
    sr.evidence((len(list(env.full_observation_spec.keys(True, True))) + len(env.reward_keys) + len(env.done_keys))
                * env.batch_size.numel(), "spec leaves times env copies")
    return f"check_env_specs passed on {type(env).__name__} batch {list(env.batch_size)}"


def check_batched(args, env, cleanup):
    """SerialEnv/ParallelEnv of --num-envs transformed copies; each copy seeded differently.
    ``env``: the single env passed, so the copies are worth building."""
    import torch
    from torchrl.envs import ParallelEnv, SerialEnv

    factory = functools.partial(make_base_env, args.env)
    cls = SerialEnv if args.batched == "serial" else ParallelEnv
    kwargs = {} if cls is SerialEnv else {"mp_start_method": "spawn"}
    batched = add_transforms(cls(args.num_envs, factory, **kwargs))
    cleanup.callback(batched.close, raise_if_closed=False)
    torch.manual_seed(0)
    batched.set_seed(0)
    td = batched.rollout(args.steps, random_actions(batched))
    detail = verify_rollout(batched, td, args.steps)
    if args.num_envs > 1:
        obs_key = next(iter(batched.full_observation_spec.keys(True, True)))
        first = td[..., 0].get(obs_key)
        sr.expect(
            not all(torch.equal(first[0], first[i]) for i in range(1, args.num_envs)),
            f"all {args.num_envs} copies start from the same {obs_key!r}: set_seed did not give each worker its own seed",
        )
    return sr.Passed(f"{cls.__name__}({args.num_envs}) " + detail + "; copies start from different states", batched)


def check_batched_specs(batched_env) -> str:
    return check_specs(batched_env)


CHECKS = [
    sr.Check("backend:gymnasium", check_gym_backend, proves="gymnasium is importable"),
    sr.Check("rollout:transformed", check_single, gives="env",
             proves="every rollout step has its keys under 'next', step_count, episode_reward and is_init as the transforms define"),
    sr.Check("specs:check_env_specs", check_specs, flag="check_specs", proves="check_env_specs passes over the spec leaves"),
    sr.Check("batched:rollout", check_batched, flag="batched", gives="batched_env",
             proves="a batched env's rollout steps hold the same keys and values, and its copies start apart"),
    sr.Check("specs:check_env_specs-batched", check_batched_specs, flag="check_specs",
             proves="check_env_specs passes over the batched env's spec leaves"),
]


def run_checks(args, report: sr.Report) -> None:
    with contextlib.ExitStack() as cleanup:
        sr.run_declared(CHECKS, report, args=args, cleanup=cleanup)


def main(argv=None) -> int:
    return sr.standard_main(__file__, build_parser, run_checks, argv)
