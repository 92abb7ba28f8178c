"""data-freshness: does each loss train on data from where its algorithm family needs it?

An on-policy loss (``ClipPPOLoss``, ``PPOLoss``, ``KLPENPPOLoss``, ``A2CLoss``,
``ReinforceLoss``) assumes the current policy collected its batch: its ratio and advantage
are defined for that policy only. An off-policy loss (DQN, SAC, TD3, DDPG, CrossQ, IQL,
CQL, REDQ) learns from a replay of past data: a buffer that never holds more than the newest
batch turns it into a noisy on-policy learner.

Two effects of where the rows come from, whatever the code that picks them: an on-policy
loss should see most of each batch before the next one (COVER): training on a slice of it
(a buffer fed ``data[:64]``) fits a few rows many times; an off-policy loss should replay
rows the learning policy collected, not only those written before its first optimizer step
(``rb[:128]`` instead of ``rb.sample(128)`` replays the same first rows forever).

Measured on the data (child side): every collection (a collector batch, a user's
``env.rollout``) is fingerprinted row by row (a fixed random projection of its root
observation, FP_KEYS) with the policy version that collected it (the optimizer steps taken
so far); each on-policy loss call (the first CHECK_FIRST, then every CHECK_EVERY-th) looks up its rows: from the newest collection, from an
older one (how many collections and optimizer steps before), or not found (the data was
transformed after collection; not judged). For every replay buffer sampled while an
off-policy loss trains, the buffer's length at each sample is compared with the size of the
newest batch written.

Every on-policy loss call is also fingerprinted in full (up to COVER_ROWS rows) and counted
against the collection its rows came from: a collection's coverage is the share of its
distinct rows (by fingerprint: repeated observations count once) that reached the loss before
the next collection. Every off-policy loss call looked up counts
its rows collected after the first optimizer step ("own") against the number uniform
sampling over everything collected would give.

Minimum evidence: MIN_CALLS on-policy loss calls with matched rows; MIN_EXTENDS writes
to a buffer before its length is judged; MIN_COVERED collections with their coverage
measured; OWN_EXPECTED own rows expected (uniform sampling) before zero found is a fault.
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

from .evidence import MORE, Short, live, need

NAME = "data-freshness"
ON_POLICY = ("ClipPPOLoss", "PPOLoss", "KLPENPPOLoss", "A2CLoss", "ReinforceLoss")
OFF_POLICY = ("DQNLoss", "DistributionalDQNLoss", "SACLoss", "DiscreteSACLoss", "TD3Loss", "TD3BCLoss", "DDPGLoss",
              "CrossQLoss", "IQLLoss", "DiscreteIQLLoss", "CQLLoss", "DiscreteCQLLoss", "REDQLoss")
FP_KEYS = ("observation", "pixels", "observation_vector")
MIN_CALLS = 4
MIN_EXTENDS = 3
KEEP = 16  # collections remembered
ROWS = 256  # rows of a loss call looked up
CHECK_FIRST, CHECK_EVERY = 40, 10  # loss calls looked up: each of the first 40, then every 10th
OLD_SHARE = 0.1
COVER, COVER_ROWS, MIN_COVERED = 0.5, 4096, 2  # median share of each batch the on-policy loss saw
OWN_EXPECTED = 20.0


def family(loss) -> str | None:
    names = {k.__name__ for k in type(loss).__mro__}
    if names & set(ON_POLICY):
        return "on"
    if names & set(OFF_POLICY):
        return "off"
    return None


def install(hub) -> None:
    import torch

    from .probe import user_site

    sec = hub.section(NAME)
    gen = torch.Generator().manual_seed(12345)
    proj: dict[int, torch.Tensor] = {}
    table: dict[float, int] = {}  # fingerprint -> collection index
    coll: list[dict] = []  # collection index -> {"version", "site"}
    losses: dict[int, dict] = {}
    rbs: dict[int, dict] = {}
    state = {"off": False}
    cover = {"seen": set(), "ok": True, "calls": 0, "done": [], "coll": None}  # the newest collection's rows reached by the loss
    own = {"first_step_coll": None, "rows": 0, "found": 0, "own": 0, "expected": 0.0, "calls": 0, "site": None, "cls": None}
    sizes: list[int] = []  # rows per collection

    def fingerprints(td, limit=None):
        x = None
        for k in FP_KEYS:
            x = td.get(k, None)
            if torch.is_tensor(x) and x.is_floating_point():
                break
            x = None
        if x is None or not td.batch_dims:
            return None
        x = x.detach().reshape(td.batch_size.numel(), -1)
        if limit is not None and x.shape[0] > limit:
            x = x[:: max(1, x.shape[0] // limit)][:limit]
        f = x.shape[1]
        if f not in proj:
            proj[f] = torch.randn(f, generator=gen, dtype=torch.float64)
        return (x.double().cpu() @ proj[f]).tolist()

    def on_collect(td):
        fps = fingerprints(td)
        if fps is None:
            return
        idx = len(coll)
        # close the coverage count of the collection this one replaces
        if cover["coll"] is not None and cover["calls"] and cover["ok"]:
            cover["done"].append((len(cover["seen"]), sizes[cover["coll"]], cover["calls"]))
        cover.update(seen=set(), ok=True, calls=0, coll=idx)
        sizes.append(len(set(fps)))  # distinct rows: a small discrete env repeats observations within a batch
        if own["first_step_coll"] is None and hub.meta["optimizer_steps"]:
            own["first_step_coll"] = idx
        coll.append({"version": hub.meta["optimizer_steps"], "keys": fps})
        table.update(dict.fromkeys(fps, idx))
        if len(coll) > KEEP:  # forget the oldest collection's rows (those no newer one re-wrote)
            old = coll[len(coll) - KEEP - 1]
            for k in old.pop("keys", ()):
                if table.get(k) == len(coll) - KEEP - 1:
                    del table[k]

    def on_batch(col, batch):
        if batch is not None:
            on_collect(batch)

    def on_rollout(env, policy, td):
        if td is not None:
            on_collect(td)

    def on_forward(loss, td, out):
        fam = family(loss)
        if fam == "off":
            state["off"] = True
            if coll:
                count_own(loss, td)
        if fam != "on" or not coll:
            return
        if cover["coll"] is not None:
            rows = td.batch_size.numel() if getattr(td, "batch_dims", 0) else 0
            fps = fingerprints(td) if 0 < rows <= COVER_ROWS else None
            if fps is None:
                cover["ok"] = False
            else:
                cover["calls"] += 1
                cover["seen"].update(v for v in fps if table.get(v) == cover["coll"])
        info = losses.setdefault(id(loss), {"cls": type(loss).__name__, "calls": 0, "matched_calls": 0, "rows": 0, "fresh": 0,
                                            "old": 0, "unknown": 0, "max_back": 0, "max_versions": 0, "fresh_versions": 0, "first_old": None})
        info["calls"] += 1
        if not (info["calls"] <= CHECK_FIRST or info["calls"] % CHECK_EVERY == 0):
            return
        fps = fingerprints(td, ROWS)
        if fps is None:
            return
        newest = len(coll) - 1
        now = hub.meta["optimizer_steps"]
        found = [table.get(v) for v in fps]
        known = [i for i in found if i is not None]
        info["unknown"] += len(found) - len(known)
        if not known:
            return
        info["matched_calls"] += 1
        info["rows"] += len(known)
        old = [i for i in known if i != newest]
        info["fresh"] += len(known) - len(old)
        info["fresh_versions"] = max(info["fresh_versions"], now - coll[newest]["version"])
        if old:
            info["old"] += len(old)
            back = newest - min(old)
            info["max_back"] = max(info["max_back"], back)
            info["max_versions"] = max(info["max_versions"], now - coll[min(old)]["version"])
            if info["first_old"] is None:
                info["first_old"] = {"call": info["calls"], "rows": len(old), "of": len(known), "back": back, "site": user_site()}

    def count_own(loss, td):
        """Rows of an off-policy loss call collected after the first optimizer step, against uniform sampling."""
        first = own["first_step_coll"]
        if first is None:
            return
        fps = fingerprints(td, ROWS)
        if not fps:
            return
        found = [table.get(v) for v in fps]
        known = [i for i in found if i is not None]
        own["calls"] += 1
        own["rows"] += len(fps)
        own["found"] += len(known)
        own["own"] += sum(i >= first for i in known)
        own["expected"] += len(fps) * sum(sizes[first:]) / max(1, sum(sizes))
        own["site"] = own["site"] or user_site()
        own["cls"] = type(loss).__name__

    def on_extend(rb, data):
        info = rbs.setdefault(id(rb), {"cls": type(rb).__name__, "site": user_site(), "extends": 0, "last": 0, "samples": 0,
                                       "judged": 0, "only_newest": 0, "max_len": 0, "max_ratio": 0.0})
        info["extends"] += 1
        # one batch in the unit len(rb) counts: the length the newest write added (a storage of
        # [env, time] trajectories counts trajectories, not frames); a full buffer adds none
        try:
            grown = len(rb) - info.get("len", 0)
            info["len"] = len(rb)
        except Exception:
            grown = 0
        if grown > 0:
            info["last"] = grown
        elif not info["last"]:
            try:
                info["last"] = int(data.batch_size.numel()) if getattr(data, "batch_size", None) is not None else len(data)
            except Exception:
                info["last"] = 0

    def on_sample(rb, out):
        info = rbs.get(id(rb))
        if info is None or not state["off"]:
            return
        info["samples"] += 1
        n = len(rb)
        info["max_len"] = max(info["max_len"], n)
        if info["extends"] >= MIN_EXTENDS and info["last"]:
            info["judged"] += 1
            info["only_newest"] += n <= info["last"]
            info["max_ratio"] = max(info["max_ratio"], n / info["last"])

    def summarise():
        sec["losses"] = list(losses.values())
        sec["buffers"] = [b for b in rbs.values() if b["samples"]]
        sec["off_policy"] = state["off"]
        sec["collections"] = len(coll)
        sec["coverage"] = cover["done"]
        sec["own"] = {k: v for k, v in own.items() if k != "first_step_coll"}

    hub.on("collector_batch", on_batch)
    hub.on("env_rollout", on_rollout)
    hub.on("loss_forward", on_forward)
    hub.on("rb_extend", on_extend)
    hub.on("rb_sample", on_sample)
    hub.summariser(summarise)


def judge(obs: dict) -> str:
    sec = obs["sections"].get(NAME, {})
    losses = [x for x in sec.get("losses", []) if x["calls"]]
    bufs = sec.get("buffers", []) if sec.get("off_policy") else []
    own = sec.get("own") or {}
    covered = [c for c in sec.get("coverage", []) if c[1]]
    faults, notes = [], []
    if own.get("found") and own["expected"] >= OWN_EXPECTED:
        if own["own"] == 0:
            faults.append(f"{own['cls']} (called at {own['site']}) trained on {own['found']} rows found in collected batches over "
                          f"{own['calls']} calls, none collected after the first optimizer step, where uniform sampling over "
                          f"everything collected would give {own['expected']:.0f}: the loss replays only data written before "
                          "training began (a fixed slice such as rb[:N], a sampler over a frozen range); fix: "
                          "batch = rb.sample(batch_size) on the buffer the collector's batches are extended into")
        else:
            notes.append(f"{own['cls']}: {own['own']} of {own['found']} replayed rows found were collected after training began "
                         f"({own['expected']:.0f} expected under uniform sampling)")
    if covered and losses:
        shares = sorted(c[0] / c[1] for c in covered)
        med = shares[len(shares) // 2]
        worst = min(covered, key=lambda c: c[0] / c[1])
        if len(covered) >= MIN_COVERED and med < COVER:
            faults.append(f"{', '.join(sorted({x['cls'] for x in losses}))} saw a median {med:.0%} of each collected batch's rows before "
                          f"the next batch ({len(covered)} batches; e.g. {worst[0]} of its {worst[1]} distinct rows over {worst[2]} calls): "
                          "it trains on a slice of the data, many times over; fix: feed the whole batch to the epochs "
                          "(rb.extend(data.reshape(-1)), then sample minibatches until every row was drawn)")
        elif len(covered) >= MIN_COVERED:
            notes.append(f"the on-policy loss saw a median {med:.0%} of each batch's rows ({len(covered)} batches)")
    if not losses and not bufs and not faults and not notes:
        if sec.get("off_policy"):
            raise sr.CheckSkipped("the off-policy loss trained on no replay buffer sampled (its data source was not seen)")
        raise sr.CheckSkipped("no on-policy loss (PPO/A2C/Reinforce) with collected data and no off-policy loss sampling a replay buffer")
    if losses:
        if all(not x["matched_calls"] for x in losses):
            if not bufs and not faults and not notes:
                raise sr.CheckSkipped("the on-policy loss's rows were not found in any collected batch (data transformed after collection): "
                                      f"{', '.join(x['cls'] for x in losses)}; not measured")
        else:
            need(max(x["matched_calls"] for x in losses), MIN_CALLS, "on-policy loss calls", "calls whose rows were found in a collected batch")
        for x in losses:
            if not x["matched_calls"]:
                continue
            if x["old"] > OLD_SHARE * x["rows"]:
                f = x["first_old"]
                faults.append(f"{x['cls']} trained on {x['old']} of {x['rows']} rows (checked at {x['matched_calls']} calls) collected by an older "
                              f"policy than the newest batch's: up to {x['max_back']} collections and {x['max_versions']} optimizer steps back "
                              f"(first at call {f['call']}, {f['rows']} of {f['of']} rows, from {f['site']}); an on-policy loss's ratio and "
                              "advantage hold only for the policy that collected the batch; fix: train on the newest batch only "
                              "(rb.empty() before rb.extend(data), or a buffer of capacity frames_per_batch)")
            else:
                notes.append(f"{x['cls']}: {x['fresh']} of {x['rows']} rows checked at {x['matched_calls']} calls came from the newest "
                             f"collection (collected at most {x['fresh_versions']} optimizer steps before the call: the epochs over that batch)")
    for b in bufs:
        if b["judged"] < 1:
            continue
        if b["only_newest"] >= b["judged"]:
            faults.append(f"the {b['cls']} built at {b['site']} held at most {b['max_len']} rows, no more than the newest batch written "
                          f"({b['last']} rows), at all {b['judged']} samples after {b['extends']} writes: an off-policy loss replays only "
                          "the last batch; fix: a storage far larger than one batch, e.g. LazyTensorStorage(1_000_000)")
        else:
            notes.append(f"the {b['cls']} built at {b['site']} held up to {b['max_len']} rows ({b['max_ratio']:.1f}x the newest batch) "
                         f"over {b['judged']} samples")
    if bufs and not any(b["judged"] for b in bufs) and not notes and not faults:
        need(max(b["extends"] for b in bufs), MIN_EXTENDS, "replay buffers", "writes before the buffer's length is judged")
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    # while the run goes on, wait for the effects' evidence (the early stop ends the run only when no row is short)
    if live(obs) and losses and len(covered) < MIN_COVERED:
        raise Short(f"on-policy batch coverage: {len(covered)} batches measured, {MIN_COVERED} needed to judge; {MORE}")
    if live(obs) and own.get("calls") and own["expected"] < OWN_EXPECTED:
        raise Short(f"off-policy replay of the policy's own data: {own['expected']:.0f} own rows expected so far, "
                    f"{OWN_EXPECTED:.0f} needed to judge; {MORE}")
    if not notes:
        raise sr.CheckSkipped("nothing measured")
    return "; ".join(notes)
