"""Check a user's TorchRL env and name the cause and fix of each fault found.

TARGET is path/to/file.py:NAME or package.module:NAME (found from the current folder):
NAME is a factory function or an EnvBase subclass, called with no arguments to get the env
(an EnvBase: TransformedEnv, SerialEnv, GymEnv count). No TARGET: the bundled known-good
example env. Checks, in order: a static scan of what runs at import time (worker
processes, a loop, a rollout, collection or training step outside `if __name__ == "__main__":`), building the env (and starting a ParallelEnv's workers), root spec shapes vs batch_size, a
gymnasium vector env in NEXT_STEP autoreset mode, the reset output (no reward, every
observation key, transforms applied, action masks that fit, no gymnasium MultiDiscrete action handed to
the gym env as one flat index), batched copies that share
one seed, check_env_specs, a rollout compared key by key with the specs under "next", a
batched input, same seed -> same rollout, env.set_seed leaving torch's global RNG alone,
terminated used as a time limit, the transforms named by --expect-transform, and no
transform rewriting a state key that the env's _step reads back. A failing check prints
[cause-id] (an entry of the troubleshooting page), the cause and the fix; a fault of the
reset output is reported as the root cause of the failures it triggers later. Each check
runs at most --timeout seconds.

Testing seams (used by the tests): EnvFault, diagnosed, diagnose, unguarded_process_starts, import_time_work,
gym_vector_autoreset, gym_flat_multidiscrete, transforms_skipping_reset, expected_mask_shape, global_rng_after_set_seed,
fixed_terminal_length, transform_state_changes, restored_step_gaps, CHECKS and the check_* functions."""

from __future__ import annotations

import contextlib

from torchrl_skill.runtime import user_code as uc  # noqa: E402
from torchrl_skill.report import skill_report as sr  # noqa: E402
from torchrl_skill.checks.envs.env_causes import ROOT_CAUSES, EnvFault, diagnose, diagnosed, fault_from  # noqa: E402,F401
from torchrl_skill.checks.envs.env_workers import start_workers, worker_envs  # noqa: E402
from torchrl_skill.checks.envs.env_probes import (  # noqa: E402,F401
    action_mask_mismatch, base_env, copies_identical, done_note, episodes_from_rollout, expected_mask_shape,
    fixed_terminal_length, global_rng_after_set_seed, gym_flat_multidiscrete, gym_vector_autoreset, root_spec_shapes, seeded_rollout, spec_of,
    PROCESS_STARTERS, step_against_specs, transform_chain, transforms_skipping_reset, unguarded_process_starts,
)
from torchrl_skill.checks.envs.import_scan import import_time_work  # noqa: E402
from torchrl_skill.checks.envs.transform_state import restored_step_gaps, rewritten_state, transform_state_changes  # noqa: E402,F401

DEFAULT_TARGET = f"{sr.BUNDLE_ROOT / 'sub-skills' / 'envs-and-transforms' / 'assets' / 'example_env.py'}:make_env"
EXAMPLE = (
    "python $SKILL_DIR/sub-skills/envs-and-transforms/scripts/check_user_env.py my_env.py:make_env "
    "--steps 5 --expect-transform ObservationNorm --json"
)


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("target", nargs="?", default=None,
                        help="path/to/file.py:NAME or package.module:NAME, NAME a no-argument factory or EnvBase subclass "
                             "(default: the bundled example env)")
    parser.add_argument("--steps", type=sr.int_at_least(1), default=5, help="rollout length (default: 5)")
    parser.add_argument("--time-limit-steps", type=sr.int_at_least(4), default=300, metavar="N",
                        help="rollout length of the time-limit check; give more than twice the env's step limit (default: 300)")
    parser.add_argument("--expect-transform", action="append", default=[], metavar="NAME",
                        help="a transform class the env must carry, e.g. ObservationNorm (repeatable)")
    sr.add_timeout_flag(parser)
    return parser


def _close(env) -> None:
    with contextlib.suppress(Exception):  # closing a half-built env must not hide the diagnosis
        if not env.is_closed:
            env.close()


