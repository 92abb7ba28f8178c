"""transitions: does each loss train on transitions as the env produced them?

A transition is a row: its observation, the action taken, and under ``"next"`` the reward,
the termination flag and the observation the env returned. Code between the collector and
the loss (a replay buffer write, a hand-edited batch) can break a row while every shape and
key stays valid: a next observation overwritten with the current one (the target then
bootstraps from s, not s'), rewards permuted across the batch, flags rolled by one step.
No loss can notice; the critic learns values of transitions that never happened.

Measured on the data (child side): every collection (collector batch, ``env.rollout``) is
fingerprinted row by row: a fixed random projection of the root observation and of the
action (FP_KEYS, the same keys data-freshness reads) keys the row's next-observation
projection, reward and terminated flag (up to CANDIDATES distinct outcomes per key: a
stochastic or probe env repeats a state; a key seen with more outcomes than that, such as a
state-action pair of a small discrete env with noisy rewards, is ambiguous and not judged).
Every replay-buffer write and every loss call
(the first CHECK_FIRST, then every CHECK_EVERY-th; at most ROWS rows each) looks its rows up:
a row found whose next observation, reward or flag matches none of its recorded outcomes is
a broken transition. A reward is judged broken only when it is another row's (a permuted or
shifted reward column): a reward the code rewrote with new values (an intrinsic bonus, a
shaping term) is noted, not failed. Rows not found (data transformed after collection) are not judged;
n-step rows (``steps_to_next_obs``, written by ``MultiStep``) are left out.

Minimum evidence: MIN_ROWS rows found. Fails when over BAD_SHARE of them carry another next
observation or terminated flag than the env returned, or another row's reward.
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

from .evidence import need

NAME = "transitions"
FP_KEYS = ("observation", "pixels", "observation_vector")
KEEP_ROWS = 200_000  # rows remembered (oldest collections forgotten first)
CANDIDATES = 8
ROWS = 256
CHECK_FIRST, CHECK_EVERY = 40, 10
MIN_ROWS = 200
BAD_SHARE = 0.1
FIELDS = ("next observation", "reward", "terminated")


def install(hub) -> None:
    import torch

    from .probe import user_site

    sec = hub.section(NAME)
    gen = torch.Generator().manual_seed(54321)
    proj: dict[int, torch.Tensor] = {}
    table: dict[tuple, list] = {}
    ambiguous: set = set()  # keys seen with more than CANDIDATES outcomes: their rows are not judged
    order: list[list] = []  # per collection: its keys, to forget the oldest
    size = {"rows": 0}
    rewards: dict[float, int] = {}  # collected reward values (rounded) -> rows remembered holding it
    sites: dict[str, dict] = {}

    def project(x, n):
        x = x.detach().reshape(n, -1)
        f = x.shape[1]
        if f not in proj:
            proj[f] = torch.randn(f, generator=gen, dtype=torch.float64)
        return x.double().cpu() @ proj[f]

    def rows(td, limit=None):
        """Per row: (key, next fp, reward, terminated) or None when the batch is not readable."""
        if not getattr(td, "batch_dims", 0):
            return None
        key = next((k for k in FP_KEYS if torch.is_tensor(td.get(k, None)) and td.get(k).is_floating_point()), None)
        nxt = td.get("next", None)
        if key is None or nxt is None or not torch.is_tensor(nxt.get(key, None)) or not torch.is_tensor(td.get("action", None)):
            return None
        n = td.batch_size.numel()
        try:
            obs, act = project(td.get(key), n), project(td.get("action").float(), n)
            nobs = project(nxt.get(key), n)
            rew = nxt.get("reward", None)
            rew = rew.detach().reshape(n, -1).double().sum(-1).cpu() if torch.is_tensor(rew) else None
            term = nxt.get("terminated", None)
            term = term.detach().reshape(n, -1).any(-1).cpu() if torch.is_tensor(term) else None
        except Exception:  # a batch whose entries do not share its batch size: not readable
            return None
        idx = range(n)
        if limit is not None and n > limit:
            idx = range(0, n, max(1, n // limit))[:limit]
        skip = td.get("steps_to_next_obs", None)
        skip = skip.reshape(n, -1)[:, 0].cpu() if torch.is_tensor(skip) else None
        out = []
        for i in idx:
            if skip is not None and int(skip[i]) != 1:
                continue
            out.append(((round(float(obs[i]), 9), round(float(act[i]), 9)), float(nobs[i]), None if rew is None else float(rew[i]),
                        None if term is None else bool(term[i]), float(obs[i])))
        return out

    def on_collect(td):
        got = rows(td)
        if not got:
            return
        keys = []
        for key, nfp, r, t, _ in got:
            if r is not None:
                rewards[round(r, 9)] = rewards.get(round(r, 9), 0) + 1
            cands = table.setdefault(key, [])
            if (nfp, r, t) not in cands:
                if len(cands) < CANDIDATES:
                    cands.append((nfp, r, t))
                else:
                    ambiguous.add(key)
            keys.append(key)
        order.append((keys, [round(g[2], 9) for g in got if g[2] is not None]))
        size["rows"] += len(keys)
        while size["rows"] > KEEP_ROWS and len(order) > 1:
            old, old_rewards = order.pop(0)
            size["rows"] -= len(old)
            for k in old:
                table.pop(k, None)
                ambiguous.discard(k)
            for r in old_rewards:
                rewards[r] -= 1
                if not rewards[r]:
                    del rewards[r]

    def close(a, b):
        return a is None or b is None or abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))

    def check(td, where):
        got = rows(td, ROWS)
        if not got or not table:
            return
        info = sites.setdefault(where, {"site": user_site(2), "rows": 0, "bad": dict.fromkeys(FIELDS, 0), "next_is_root": 0,
                                        "changed_rewards": 0, "ambiguous": 0})
        for key, nfp, r, t, ofp in got:
            cands = table.get(key)
            if not cands:
                continue
            if key in ambiguous:
                info["ambiguous"] += 1
                continue
            info["rows"] += 1
            bad = []
            if not any(close(nfp, c[0]) for c in cands):
                bad.append("next observation")
                info["next_is_root"] += close(nfp, ofp)
            if r is not None and not any(close(r, c[1]) for c in cands):
                if round(r, 9) in rewards:  # another collected row's reward
                    bad.append("reward")
                else:
                    info["changed_rewards"] += 1
            if t is not None and not any(c[2] is None or c[2] == t for c in cands):
                bad.append("terminated")
            for f in bad:
                info["bad"][f] += 1

    calls = {"loss": 0}

    def on_forward(loss, td, out):
        calls["loss"] += 1
        if calls["loss"] <= CHECK_FIRST or calls["loss"] % CHECK_EVERY == 0:
            check(td, f"loss:{type(loss).__name__}")

    def on_extend(rb, data):
        check(data, f"write:{type(rb).__name__}")

    def summarise():
        sec["sites"] = list({**v, "where": k} for k, v in sites.items())

    hub.on("collector_batch", lambda col, batch: batch is not None and on_collect(batch))
    hub.on("env_rollout", lambda env, policy, td: td is not None and on_collect(td))
    hub.on("rb_extend", on_extend)
    hub.on("loss_forward", on_forward)
    hub.summariser(summarise)


def judge(obs: dict) -> str:
    sec = obs["sections"].get(NAME, {})
    sites = [s for s in sec.get("sites", []) if s["rows"]]
    if not sec.get("sites"):
        raise sr.CheckSkipped("no loss call or replay-buffer write on collected data was seen")
    if not sites:
        amb = sum(s.get("ambiguous", 0) for s in sec["sites"])
        raise sr.CheckSkipped("no row a loss trained on (or a buffer stored) was found in a collected batch "
                              + (f"with one recorded outcome set: {amb} rows had an observation and action the env answered "
                                 f"in more than {CANDIDATES} ways (a small discrete state space, noisy rewards); not measured"
                                 if amb else "(data transformed after collection); not measured"))
    need(max(s["rows"] for s in sites), MIN_ROWS, "transitions", "rows found in a collected batch")
    faults, notes = [], []
    for s in sites:
        what = ("the replay buffer write at " if s["where"].startswith("write:") else f"{s['where'][5:]} called at ") + s["site"]
        bad = {f: n for f, n in s["bad"].items() if n > BAD_SHARE * s["rows"]}
        for f, n in bad.items():
            text = (f"{what}: {n} of {s['rows']} rows found in a collected batch carry "
                    + ("another row's reward, not the one the env returned for that observation and action" if f == "reward" else
                       f"another {f} than the env returned for that observation and action"))
            if f == "next observation" and s["next_is_root"] > n / 2:
                text += (f" ({s['next_is_root']} of them carry the row's own observation: a target bootstrapped there reads V(s), not V(s'))")
            faults.append(text + "; fix: store and train on the collector's batch as it came (data['next', ...] untouched); edit a copy for logging")
        if not bad:
            notes.append(f"{what}: {s['rows']} rows found in collected batches, each with the next observation and terminated flag the env "
                         "returned and its own reward" + (f" ({s['changed_rewards']} rewards rewritten after collection: a shaping term "
                                                          "or bonus, not judged)" if s["changed_rewards"] else ""))
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    return "; ".join(notes)
