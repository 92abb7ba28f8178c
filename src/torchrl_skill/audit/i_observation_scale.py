"""info:observation-scale: do the features of one observation key have very different scales?

Information, never a fault (a heuristic: some tasks need raw units). On the first collected
frames (collector batches and ``env.rollout`` outputs, root and ``"next"`` values, up to
MAX_ROWS per key) it takes, for each floating-point state key with one feature dim of
2..MAX_FEATURES entries (keys found at the root and under ``"next"``, tdtools.state_keys),
every feature's standard deviation and range. A key whose non-constant features' std differ by more than RATIO (a raw
step count next to unit-scale positions) is named with those features: a network input far
larger than the others dominates its first layer's pre-activations until the weights adapt.

Fixes named in the row (torchrl/envs/transforms 0.14.1): ``ObservationNorm(in_keys=[key],
standard_normal=True)`` with ``init_stats(num_iter=...)`` (per-feature loc/scale taken from
the env: reduce_dim=0 keeps one statistic per feature), ``VecNormV2(in_keys=[key])``
(running per-element statistics), or scaling in the env. Either transform writes its
in_keys in place unless given ``out_keys``: an env whose ``_step`` reads its state back from
that key needs a new key (error-index entry ``transform-overwrites-env-state``). Where the
transforms row saw one of those transforms in the env, the features measured are its outputs:
the row names the statistics instead (``ObservationNorm.init_stats`` scales a feature that
barely varied in its rollout by ``1 / std.clamp_min(eps)``, eps 1e-06 by default, torchrl
0.14.1; reproduced by a newcomer trial on pytorch/rl#1694's fault class).
"""

from __future__ import annotations

import math

from torchrl_skill.report import skill_report as sr

NAME = "info:observation-scale"
RATIO = 10.0  # std ratio between a key's features above which the key is named
MAX_ROWS = 4096  # rows (frames) measured per key
MAX_FEATURES = 256  # wider keys (flattened images, embeddings) are not measured
SHOWN = 6  # features listed per key
# transforms (names as the transforms row records them) whose outputs are already normalized
NORMALIZERS = ("ObservationNorm", "VecNorm", "VecNormV2")


def install(hub) -> None:
    import torch

    from .tdtools import state_keys

    sec = hub.section(NAME)
    stats: dict[str, dict] = {}

    def on_data(td):
        if td is None or td.batch_dims == 0:
            return
        for k in state_keys(td):
            x = td.get(k)
            if not (torch.is_tensor(x) and x.is_floating_point() and x.dim() == td.batch_dims + 1 and 2 <= x.shape[-1] <= MAX_FEATURES):
                continue
            name = k if isinstance(k, str) else str(tuple(k))
            s = stats.setdefault(name, {"n": 0, "f": int(x.shape[-1])})
            if s["n"] >= MAX_ROWS or s["f"] != x.shape[-1]:
                continue
            # the root holds each step's input, "next" its output: together every observation seen
            nxt = td.get(("next", *k) if isinstance(k, tuple) else ("next", k))
            if not torch.is_tensor(nxt) or nxt.shape != x.shape:
                continue
            x = torch.cat([x.detach().reshape(-1, s["f"]), nxt.detach().reshape(-1, s["f"])]).double().cpu()
            x = x[torch.isfinite(x).all(-1)]
            if not x.shape[0]:
                continue
            part = {"sum": x.sum(0), "sq": (x * x).sum(0), "min": x.min(0).values, "max": x.max(0).values}
            for field, v in part.items():
                old = s.get(field)
                s[field] = v if old is None else (torch.minimum(old, v) if field == "min" else torch.maximum(old, v) if field == "max" else old + v)
            s["n"] += int(x.shape[0])

    def summarise():
        out = []
        for name, s in stats.items():
            if not s["n"]:
                continue
            mean = s["sum"] / s["n"]
            std = (s["sq"] / s["n"] - mean * mean).clamp_min(0).sqrt()
            out.append({"key": name, "rows": s["n"], "std": [float(v) for v in std], "min": [float(v) for v in s["min"]],
                        "max": [float(v) for v in s["max"]]})
        sec["keys"] = out

    hub.on("collector_batch", lambda col, batch: on_data(batch))
    hub.on("env_rollout", lambda env, policy, td: on_data(td))
    hub.summariser(summarise)


def _feature(k: dict, i: int) -> str:
    return f"{k['key']}[{i}] spans {k['min'][i]:.3g}..{k['max'][i]:.3g} (std {k['std'][i]:.3g})"


def judge(observed: dict) -> str:
    keys = observed["sections"].get(NAME, {}).get("keys", [])
    if not keys:
        raise sr.CheckSkipped(f"no floating-point observation with 2..{MAX_FEATURES} features in the collected data")
    named, calm = [], []
    for k in keys:
        stds = k["std"]
        varying = [i for i, s in enumerate(stds) if s > 1e-12 * max(1.0, max(abs(k["min"][i]), abs(k["max"][i])))]
        if len(varying) < 2:
            calm.append(f"{k['key']}: {len(varying)} of {len(stds)} features vary")
            continue
        lo, hi = min(stds[i] for i in varying), max(stds[i] for i in varying)
        ratio = hi / lo if lo > 0 else math.inf
        by_size = sorted(varying, key=lambda i: -stds[i])
        shown = by_size if len(by_size) <= SHOWN else by_size[:SHOWN // 2] + by_size[-(SHOWN // 2):]
        listed = ", ".join(_feature(k, i) for i in sorted(shown))
        if ratio > RATIO:
            named.append((k["key"], f"{k['key']}: its features' std differ {ratio:.0f}x over {k['rows']} observations: {listed}"))
        else:
            calm.append(f"{k['key']}: its features' std within {ratio:.1f}x over {k['rows']} observations ({listed})")
    if not named:
        return "; ".join(calm)
    keys_list = ", ".join(repr(n) for n, _ in named)
    normalizers = sorted({t for e in observed["sections"].get("transforms", {}).get("envs", [])
                          for t in e.get("transforms", []) if t in NORMALIZERS})
    if normalizers:  # the keys are normalized already, and still this far apart: the statistics are wrong
        return ("a heuristic, not a fault: " + " | ".join(text for _, text in named)
                + f"; {'+'.join(normalizers)} is in the env, so these are its outputs: ObservationNorm.init_stats gives a "
                "feature that barely varied during its rollout a scale of 1/std.clamp_min(eps) (eps=1e-06 by default: "
                "up to 1e6x), e.g. a goal or a per-episode constant fixed during a rollout shorter than an episode; fix: "
                "init_stats(num_iter=...) over several episodes (num_iter well above the episode length), pass loc= and "
                "scale= yourself, or VecNormV2(in_keys=[...]) (running statistics)"
                + (f"; {'; '.join(calm)}" if calm else ""))
    return ("a heuristic, not a fault: " + " | ".join(text for _, text in named)
            + f"; the largest inputs dominate the network's first layer until its weights adapt. Fixes: "
            f"norm = ObservationNorm(in_keys=[{keys_list}], standard_normal=True) appended to the env you collect from, then "
            f"norm.init_stats(num_iter=...) (per-feature statistics), VecNormV2(in_keys=[{keys_list}]) (running statistics), or scale the features in the env (a step count "
            "divided by the horizon); give either transform out_keys=[a new key] if your env's _step reads that key back"
            + (f"; {'; '.join(calm)}" if calm else ""))