def check_static(target):
    """Scan the target's source for what runs when it is imported, without importing it:
    worker processes started at module level (``missing-main-guard``), and any loop,
    rollout, collection or training step there or in a function of the file called there
    (``_import_scan.import_time_work``): importing the file would run it before any check,
    and once more in every spawn worker."""
    if target.path is None:
        return sr.Passed(f"{target.module} has no .py source to scan; importing it unchecked", True)
    work, scanned = import_time_work(uc.read_source(target.path), PROCESS_STARTERS)
    sr.evidence(scanned, "module-level statements scanned")
    starts = [(line, what) for line, what in work if what.endswith("(starts worker processes)")]
    if starts:
        where = ", ".join(f"{target.path.name}:{line} {what.split(' (')[0]}" for line, what in starts)
        raise EnvFault("missing-main-guard", f"{where} runs at import time; the file was not imported")
    if work:
        where = "; ".join(f"{target.path.name}:{line} {what}" for line, what in work[:3])
        raise sr.CheckFailed(
            f"{where} runs at import time: importing the file to reach {target.attr} would run it before any check "
            "(and again in every spawn worker of a ParallelEnv or multi-process collector); the file was not imported; "
            'fix: move the script part under if __name__ == "__main__": and keep the env factory a module-level function')
    return sr.Passed(f"{target.path.name}: {scanned} module-level statements, none starts a process, loops, "
                     "rolls out, collects or trains at import time", True)


def check_build(target, guarded, cleanup):
    """Import the target (exit 2 when that fails), call the factory, and start the workers of
    a ParallelEnv (a worker that cannot import user code fails here as a loading problem).
    ``guarded``: the static scan passed, so importing cannot start workers."""
    from torchrl.envs import EnvBase

    factory = uc.load_attr(target)
    try:
        env = uc.call_user(factory, f"{target.label}()") if callable(factory) else factory
    except (sr.CheckFailed, uc.TimeLimitExceeded):
        raise
    except Exception as err:
        raise fault_from(err, f"{target.label}()") from None
    if isinstance(env, EnvBase):
        cleanup.callback(_close, env)
    sr.expect(isinstance(env, EnvBase), f"{target.label}() returned {type(env).__name__}, not a torchrl EnvBase")
    problem = start_workers(env)  # a worker that cannot import user code is named here, not blamed on the env later
    if problem:
        raise sr.CheckFailed(problem)
    started = sum(penv.num_workers for penv in worker_envs(env))
    sr.evidence(1, "envs built")
    workers = f"; its {started} worker processes started and built their envs" if started else ""
    return sr.Passed(f"{target.label} -> {type(env).__name__}, batch_size {list(env.batch_size)}{workers}", env)


@diagnosed
def check_root_shapes(env):
    bad = root_spec_shapes(env)
    sr.evidence(5 * env.batch_size.numel(), "root Composite specs compared, times env copies")
    if bad:
        raise EnvFault("root-composite-feature-shaped", "; ".join(bad))
    return f"root Composite specs (observation, state, action, reward, done) all shaped {list(env.batch_size)} = env.batch_size"


@diagnosed
def check_gym_autoreset(env):
    mode = gym_vector_autoreset(env)
    if mode is None:
        raise sr.CheckSkipped("not a GymEnv/GymWrapper over a gymnasium VectorEnv")
    if mode == "NEXT_STEP":
        raise EnvFault("gym-vector-next-step-autoreset", "the wrapped VectorEnv has autoreset_mode=NEXT_STEP")
    sr.evidence(1, "vector envs read")
    return f"gymnasium VectorEnv autoreset_mode={mode} (SAME_STEP/DISABLED are handled by torchrl)"


