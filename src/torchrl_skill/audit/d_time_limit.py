"""time-limit: is a time limit reported as ``terminated`` instead of ``truncated``?

On every collector batch and ``env.rollout`` output it follows each env row through time
(across a collector's successive batches) and records the length of every episode and how
it ended: ``("next", "terminated")`` or ``("next", "truncated")``. Fault: the longest
terminated length L is the length of most terminated episodes (at least 3) and no episode
was truncated: a step limit written as termination, so value targets treat step L as a
terminal state and never bootstrap it (pytorch/rl#1899 on terminated vs truncated;
TorchTrade/torchtrade#150 is the same fault in a TorchRL env).

Facts (torchrl 0.14.1): ``StepCounter(max_steps=N)`` ends episodes with ``truncated``; a
custom env that returns only ``done`` gets ``terminated`` equal to it. The row words cause and
fix as error-index entry ``time-limit-as-terminated`` does, and says how to decide: a limit is
a real termination only when the step count is in the observation (the state is Markov).
"""

from __future__ import annotations

from collections import Counter

from torchrl_skill.report import skill_report as sr

from .evidence import need

NAME = "time-limit"
MIN_EPISODES = 3


def install(hub) -> None:
    from .probe import user_site
    from .tdtools import ObjectKeys, next_flag, own_attr

    key_of = ObjectKeys()

    sec = hub.section(NAME)
    running: dict = {}
    wheres: dict = {}
    sites: dict = {}
    ended = {"terminated": Counter(), "truncated": Counter(), "done only": Counter()}

    def follow(key, td, fresh: bool, where=None):
        if td is None or td.batch_dims == 0:
            return
        if key not in wheres and where is not None:
            wheres[key] = where()
        term, trunc = next_flag(td, "terminated"), next_flag(td, "truncated")
        done = next_flag(td, "done")
        if term is None and done is not None:
            term = done & ~trunc if trunc is not None else done
        if term is None:
            return
        if trunc is None:
            trunc = term & False
        # done with neither flag: an end the value estimators bootstrap (a SerialEnv stores a
        # sub-env's done-only end with terminated False)
        other = (done & ~term & ~trunc) if done is not None else term & False
        term = term.reshape(-1, term.shape[-1]).tolist()
        trunc = trunc.reshape(-1, trunc.shape[-1]).tolist()
        other = other.reshape(-1, other.shape[-1]).tolist()
        lengths = [0] * len(term) if fresh or key not in running or len(running[key]) != len(term) else running[key]
        for r, (row_term, row_trunc, row_other) in enumerate(zip(term, trunc, other)):
            for t_end, tr_end, o_end in zip(row_term, row_trunc, row_other):
                lengths[r] += 1
                if t_end or tr_end or o_end:
                    ended["truncated" if tr_end else "terminated" if t_end else "done only"][lengths[r]] += 1
                    lengths[r] = 0
        running[key] = lengths

    def summarise():
        sec["terminated"] = {str(k): v for k, v in ended["terminated"].most_common(20)}
        sec["truncated"] = {str(k): v for k, v in ended["truncated"].most_common(20)}
        sec["n_terminated"] = sum(ended["terminated"].values())
        sec["n_truncated"] = sum(ended["truncated"].values())
        sec["n_done_only"] = sum(ended["done only"].values())
        sec["max_terminated"] = max(ended["terminated"], default=0)
        sec["sources"] = list(wheres.values())[:4]

    def where(kind, site, env):
        return lambda: {"kind": kind, "site": site, "env": _env_definition(env), "done_keys": _done_keys(env)}

    hub.on("collector_built", lambda col, site: sites.__setitem__(key_of(col), site))
    hub.on("collector_batch", lambda col, batch: follow(key_of(col), batch, False,
                                                        where(type(col).__name__, sites.get(key_of(col), "?"), own_attr(col, "env"))))
    hub.on("env_rollout", lambda env, policy, td: follow(("rollout", key_of(env)), td, True, where("env.rollout", user_site(), env)))
    hub.summariser(summarise)


