"""env-actions: does the env that runs the task receive the actions the policy chose?

An effect monitor: it names the fault by what reaches the env, whatever the cause. At each
step of a base env (boundary.py: after the wrapper's action conversion, e.g. the int a
``GymEnv`` hands gymnasium's ``step``) it records what the env received and, for a discrete
action spec, which sampled action (the tensor the conversion read) became which received
value. Steps under a deterministic exploration type (evaluation rollouts) are counted apart
and not judged for variety.

Faults:
- encoding mismatch: two different sampled actions reached the env as the same value (the
  conversion loses the policy's choice). torchrl 0.14.1: ``GymEnv("CartPole-v1")`` has a
  ``OneHot`` action spec by default; a ``ProbabilisticActor`` with
  ``torch.distributions.Categorical`` writes an integer index, and ``OneHot.to_numpy`` takes
  ``argmax(-1)`` of it, 0 for every index, so gymnasium receives action 0 at every step
  (tests/test_audit_effects.py reproduces it);
- the received action never varies: MIN_STEPS or more stochastic-policy steps, one value.

Minimum evidence: MIN_STEPS received actions (not under a deterministic exploration type)
for the variety verdict, MIN_PAIRS sampled/received pairs with at least two distinct sampled
actions for the encoding verdict; fewer: SKIP with the count seen. Worker processes'
steps are merged in (``merge_workers``) where they are instrumented.
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

from . import evidence

NAME = "env-actions"
MIN_STEPS = 100  # received actions before "never varies" is judged
MIN_PAIRS = 20  # sampled/received pairs before the encoding is judged
KEEP = 16  # distinct values kept per env (2 are enough to show variety)
MAX_PAIRS = 500  # sampled/received pairs checked per env; later steps are only counted


def _label(env) -> str:
    from .tdtools import own_attr

    inner = own_attr(env, "_env")
    spec_id = getattr(getattr(inner, "spec", None), "id", None) if inner is not None else None
    return f"{type(env).__name__}({spec_id})" if spec_id else type(env).__name__


def _spec_text(spec) -> str:
    n = getattr(getattr(spec, "space", None), "n", None)
    shape = tuple(spec.shape)
    return f"{type(spec).__name__}(n={n}, shape={shape})" if n is not None else f"{type(spec).__name__}(shape={shape})"


def _rows(x, n_rows: int) -> list[str]:
    """``x`` (tensor, numpy array or number) as ``n_rows`` short text keys, one per env row."""
    import numpy as np
    import torch

    arr = x.detach().cpu().numpy() if torch.is_tensor(x) else np.asarray(x)
    flat = arr.reshape(-1)
    if n_rows < 1 or flat.size % n_rows:
        n_rows = 1
    per = flat.reshape(n_rows, -1)[:, :8]
    return [",".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in row.tolist()) for row in per]


def install(hub) -> None:
    from . import boundary
    from .tdtools import ObjectKeys

    boundary.install(hub)
    sec = hub.section(NAME)
    key_of = ObjectKeys()
    envs: dict = {}

    def on_action(env, sampled, received, deterministic):
        info = envs.get(key_of(env))
        if info is None:
            spec = env.action_spec
            discrete = getattr(spec, "domain", "") == "discrete"
            n = getattr(getattr(spec, "space", None), "n", None)
            info = envs[key_of(env)] = {"label": _label(env), "spec": _spec_text(spec), "discrete": discrete,
                                        "choices": int(n) if n is not None else None, "steps": 0, "det_steps": 0,
                                        "received": [], "pairs": {}, "sampled_shape": None, "processes": 1}
        n_rows = int(env.batch_size.numel()) if len(env.batch_size) else 1
        if deterministic:
            info["det_steps"] += n_rows
            return
        info["steps"] += n_rows
        if info["sampled_shape"] is None and hasattr(sampled, "shape"):
            info["sampled_shape"] = f"{tuple(sampled.shape)} {str(getattr(sampled, 'dtype', '')).replace('torch.', '')}"
        if len(info["received"]) >= 2 and (not info["discrete"] or info.get("n_pairs", 0) >= MAX_PAIRS):
            return  # variety shown and the mapping sampled enough: count only
        got = _rows(received, n_rows)
        for value in got:
            if value not in info["received"] and len(info["received"]) < KEEP:
                info["received"].append(value)
        if info["discrete"]:
            for s, r in zip(_rows(sampled, n_rows), got):
                seen = info["pairs"].setdefault(r, [])
                if s not in seen and len(seen) < KEEP:
                    seen.append(s)
            info["n_pairs"] = info.get("n_pairs", 0) + len(got)

    def summarise():  # one record per env label and spec (the sub-envs of a SerialEnv are one)
        sec["envs"] = _join([list(envs.values())])

    hub.on("base_action", on_action)
    hub.summariser(summarise)


def _join(groups: list[list[dict]]) -> list[dict]:
    """One record per env label and action spec: steps summed, received values and
    sampled/received pairs joined; ``processes``: in how many groups (one per process) it was seen."""
    out: dict = {}
    for group in groups:
        for key in {(e["label"], e["spec"]) for e in group}:
            if key in out:
                out[key]["processes"] += 1
        for e in group:
            key = (e["label"], e["spec"])
            cur = out.get(key)
            if cur is None:
                out[key] = {**e, "received": list(e["received"]), "pairs": {k: list(v) for k, v in e["pairs"].items()}, "processes": 1}
                continue
            for k in ("steps", "det_steps", "n_pairs"):
                cur[k] = cur.get(k, 0) + e.get(k, 0)
            cur["received"] += [v for v in e["received"] if v not in cur["received"]][:KEEP]
            for r, ss in e["pairs"].items():
                cur["pairs"].setdefault(r, []).extend(s for s in ss if s not in cur["pairs"][r])
    return list(out.values())


def merge_workers(main: dict, workers: list[dict]) -> dict:
    """The main process's records joined with the instrumented workers' (workers.py)."""
    return {**main, "envs": _join([main.get("envs", []), *[w.get("envs", []) for w in workers]])}


def judge(observed: dict) -> str:
    envs = observed["sections"].get(NAME, {}).get("envs", [])
    if not envs:
        raise sr.CheckSkipped("no base env step was seen (no env stepped in an instrumented process)")
    faults, notes, short = [], [], []
    for e in envs:
        where = f"{e['label']} with action spec {e['spec']}"
        procs = f" in {e['processes']} processes" if e.get("processes", 1) > 1 else ""
        merged = [(r, ss) for r, ss in e["pairs"].items() if len(ss) > 1]
        if e["discrete"] and merged:
            r, ss = merged[0]
            faults.append(
                f"{where}: the sampled actions {' and '.join(f'[{s}]' for s in ss[:3])} (as the policy wrote them: {e['sampled_shape']}) all "
                f"reached the env as {r}, so the env did not take the action the policy chose ({e.get('n_pairs', 0)} steps checked{procs}); "
                f"the action's encoding does not match the spec: for a OneHot spec use a one-hot distribution "
                f"(ProbabilisticActor(..., distribution_class=OneHotCategorical)), or keep Categorical and build the env with "
                f"categorical_action_encoding=True (GymEnv(name, categorical_action_encoding=True)) so its spec is Categorical")
            continue
        trivial = (e["choices"] is not None and e["choices"] < 2)
        if e["steps"] < MIN_STEPS or trivial:
            short.append(f"{where}: {e['steps']} received actions{procs}" + (" (a single possible action)" if trivial else f", fewer than {MIN_STEPS}"))
            continue
        if len(e["received"]) == 1:
            faults.append(f"{where} received the same action [{e['received'][0]}] at all {e['steps']} steps{procs} (not counting "
                          f"{e['det_steps']} steps under a deterministic exploration type): the policy's choice never reaches it, or the policy "
                          "never explores; check the action's encoding against env.action_spec and that collection samples "
                          "(a Collector does; env.rollout needs set_exploration_type(ExplorationType.RANDOM))")
            continue
        pairs = f", each of {e.get('n_pairs', 0)} checked sampled actions reached it as its own value" if e["discrete"] else ""
        count = f"{len(e['received'])}{'+' if len(e['received']) >= KEEP else ''}" if e["discrete"] else "at least 2"
        notes.append(f"{where}: {e['steps']} received actions{procs}, {count} distinct values{pairs}")
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    if not notes:
        raise evidence.Short("too few env steps to judge: " + "; ".join(short) + "; " + evidence.MORE)
    skipped = "; not judged: " + "; ".join(short) if short else ""
    det = sum(e["det_steps"] for e in envs)
    return "; ".join(notes) + (f"; {det} steps under a deterministic exploration type not judged for variety" if det else "") + skipped