@diagnosed
def check_reset(env):
    """env.reset(): no reward, every declared observation key, every transform applied."""
    try:
        td = env.reset()
    except uc.TimeLimitExceeded:
        raise
    except Exception as err:
        mask = action_mask_mismatch(env)
        if mask:
            raise EnvFault("action-mask-mismatch", f"{sr.first_line(err)}; {mask}", raised_by="env.reset()") from None
        raise fault_from(err, "env.reset()") from None
    keys = set(td.keys(True, True))
    rewards = [k for k in env.reward_keys if k in keys]
    if rewards:
        raise EnvFault("reward-emitted-from-reset", f"env.reset() output holds {rewards}")
    mask = action_mask_mismatch(env)
    if mask:  # reset may pass; sampling an action then raises (split_with_sizes for MultiCategorical)
        raise EnvFault("action-mask-mismatch", mask)
    flat = gym_flat_multidiscrete(env)
    if flat:  # no error anywhere: the gym env gets a flat index for a [row, col] action
        raise EnvFault("gym-multidiscrete-flat-action", flat)
    skipping = transforms_skipping_reset(env, td)
    if skipping:
        seen = "; ".join(f"{name} changes {changed} at step, not in the reset output" for name, changed in skipping)
        raise EnvFault("transform-skips-reset", seen)
    missing = [str(k) for k in env.full_observation_spec.keys(True, True) if k not in keys]
    if missing:
        raise EnvFault("key-missing-from-reset", f"env.reset() output lacks {missing}, declared in env.full_observation_spec")
    sr.expect(td.batch_size == env.batch_size, f"reset output batch {list(td.batch_size)} != env.batch_size {list(env.batch_size)}")
    sr.evidence(td.batch_size.numel() and len(keys), "reset output keys over a non-empty batch")
    detail = f"reset returned {len(keys)} keys (every observation key), batch {list(td.batch_size)}, no reward, done flags False"
    return sr.Passed(detail, td.clone())


def reset_root_cause(env) -> EnvFault | None:
    """The root-cause fault of the reset output (one of ROOT_CAUSES), or None."""
    try:
        check_reset(env=env)
    except uc.TimeLimitExceeded:
        raise
    except EnvFault as fault:
        return fault if fault.cause_id in ROOT_CAUSES else None
    except Exception:
        return None
    return None


follows_reset = diagnosed(root_of=reset_root_cause)


@diagnosed
def check_batched_seeds(env, reset):
    """Copies of a batched env must not all start from one state when resets are random."""
    import torch

    if not env.batch_size:
        raise sr.CheckSkipped("env.batch_size is (): one env, no copies to compare")
    keys = [k for k in env.full_observation_spec.keys(True, True) if isinstance(reset.get(k, None), torch.Tensor)]
    if not keys:
        raise sr.CheckSkipped("the reset output holds no observation tensor to compare")
    n = env.batch_size[0]
    if not copies_identical(reset, keys):
        sr.evidence(n if n > 1 else 0, "batched copies whose start states were compared")
        return f"the {n} copies along batch dim 0 start from different states"
    again = env.reset().clone()
    if all(torch.equal(reset.get(k), again.get(k)) for k in keys):
        sr.evidence(0, "copies with random starts")  # deterministic starts: nothing shows whether seeds differ
        return f"every reset returns the same state in all {n} copies (a deterministic start); nothing to tell apart"
    env.set_seed(0)
    seeded = env.reset()
    after = "still identical after env.set_seed(0): _set_seed ignores its seed" if copies_identical(seeded, keys) else (
        "env.set_seed(0) sets them apart, so nothing else does"
    )
    raise EnvFault("batched-envs-share-seed", f"the first env.reset() of all {n} copies returned identical {keys} "
                   f"while the next reset differs (one random stream per copy, all seeded alike); {after}")


@follows_reset
def check_specs(env):
    from torchrl.envs.utils import check_env_specs

    try:
        check_env_specs(env, seed=0)
    except uc.TimeLimitExceeded:
        raise
    except Exception as err:
        raise fault_from(err, "check_env_specs(env, seed=0)") from None
    sr.evidence((len(list(env.full_observation_spec.keys(True, True))) + len(env.reward_keys) + len(env.done_keys))
                * env.batch_size.numel(), "spec leaves times env copies")
    return "check_env_specs(env, seed=0) passed"


