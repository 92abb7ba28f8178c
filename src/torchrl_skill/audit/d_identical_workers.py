"""identical-workers: do the envs of a batch produce the same data?

For every batched env (``SerialEnv``, ``ParallelEnv``, a vectorised env) it compares the rows
of its first reset, notes whether ``set_seed`` was called, and on the first batches of
[env, time] data (collector batches, ``env.rollout`` outputs) compares whole rows
(observations and actions over time); [env, 1] batches (a collector with frames_per_batch
equal to the number of envs) are joined over consecutive batches into WINDOW steps first. A
leaf with no feature dim (``PendulumEnv``'s ``"th"``) counts as one feature. A later reset in a row that differs from that row's
first reset shows the env's resets are random; one that equals it shows them repeating.
Faults: two or more rows identical over a whole batch (unless the batch holds fewer distinct
observations than rows: then rows meet by chance, not judged); fewer distinct first resets than
workers, unless the [env, time] rows all differ (more than one distinct reset: a reset space
smaller than the worker count, such as a small discrete env) or the reset is shown
deterministic by design: the workers were seeded apart
(``set_seed`` on the batched env gives each worker its own seed) and still reset alike, or later
resets repeat the first one and none differs. The usual causes, named from the batched
env itself: ``create_env_kwargs`` given as one dict (torchrl copies it to every worker, so
every worker gets the same ``seed``), a factory that seeds each env alike, an unseeded
``torch.Generator`` and no ``set_seed``.

Minimum evidence: a batched first reset, or one [env, time] batch of MIN_STEPS steps.

Facts (torch 2.14, torchrl 0.14.1): an unseeded ``torch.Generator()`` starts from the same
fixed default seed in every process and every instance (unlike the global generator, whose
first seed is random per process), so an env drawing from one gives every worker the same
start states until ``SerialEnv.set_seed(seed)`` seeds the workers apart
(tests/test_audit_facts.py, tests/test_audit_detectors.py). Public report: pytorch/rl#4208
(batched MuJoCo workers all seeded alike). ``set_seed(seed)`` on a batched env or a
multi-process collector seeds the first worker with ``seed`` and each next one with the seed
the one before returned (``torchrl._utils.seed_generator``, not ``seed + 1``;
torchrl/envs/batched_envs.py, torchrl/collectors/_multi_base.py 0.14.1).
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

from .evidence import need

NAME = "identical-workers"
CHECK_BATCHES = 4
MIN_STEPS = 3  # rows are compared over at least this many steps
WINDOW = 8  # steps gathered from consecutive short batches ([env, 1] batches) before comparing


def install(hub) -> None:
    import torch

    from .probe import user_site
    from .tdtools import ObjectKeys, episode_end, features, own_attr, rows, state_keys

    key_of = ObjectKeys()

    sec = hub.section(NAME)
    seeded: set = set()
    resets: dict[int, dict] = {}
    sources: dict = {}
    pending: dict = {}
    sites: dict = {}

    def flat_state(td, keys):
        parts = [features(td.get(k), td.batch_dims).float() for k in keys if torch.is_tensor(td.get(k, None))]
        return torch.cat(parts, -1) if parts else None

    def on_reset(env, out):
        if out is None or key_of(env) in resets or out.batch_size.numel() < 2:
            return
        keys = [k for k in out.keys(True, True) if (k[-1] if isinstance(k, tuple) else k) not in ("done", "terminated", "truncated")]
        x = flat_state(out.reshape(-1), keys)
        if x is None:
            return
        base = getattr(env, "base_env", None) if type(env).__name__ == "TransformedEnv" else None
        label = f"TransformedEnv({type(base).__name__})" if base is not None else type(env).__name__
        batched = base if base is not None else env
        resets[key_of(env)] = {"cls": label, "n": int(x.shape[0]), "unique": int(torch.unique(x, dim=0).shape[0]),
                               "seeded": key_of(env) in seeded or key_of(batched) in seeded,
                               "site": sites.get(key_of(batched)) or sites.get(key_of(env), "?"),
                               "same_seed": _same_seed(own_attr(batched, "create_env_kwargs"))}

    def window(key, r):
        """``(trajectory, observations, ends)`` as [rows, time, ...] over at least MIN_STEPS
        steps: the batch itself, or consecutive short batches joined along time (None until
        enough have come)."""
        obs_keys = state_keys(r)
        keys = obs_keys + (["action"] if "action" in r.keys() else [])
        cur, obs = flat_state(r.reshape(-1), keys), flat_state(r.reshape(-1), obs_keys)
        if cur is None:
            return None
        ends = episode_end(r)
        part = (cur.reshape(*r.shape, -1), obs.reshape(*r.shape, -1) if obs is not None else None, ends)
        if r.shape[1] >= MIN_STEPS:
            return part
        parts = pending.setdefault(key, [])
        if parts and parts[0][0].shape[0] != r.shape[0]:
            parts.clear()
        parts.append(part)
        if sum(p[0].shape[1] for p in parts) < WINDOW:
            return None
        pending[key] = []
        joined = [None if any(p[i] is None for p in parts) else torch.cat([p[i] for p in parts], 1) for i in range(3)]
        return tuple(joined)

    def on_data(key, td, kind, site="?"):
        r = rows(td) if td is not None else None
        if r is None or r.shape[0] < 2:
            return
        src = sources.setdefault(key, {"kind": kind, "site": site, "batches": 0, "identical": 0, "rows": int(r.shape[0]), "steps": 0,
                                       "random_reset": False, "repeated_reset": 0, "first": None})
        if src["batches"] >= CHECK_BATCHES and src["random_reset"]:
            return  # measured enough
        got = window(key, r)
        if got is None:
            return
        cur, obs, ends = got
        if obs is not None:
            if src["first"] is None:
                src["first"] = obs[:, 0].clone()
            if ends is not None and not src["random_reset"] and src["first"].shape[0] == obs.shape[0]:
                for row, t in ends[:, :-1].nonzero().tolist():
                    if not torch.equal(obs[row, t + 1], src["first"][row]):
                        src["random_reset"] = True
                        break
                    src["repeated_reset"] += 1
        if src["batches"] < CHECK_BATCHES:
            src["batches"] += 1
            src["rows"], src["steps"] = int(cur.shape[0]), int(cur.shape[1])
            unique = torch.unique(cur.flatten(1), dim=0).shape[0]
            src["identical"] = max(src["identical"], int(cur.shape[0] - unique + 1) if unique < cur.shape[0] else 0)
            if obs is not None:  # distinct states in the whole window: fewer than rows and rows meet by chance
                states = torch.unique(obs.reshape(-1, obs.shape[-1]), dim=0).shape[0]
                src["states"] = max(src.get("states", 0), int(states))

    def summarise():
        sec["resets"] = list(resets.values())
        sec["sources"] = [{k: v for k, v in s.items() if k != "first"} for s in sources.values()]
        sec["seeded"] = len(seeded)

    def on_built(env, site, by_user=True):
        if "num_workers" in vars(env) or type(env).__name__ == "TransformedEnv":
            sites.setdefault(key_of(env), site)

    hub.on("env_built", on_built)
    hub.on("env_seed", lambda env: seeded.add(key_of(env)))
    hub.on("env_reset", on_reset)
    hub.on("collector_built", lambda col, site: sites.setdefault(("collector", key_of(col)), site))
    hub.on("collector_batch", lambda col, batch: on_data(key_of(col), batch, type(col).__name__, sites.get(("collector", key_of(col)), "?")))
    hub.on("env_rollout", lambda env, policy, td: on_data(("rollout", key_of(env)), td, "env.rollout", user_site()))
    hub.summariser(summarise)


def _same_seed(kwargs) -> str | None:
    """``"seed=0"`` when ``create_env_kwargs`` (torchrl expands one dict into a copy per
    worker) gives every worker the same value of a key naming a seed, else None."""
    if not isinstance(kwargs, (list, tuple)) or len(kwargs) < 2 or not all(isinstance(k, dict) for k in kwargs):
        return None
    for key in kwargs[0]:
        if "seed" in str(key).lower():
            values = [repr(k.get(key)) for k in kwargs]
            if len(set(values)) == 1:
                return f"{key}={values[0]}"
    return None


def _cause(r: dict) -> str:
    if r.get("same_seed"):
        return (f"create_env_kwargs gives every worker {r['same_seed']} (a dict is copied to each worker); fix: one dict per worker, "
                f"create_env_kwargs=[{{'{r['same_seed'].split('=')[0]}': seed + i}} for i in range(num_workers)], or env.set_seed(seed) on the batched env")
    if r["seeded"]:
        return "the workers were seeded apart yet reset alike, and later resets differ: the reset draws from a generator _set_seed does not seed; fix: seed that generator in your env's _set_seed"
    if r.get("per_process"):  # one env per worker of a multi-process collector (worker_reports.py)
        return ("set_seed was never called on them, so every worker's generator starts from the same state (an unseeded torch.Generator() starts "
                "from the same default seed in every process; a factory that seeds each env alike does the same); fix: collector.set_seed(seed) "
                "on the multi-process collector before collecting (each worker's env gets its own seed)")
    return ("set_seed was never called on it, so every worker's generator starts from the same state (an unseeded torch.Generator() starts "
            "from the same default seed in every worker; a factory that seeds each env alike does the same); fix: env.set_seed(seed) on the "
            "batched env before collecting")


def _alike_by_chance(source: dict) -> bool:
    """Its batches hold fewer distinct observations than env rows: identical rows are then
    expected (a small state space, a deterministic policy), not evidence of one random stream."""
    return source.get("states", source["rows"]) < source["rows"]


def judge(observed: dict) -> str:
    sec = observed["sections"].get(NAME, {})
    resets, sources = sec.get("resets", []), [s for s in sec.get("sources", []) if s["batches"]]
    if not resets and not sources:
        if any(s["rows"] >= 2 for s in sec.get("sources", [])):
            need(0, 1, "[env, time] batches", f"comparisons over {MIN_STEPS} steps")
        raise sr.CheckSkipped("no batched env and no [env, time] data")
    random_reset = any(s["random_reset"] for s in sources)
    repeated = sum(s.get("repeated_reset", 0) for s in sources)
    faults, notes = [], []
    replaying = [s for s in sources if s["identical"] and not _alike_by_chance(s)]
    for s in sources:
        if s["identical"] and _alike_by_chance(s):
            notes.append(f"{s['kind']} (at {s.get('site', '?')}): {s['identical']} of {s['rows']} env rows identical, but its batches hold "
                         f"only {s['states']} distinct observations for {s['rows']} rows, so rows meet by chance (a small state space, "
                         "a deterministic policy): not judged")
        elif s["identical"]:
            faults.append(f"{s['identical']} of the {s['rows']} env rows of {s['kind']} batches (at {s.get('site', '?')}) were identical (observations and actions over all "
                          f"{s['steps']} steps): those workers replay the same random stream; fix: seed the batched env once with env.set_seed(seed) "
                          "(each worker gets its own seed) and draw randomness from the generator your env's _set_seed seeds")
        else:
            notes.append(f"{s['kind']}: {s['batches']} checks of {s['rows']} rows x {s['steps']} steps, all distinct")
    for r in resets:
        head = f"{r['cls']} built at {r.get('site', '?')}: {r['unique']} distinct first resets for {r['n']} workers"
        if r["unique"] >= r["n"]:
            notes.append(head)
        elif r["seeded"] and not random_reset:
            notes.append(f"{head}: the workers were seeded apart (set_seed) and still reset alike, so the reset is deterministic by design")
        elif repeated and not random_reset:
            notes.append(f"{head}: {repeated} later resets repeated the first one and none differed, so the reset is deterministic by design")
        elif r["unique"] > 1 and sources and not replaying:
            # a reset drawn from fewer states than workers: rows still part once they act
            notes.append(f"{head}, yet no two env rows were alike over {sum(s['batches'] for s in sources)} [env, time] checks: "
                         "the reset draws from fewer states than there are workers, the workers do not replay one stream")
        else:
            seen = "later resets differ, so resets are random" if random_reset else "nothing shows the reset is deterministic by design"
            faults.append(f"{head} ({seen}): the workers start every episode alike; cause: {_cause(r)}")
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    return "; ".join(notes)
