"""value-estimator: does the value estimator read the env's own end flags, with the configured gamma and lambda?

An invariant of any loss with a value estimator (GAE, TD(0), TD(1), TD(lambda)), judged on
the batches it saw (child side):

- flags: ``("next", est.tensor_keys.terminated)`` against the env's own
  ``("next", "terminated")``: rows it reads as terminal that the env wrote as not terminated
  are truncations (or plain ends) whose value it drops, never bootstrapped; its
  ``("next", est.tensor_keys.done)`` against the env's ``("next", "done")``: ends it does not
  see glue two episodes together;
- GAE: the advantage is recomputed independently (a reverse loop over time, from the
  ``state_value`` and ``("next", "state_value")`` the estimator wrote, the reward, and the
  env's own flags) on sampled calls and compared with what the estimator returned;
- gamma and lambda: read from the estimator (``est.gamma``, ``est.lmbda``), compared with
  the values of the same name in the script's configuration when one is visible in a user
  frame at the first call (an ``argparse.Namespace`` or an omegaconf ``DictConfig``, any
  depth: ``cfg.loss.gamma``).

Facts (torchrl 0.14.1, torchrl/objectives/value/advantages.py): GAE reads
``("next", tensor_keys.terminated)`` (falling back to done) for bootstrapping and
``("next", tensor_keys.done)`` for trajectory ends; ``loss.set_keys(terminated="truncated")``
or ``make_value_estimator(...)`` after ``set_keys`` pass the remap on.
Minimum evidence: one estimator call on data with the env's flags.
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

NAME = "value-estimator"
CONFIG_NAMES = {"gamma": ("gamma", "discount", "discount_factor"), "lmbda": ("lmbda", "lambda", "gae_lambda", "lamda", "lam")}
RECOMPUTE_FIRST, RECOMPUTE_EVERY = 3, 20
TOL = 1e-3  # relative to the advantages' scale


def _find_config(frame, max_depth: int = 40) -> dict:
    """``{"gamma": (value, "cfg.loss.gamma"), ...}`` from the first user frame up the stack
    that holds an argparse.Namespace or an omegaconf DictConfig (locals, then globals)."""
    import argparse

    from .probe import is_library_file

    def walk(obj, path, out, depth=0):
        if depth > 4:
            return
        if isinstance(obj, argparse.Namespace):
            obj = vars(obj)
        elif type(obj).__name__ == "DictConfig":
            try:
                from omegaconf import OmegaConf

                obj = OmegaConf.to_container(obj, resolve=True)
            except Exception:
                return
        if not isinstance(obj, dict):
            return
        for k, v in obj.items():
            if isinstance(v, (dict, argparse.Namespace)) or type(v).__name__ == "DictConfig":
                walk(v, f"{path}.{k}", out, depth + 1)
            elif isinstance(v, (int, float)) and not isinstance(v, bool) and "sched" not in path.lower():
                # an lr scheduler's gamma (StepLR) is not the discount
                for what, names in CONFIG_NAMES.items():
                    if str(k).lower() in names and what not in out:
                        out[what] = (float(v), f"{path}.{k}")

    out: dict = {}
    depth = 0
    while frame is not None and depth < max_depth:
        if not is_library_file(frame.f_code.co_filename):
            for scope in (frame.f_locals, frame.f_globals):
                for name, obj in list(scope.items()):
                    if isinstance(obj, argparse.Namespace) or type(obj).__name__ == "DictConfig":
                        walk(obj, name, out)
                if out:
                    return out
        frame = frame.f_back
        depth += 1
    return out


def _gae(reward, value, next_value, terminated, done, gamma: float, lmbda: float, time_dim: int):
    """GAE written out (float64), time along ``time_dim``: delta_t = r_t + gamma * V(s_t+1) *
    (1 - terminated_t) - V(s_t); A_t = delta_t + gamma * lmbda * (1 - done_t) * A_t+1."""
    import torch

    r, v, nv = (x.double().movedim(time_dim, 0) for x in (reward, value, next_value))
    term, dn = (x.double().movedim(time_dim, 0) for x in (terminated, done))
    delta = r + gamma * nv * (1 - term) - v
    adv = torch.zeros_like(delta)
    last = torch.zeros_like(delta[0])
    for t in range(delta.shape[0] - 1, -1, -1):
        last = delta[t] + gamma * lmbda * (1 - dn[t]) * last
        adv[t] = last
    return adv.movedim(0, time_dim)


def install(hub) -> None:
    import sys

    import torch

    from .probe import user_site

    sec = hub.section(NAME)
    ests: dict[int, dict] = {}

    def flag(td, key):
        v = td.get(("next", key) if isinstance(key, str) else ("next", *key), None)
        if v is None:
            return None
        v = v.bool()
        return v

    def on_call(est, td, loss):
        info = ests.get(id(est))
        keys = est.tensor_keys
        if info is None:
            cfg = _find_config(sys._getframe(1))
            info = ests[id(est)] = {
                "cls": type(est).__name__, "loss": type(loss).__name__ if loss is not None else None, "site": user_site(),
                "term_key": str(keys.terminated), "done_key": str(keys.done),
                "gamma": float(est.gamma) if hasattr(est, "gamma") else None,
                "lmbda": float(est.lmbda) if getattr(est, "lmbda", None) is not None else None,
                "config": {k: list(v) for k, v in cfg.items()}, "calls": 0, "flag_calls": 0, "rows": 0,
                "ends": 0, "truncated": 0, "read_terminal_not_terminated": 0, "missed_done": 0,
                "recomputed": 0, "mismatch_calls": 0, "max_err": 0.0, "mismatch_rows": 0, "recompute_rows": 0}
        info["calls"] += 1
        env_term, env_done = flag(td, "terminated"), flag(td, "done")
        est_term, est_done = flag(td, keys.terminated), flag(td, keys.done)
        if est_term is None:
            est_term = est_done
        if env_term is None or est_term is None or env_term.shape != est_term.shape:
            return
        info["flag_calls"] += 1
        info["rows"] += int(env_term.numel())
        info["read_terminal_not_terminated"] += int((est_term & ~env_term).sum())
        if env_done is not None:
            info["ends"] += int(env_done.sum())
            trunc = flag(td, "truncated")
            info["truncated"] += int(trunc.sum()) if trunc is not None and trunc.shape == env_done.shape else int((env_done & ~env_term).sum())
            if est_done is not None and est_done.shape == env_done.shape:
                info["missed_done"] += int((env_done & ~est_done).sum())

    def on_done(est, td, out, loss):
        info = ests.get(id(est))
        if info is None or type(est).__name__ != "GAE":
            return
        n = info["calls"]
        if not (n <= RECOMPUTE_FIRST or n % RECOMPUTE_EVERY == 0):
            return
        keys = est.tensor_keys
        out = out if out is not None else td
        adv = out.get(keys.advantage, None)
        value = out.get(keys.value, None)
        nxt = out.get(("next", keys.value) if isinstance(keys.value, str) else ("next", *keys.value), None)
        reward = td.get(("next", keys.reward) if isinstance(keys.reward, str) else ("next", *keys.reward), None)
        term, done = flag(td, "terminated"), flag(td, "done")
        if any(x is None for x in (adv, value, nxt, reward, term, done)) or td.batch_dims == 0 or out.get("shifted_valid", None) is not None:
            return
        if getattr(est, "average_gae", False) or not (adv.shape == value.shape == nxt.shape == reward.shape == term.shape == done.shape):
            return
        time_dim = est._get_time_dim(None, td)
        with torch.no_grad():
            ours = _gae(reward, value.detach(), nxt.detach(), term, done, float(est.gamma), float(est.lmbda), time_dim)
            scale = float(ours.abs().mean()) + 1e-8
            err = (adv.detach().double() - ours).abs() / scale
        info["recomputed"] += 1
        info["recompute_rows"] += int(err.numel())
        bad = int((err > TOL).sum())
        info["mismatch_rows"] += bad
        info["mismatch_calls"] += bad > 0
        info["max_err"] = max(info["max_err"], float(err.max()))

    def summarise():
        sec["estimators"] = list(ests.values())

    last = {"td": None}

    def on_call_seen(est, td, loss):
        last["td"] = td
        on_call(est, td, loss)

    def on_estimates(est, td, values):
        # e_value_range reports every forward and every direct est.value_estimate(td) (DQNLoss,
        # SACLoss, TD3Loss call it so, not est(td)); a forward was seen above with its td
        if td is None or td is last["td"]:
            return
        from .patches import _state

        stack = _state().loss_stack
        on_call(est, td, stack[-1] if stack else None)

    hub.on("estimator_call", on_call_seen)
    hub.on("value_estimates", on_estimates)
    hub.on("estimator_done", on_done)
    hub.summariser(summarise)


def _near(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(b))


def _two_estimators(ests: list[dict]) -> list[str]:
    """A loss that computed advantages with its own estimator while the script called another
    one with other gamma/lmbda: the script's settings never reach the loss (its output was not
    in the batches the loss got, e.g. a replay buffer filled before the estimator ran).
    pytorch/rl#2462 (ClipPPOLoss's default GAE(gamma=0.99, lmbda=0.95) used in its place)."""
    mine = [e for e in ests if not e["loss"] and e["calls"]]
    faults = []
    for own in (e for e in ests if e["loss"] and e["calls"]):
        for other in mine:
            diff = [f"{k} {own[k]:g} vs {other[k]:g}" for k in ("gamma", "lmbda")
                    if own.get(k) is not None and other.get(k) is not None and not _near(own[k], other[k])]
            if diff:
                faults.append(f"{own['loss']} computed advantages itself on {own['calls']} calls with its own {own['cls']} "
                              f"(first at {own['site']}), not with the script's {other['cls']} (called {other['calls']} times, first at "
                              f"{other['site']}): {', '.join(diff)}; the script's estimator output never reached the loss's batches; "
                              "fix: run the script's estimator on the data the loss trains on before sampling it (rb.extend after "
                              f"advantage_module(data)), or loss.make_value_estimator(ValueEstimators.{own['cls']}, gamma=..., lmbda=...)")
    return faults