@follows_reset
def check_rollout(env, steps):
    """A random rollout: every spec key under "next", with the spec's dtype, shape and bounds."""
    import torch
    from tensordict import LazyStackedTensorDict

    try:
        first = env.rand_step(env.reset())
        td = env.rollout(steps, break_when_any_done=False)
    except uc.TimeLimitExceeded:
        raise
    except Exception as err:
        raise fault_from(err, f"env.rand_step(env.reset()) / env.rollout({steps})") from None
    if isinstance(td, LazyStackedTensorDict):
        td_keys = set(td.keys(True, True))
        exclusive = set().union(*(set(sub.keys(True, True)) ^ td_keys for sub in td.tensordicts))
        if any(k in env.reward_keys for k in exclusive):
            raise EnvFault("reward-emitted-from-reset", f"rollout is a lazy stack with exclusive keys {sorted(map(str, exclusive))}")
    first_keys = set(first.keys(True, True))
    n_leaves, missing, problems = step_against_specs(env, first)
    if missing:
        raise EnvFault("key-missing-under-next", f"env.step output lacks {missing}")
    if problems:
        raise EnvFault("value-outside-spec", "; ".join(problems))
    t_dim = len(env.batch_size)
    outside = []
    for key in td.keys(True, True):
        spec = spec_of(env, key[1:] if len(key) > 2 else key[1]) if key[0] == "next" and key in first_keys else None
        value = td.get(key) if spec is not None else None
        if spec is not None and not all(spec.is_in(value.select(t_dim, t)) for t in range(value.shape[t_dim])):
            outside.append(key)
    if outside:
        raise EnvFault("value-outside-spec", f"rollout values outside the spec for {outside}")
    sr.expect(td.batch_size == torch.Size([*env.batch_size, steps]), f"rollout batch {list(td.batch_size)}")
    sr.evidence(td.batch_size.numel() and n_leaves, "spec leaves checked over a non-empty rollout")
    return f"rollout batch {list(td.batch_size)}: {n_leaves} spec keys present under 'next', dtype/shape/bounds in spec; {done_note(env, td, steps)}"


def _step_batched(env) -> str:
    """Give ``env`` a tensordict with one extra leading dim of 2 and classify the outcome."""
    import torch

    td = env.reset()
    batched = torch.stack([td, td.clone()], 0).contiguous()
    batched.update(torch.stack([env.full_action_spec.rand(), env.full_action_spec.rand()], 0))
    try:
        out = env.step(batched)
    except uc.TimeLimitExceeded:
        raise
    except Exception as err:
        if env.batch_locked and diagnose(f"{type(err).__name__}: {err}") == "batched-tensordict-to-unbatched-env":
            sr.evidence(env.batch_size.numel(), "env copies whose batched step was rejected")
            return (f"batch-locked env (batch_size {list(env.batch_size)}) rejects a [2, ...] tensordict with "
                    "'Expected a tensordict with shape==env.batch_size' (step one env.batch_size at a time)")
        raise EnvFault("batched-tensordict-to-unbatched-env", f"env.batch_locked={env.batch_locked}; env.step on a "
                       f"[2, ...] tensordict raised {sr.first_line(err, 200)}") from None
    sr.expect(not env.batch_locked, f"batch-locked env accepted a tensordict of batch {list(batched.batch_size)}")
    sr.evidence(out.batch_size.numel(), "batched steps")
    sr.expect(out.batch_size[:1] == torch.Size([2]), f"batched step returned batch {list(out.batch_size)}")
    return f"batch_locked=False env stepped a [2, ...] tensordict -> batch {list(out.batch_size)}"


@follows_reset
def check_batched_input(env):
    """A [2, ...] tensordict: rejected by a batch-locked env, handled by a batch_locked=False one.
    When only the transforms fail on it (e.g. StepCounter over PendulumEnv on torchrl 0.14.1),
    the env itself is sound: the TransformedEnv must be stepped at env.batch_size."""
    try:
        return _step_batched(env)
    except EnvFault:
        base = base_env(env)
        if base is env:
            raise
        detail = _step_batched(base)  # a fault of the base env itself is raised as such
        return (f"base env: {detail}; its transforms do not take a [2, ...] tensordict, so step the TransformedEnv "
                f"with tensordicts of shape env.batch_size {list(env.batch_size)}")