def _done_keys(env) -> list[str] | None:
    """The leaf names of ``env.full_done_spec`` (``["done", "terminated"]`` for an EnvBase whose
    done_spec was never set), or None when unreadable. A collector keeps only the done entries
    its env's spec declares: a ``truncated`` that ``_step`` writes without a spec entry reaches
    ``env.rollout`` but not a Collector's batch (torchrl 0.14.1, measured)."""
    try:
        return sorted({k[-1] if isinstance(k, tuple) else k for k in env.full_done_spec.keys(True, True)})
    except Exception:  # no env, or a spec that cannot be read: said as unknown
        return None


def _env_definition(env) -> str | None:
    """``"Reach (defined at envs.py:12)"`` for the innermost env under ``env`` (through
    ``base_env`` and a batched env's first worker) when its class is not torchrl's, else None."""
    import inspect
    from pathlib import Path

    from .tdtools import own_attr

    for _ in range(10):
        inner = own_attr(env, "base_env")
        if inner is None:
            workers = own_attr(env, "_envs")
            inner = workers[0] if isinstance(workers, (list, tuple)) and workers else None
        if inner is None:
            break
        env = inner
    cls = type(env)
    if env is None or cls.__module__.startswith(("torchrl.", "gymnasium.", "gym.")):
        return None
    try:
        return f"{cls.__name__} (defined at {Path(inspect.getsourcefile(cls)).name}:{inspect.getsourcelines(cls)[1]})"
    except (OSError, TypeError):
        return None


def judge(observed: dict) -> str:
    from . import cause_and_fix

    sec = observed["sections"].get(NAME, {})
    n_term, n_trunc, n_other = sec.get("n_terminated", 0), sec.get("n_truncated", 0), sec.get("n_done_only", 0)
    if not sec.get("sources"):
        raise sr.CheckSkipped("no collected data (no collector batch, no env.rollout)")
    need(n_term + n_trunc + n_other, MIN_EPISODES, "collected data", "episode ends")
    src = sec["sources"][0]
    at = f" (collected by the {src['kind']} at {src['site']}" + (f"; env {src['env']}" if src.get("env") else "") + ")"
    longest = sec.get("max_terminated", 0)
    at_longest = sec.get("terminated", {}).get(str(longest), 0)
    if n_trunc == 0 and n_other == 0 and longest > 1 and at_longest >= 3 and at_longest >= 0.5 * n_term:
        raise sr.CheckFailed(
            f"{at_longest} of {n_term} episodes ended `terminated` at exactly step {longest} (none longer, none truncated){at}, "
            f"so value targets treat step {longest} as terminal and never bootstrap it; {cause_and_fix('time-limit-as-terminated', N=longest)}; in a custom env return truncated=True, terminated=False when "
            f"the limit is reached. To decide: truncated when the task could go on after step {longest} and the limit is only your "
            f"episode budget (the usual case); terminated is right only when the step count is part of the observation and reaching "
            f"step {longest} is a real end of the task (nothing follows it)"
        )
    keys = src.get("done_keys")
    undeclared = (f"; the env's done spec declares {', '.join(keys)} and no truncated, so a truncated flag its _step writes "
                  "is dropped from collector batches (env.rollout keeps it): to carry it, add truncated to its done_spec "
                  "(Composite(done=..., terminated=..., truncated=...))") if keys is not None and "truncated" not in keys else ""
    other = (f", {n_other} ended with done but neither terminated nor truncated: value estimators bootstrap them like truncations "
             f"(if they are real terminal states, return terminated=True beside done){undeclared}") if n_other else ""
    return f"{n_term} episodes terminated (longest {longest} steps), {n_trunc} truncated (lengths {', '.join(list(sec.get('truncated', {}))[:4]) or '-'}){other}"