def judge(obs: dict) -> str:
    sec = obs["sections"].get(NAME, {})
    ests = sec.get("estimators", [])
    if not ests:
        raise sr.CheckSkipped("no value estimator was called")
    judged = [e for e in ests if e["flag_calls"]]
    if not judged:
        raise sr.CheckSkipped("the value estimator's data held no ('next', 'terminated') flag of the env to compare with: not measured")
    faults, notes = _two_estimators(ests), []
    for e in judged:
        head = f"{e['cls']}{' of ' + e['loss'] if e['loss'] else ''} (first called at {e['site']})"
        params = f"gamma {e['gamma']:g}" + (f", lmbda {e['lmbda']:g}" if e["lmbda"] is not None else "")
        if e["read_terminal_not_terminated"] or e["term_key"] not in ("terminated", "('terminated',)"):
            seen = (f"{e['read_terminal_not_terminated']} of {e['rows']} steps it read as terminal were not terminated in the env's "
                    f"('next', 'terminated') ({e['truncated']} truncated steps seen)") if e["read_terminal_not_terminated"] else \
                "no such step was seen yet"
            faults.append(f"{head} reads termination from ('next', '{e['term_key']}'), not the env's ('next', 'terminated'): {seen}; "
                          "a truncated step is then treated as the end of the task and its next value is dropped; "
                          "fix: leave the estimator's keys at their defaults (remove set_keys(terminated=...)/(done=...) remaps), "
                          "so truncation only cuts the trajectory")
        if e["missed_done"]:
            faults.append(f"{head} reads episode ends from ('next', '{e['done_key']}'), which missed {e['missed_done']} of the env's "
                          f"{e['ends']} ends: advantages run across episode boundaries; fix: read ('next', 'done')")
        if e["mismatch_calls"]:
            faults.append(f"{head}: advantages recomputed independently with the env's flags differ at {e['mismatch_rows']} of "
                          f"{e['recompute_rows']} steps on {e['mismatch_calls']} of {e['recomputed']} calls (max relative error {e['max_err']:.3g})")
        for what, (value, where) in e["config"].items():
            mine = e.get(what)
            if mine is not None and not _near(mine, value):
                faults.append(f"{head} uses {what} {mine:g} but the script's configuration has {where}={value:g}; "
                              f"fix: pass it on, loss.make_value_estimator(ValueEstimators.GAE, {what}={where}) or GAE({what}={where}, ...)")
        if not faults:
            cfg = ", ".join(f"{where}={value:g}" for value, where in e["config"].values())
            rec = (f"; advantages recomputed independently on {e['recomputed']} calls ({e['recompute_rows']} steps) agree "
                   f"(max relative error {e['max_err']:.2g})") if e["recomputed"] else ""
            trunc = f"{e['truncated']} truncated steps bootstrapped" if e["truncated"] else "no truncated step in its data (a remap of truncation would not show)"
            notes.append(f"{head}: {params}{' (matches ' + cfg + ')' if cfg else ' (no configuration value visible to compare)'}; "
                         f"reads ('next', 'terminated') and ('next', 'done') as the env writes them over {e['rows']} steps at "
                         f"{e['flag_calls']} calls: {e['ends']} episode ends, {trunc}{rec}")
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    return " | ".join(notes)