@follows_reset
def check_seed(env, steps):
    import torch

    a, b = seeded_rollout(env, 0, steps), seeded_rollout(env, 0, steps)
    sr.expect(bool(a), "the rollout holds none of the spec'd observation, reward or done keys under 'next'")
    sr.evidence(sum(x.numel() for x in a), "rollout values compared")
    if not all(torch.equal(x, y) for x, y in zip(a, b)):
        base = base_env(env)
        if base is env or not all(torch.equal(x, y) for x, y in zip(seeded_rollout(base, 0, steps), seeded_rollout(base, 0, steps))):
            raise EnvFault("env-rng-not-seeded", "two rollouts after env.set_seed(0) and torch.manual_seed(0) differ")
        return (f"the base env {type(base).__name__} gives identical rollouts after set_seed(0); the transformed ones differ "
                "because a transform keeps state across rollouts (running statistics such as VecNorm's)")
    c = seeded_rollout(env, 1, steps)
    differs = not all(torch.equal(x, y) for x, y in zip(a, c))
    note = "seeds 0 and 1 give different rollouts" if differs else (
        "seeds 0 and 1 give identical observations (deterministic env, or _set_seed ignores the seed)")
    return f"set_seed(0) twice -> identical rollouts; {note}"


@follows_reset
def check_global_rng(env):
    seed = 7
    reseeded, equals_manual, changed = global_rng_after_set_seed(env, seed)
    if reseeded:
        how = (f"after env.set_seed({seed}) torch's global RNG is in exactly the state torch.manual_seed({seed}) gives"
               if equals_manual else
               f"after env.set_seed({seed}) torch's global RNG is in the same state whatever it was before")
        raise EnvFault("env-reseeds-global-rng", how)
    sr.evidence(1, "set_seed calls observed")
    if changed:
        return (f"env.set_seed({seed}) draws from torch's global RNG but does not re-seed it; "
                "the env's randomness follows torch.manual_seed")
    return f"env.set_seed({seed}) leaves torch's global RNG untouched (the env seeds only its own RNGs)"


@follows_reset
def check_time_limit(env, time_limit_steps):
    """Roll out ``time_limit_steps`` random steps; fail when terminated acts as a step limit."""
    import torch

    steps = time_limit_steps
    torch.manual_seed(0)
    env.set_seed(0)
    episodes = episodes_from_rollout(env.rollout(steps, break_when_any_done=False))
    has_truncated = any((k[-1] if isinstance(k, tuple) else k) == "truncated" for k in env.done_keys)
    limit = fixed_terminal_length(episodes)
    if limit is not None:
        n_at = sum(1 for length, term, _ in episodes if length == limit and term)
        note = "the env has a truncated key, yet terminated is set at the limit too" if has_truncated else "the env has no truncated key"
        raise EnvFault("time-limit-as-terminated", f"in env.rollout({steps}, break_when_any_done=False) with random actions, "
                       f"{n_at} of {len(episodes)} whole episodes ended with terminated=True at exactly step {limit} and "
                       f"none ran longer; {note}")
    sr.evidence(len(episodes) if len(episodes) >= 2 else 0, "whole episodes (2 needed to compare lengths)")
    if len(episodes) < 2:
        if has_truncated:
            return f"env declares truncated; {len(episodes)} whole episode(s) in {steps} random steps, too few to test terminated"
        raise sr.CheckSkipped(f"only {len(episodes)} whole episode(s) in {steps} random steps and no truncated key: cannot tell "
                              "whether terminated is a time limit; pass --time-limit-steps N with N over twice the episode limit")
    lengths = sorted({length for length, _, _ in episodes})
    return (f"{len(episodes)} whole episodes in {steps} random steps, lengths {lengths[:8]}{' ...' if len(lengths) > 8 else ''}: "
            f"terminated does not fire at one fixed step count; truncated key {'present' if has_truncated else 'absent'}")


@follows_reset
def check_transforms(env, expected_transforms):
    names = [type(t).__name__ for t in transform_chain(env)]
    missing = [n for n in expected_transforms if n not in names]
    sr.evidence(len(expected_transforms), "transforms named by --expect-transform")
    if missing:
        raise EnvFault("transform-not-attached", f"expected transform(s) {missing} are not attached; attached: {names or 'none'}")
    if not names:
        return f"no transforms attached ({type(env).__name__}); pass --expect-transform NAME to require one"
    return f"transforms attached in order: {names}"


@follows_reset
def check_transform_state(env):
    """No transform may rewrite, in place, a state key that the base env's _step reads back:
    measured by stepping the base env from the state it returned and from the rewritten one."""
    base = base_env(env)
    if base is env:
        raise sr.CheckSkipped("not a TransformedEnv: no transform stands between the env's output and its next step"
                              + (" (transforms inside the sub-envs of a batched env are not probed)" if env.batch_size else ""))
    changed, finding, name = *rewritten_state(env), type(base).__name__
    if finding:
        shown = ", ".join(f"{k!r} by {v:.3g}" for k, v in sorted(finding["gaps"].items(), key=lambda kv: -kv[1])[:3])
        raise EnvFault("transform-overwrites-env-state", f"{', '.join(finding['writers']) or 'a transform'} rewrote {finding['read']} "
                       f"and {name}._step reads them back: one step from the state it returned vs the rewritten one differs in {shown}")
    return (f"the transforms rewrite {changed}; {name}._step from the state it returned gives the same step (it does not read them)"
            if changed else f"{name}._step gets its state keys back as it returned them (no transform rewrites them, or _inv_call undoes it)")


CHECKS = [
    sr.Check("target:static-main-guard", check_static, gives="guarded",
             proves="nothing that runs on import starts a process, loops, rolls out, collects or trains"),
    sr.Check("target:build", check_build, gives="env", proves="the factory builds a torchrl EnvBase (and its workers start)"),
    sr.Check("env:root-spec-shapes", check_root_shapes, proves="every root Composite spec is shaped env.batch_size"),
    sr.Check("env:gym-vector-autoreset", check_gym_autoreset, proves="a wrapped gymnasium VectorEnv autoresets in a mode torchrl handles"),
    sr.Check("env:reset-output", check_reset, gives="reset",
             proves="env.reset() returns every observation key, no reward, transforms applied, on env.batch_size"),
    sr.Check("env:batched-seeds", check_batched_seeds, proves="the copies of a batched env start from different random states"),
    sr.Check("env:check_env_specs", check_specs, proves="check_env_specs(env, seed=0) passes over the spec leaves"),
    sr.Check("env:rollout-next-keys-in-spec", check_rollout, proves="every spec leaf is under 'next' of a rollout, with the spec's dtype, shape and bounds"),
    sr.Check("env:batched-input", check_batched_input, proves="a [2, ...] tensordict is stepped or rejected as batch_locked says"),
    sr.Check("env:seed-reproducible", check_seed, proves="two rollouts after set_seed(0) are identical"),
    sr.Check("env:seed-global-rng", check_global_rng, proves="env.set_seed leaves torch's global RNG unseeded"),
    sr.Check("env:time-limit-as-truncation", check_time_limit, proves="terminated does not end episodes at one fixed step count"),
    sr.Check("env:transforms", check_transforms, proves="every transform named by --expect-transform is attached"),
    sr.Check("env:transform-keeps-env-state", check_transform_state,
             proves="no transform rewrites a state key the base env's _step reads back"),
]


def run_checks(args, report: sr.Report) -> None:
    target = uc.parse_target(args.target or DEFAULT_TARGET, form="path/to/file.py:factory")
    with contextlib.ExitStack() as cleanup:
        sr.run_declared(CHECKS, report, args=args, target=target, cleanup=cleanup, steps=args.steps,
                        time_limit_steps=args.time_limit_steps, expected_transforms=args.expect_transform)


def main(argv=None) -> int:
    return sr.standard_main(__file__, build_parser, run_checks, argv)
