"""One rung of the probe ladder, inside the audited child (child.py installs it with --probe).

Every leaf env the script builds gets the rung's dynamics (probe_env.py); the run stops at
the rung's frame budget (ladder_rungs.frames, by the family of the first loss module built;
a ``Collector`` whose ``total_frames`` is smaller is extended to it), or when the script
ends; then the networks of the loss module the script called most are judged against the
rung's known answer and the verdict goes to the ``ladder`` section:

- values (rungs 1-3): the critic of the loss (``critic_network`` of PPO/A2C,
  ``qvalue_network`` of SAC/TD3 over its stacked copies, ``value_network`` of DQN/DDPG),
  run with the loss's own parameters (``loss.<name>_params.to_module``: SAC and TD3 train
  copies, not the module the script built) on the observation the script's env returns
  for a known probe state (its transforms applied);
- actions (rungs 4-5): the policy's deterministic action (``actor_network``, or the greedy
  action of a Q-network) stepped through the script's env; the probe's reward for it, as
  the leaf env received it (after the script's action transforms), against the best, 1.

``gamma`` is read from the last value estimator that ran (``GAE.__call__``, or
``value_estimate`` inside DQN/SAC/TD3/DDPG losses), else the loss's ``value_estimator``.
``seed`` shifts every ``torch.manual_seed(s)`` the script makes to ``s + seed`` and seeds the
probe's own generator, so that runs with different seeds are independent draws.
"""

from __future__ import annotations

import weakref

from . import ladder_judge
from . import ladder_rungs as lr
from . import probe_env

NAME = "ladder"
CONFIG: dict = {}


def configure(cfg: dict) -> None:
    """``{"rung": 1..5, "seed": int, "frames": int or None, "trace": int or None}`` (frames:
    the rung's budget instead of the family's; trace: judge every this many frames too, for
    measuring budgets)."""
    CONFIG.clear()
    CONFIG.update(cfg)


def install(hub) -> None:
    import torch
    from torchrl.objectives.value import ValueEstimatorBase

    from .patches import wrap
    from .probe import AuditStop

    rung, seed = int(CONFIG["rung"]), int(CONFIG.get("seed", 0))
    sec = hub.section(NAME)
    sec.update(rung=rung, seed=seed, leaves=0, leaf_types=[], verdict=None, error=None, unsupported=None, budget=None)
    st = {"losses": {}, "calls": {}, "collectors": [], "envs": [], "steps": {}, "dyn": [], "gamma": None,
          "judged": False, "judging": False, "family": None}

    if seed:
        orig_seed = torch.manual_seed

        def manual_seed(s):
            return orig_seed(int(s) + seed)

        torch.manual_seed = manual_seed

    def budget(fam: str) -> int:
        return int(CONFIG.get("frames") or lr.frames(fam, rung))

    def env_built(env, site, by_user):
        st["envs"].append(_held(env))
        if probe_env.is_leaf(env):
            st["dyn"].append(probe_env.attach(env, rung, seed))
            sec["leaves"] += 1
            if type(env).__name__ not in sec["leaf_types"]:
                sec["leaf_types"].append(type(env).__name__)

    def env_step(env, out):
        st["steps"][id(env)] = st["steps"].get(id(env), 0) + 1

    def loss_built(loss, site):
        fam = lr.family(type(loss).__name__)
        if st["family"] is None or (st["family"] == "other" and fam != "other"):
            st["family"] = fam
            hub.max_frames = budget(fam)
            sec["budget"] = hub.max_frames
            for ref in st["collectors"]:
                _extend(ref(), hub.max_frames)

    def loss_forward(loss, td, out):
        st["losses"][id(loss)] = _held(loss)
        st["calls"][id(loss)] = st["calls"].get(id(loss), 0) + 1

    def collector_built(col, site):
        reason = unsupported_collector(type(col).__name__)
        if reason:
            stop_unsupported(reason)
        st["collectors"].append(weakref.ref(col))
        _extend(col, hub.max_frames)

    def gamma_of(est, *rest):
        g = getattr(est, "gamma", None)
        if g is not None:
            st["gamma"] = float(g)

    _parallel_as_serial()
    hub.on("env_built", env_built)
    hub.on("env_step", env_step)
    hub.on("loss_built", loss_built)
    hub.on("loss_forward", loss_forward)
    hub.on("collector_built", collector_built)
    hub.on("estimator_call", gamma_of)
    wrap(hub, ValueEstimatorBase, "value_estimate", after=lambda est, a, k, out: gamma_of(est))

    def trace():
        """Measurement (``trace``: N): judge every N frames without stopping (the frames at
        which a correct agent first passes and then stays passing)."""
        every = CONFIG.get("trace")
        if not every or hub.meta["frames"] < st.get("next_trace", every):
            return
        st["next_trace"] = hub.meta["frames"] + every
        st["judging"] = True
        try:
            verdict = ladder_judge.judge(rung, st)
            sec.setdefault("trace", []).append([hub.meta["frames"], hub.meta["optimizer_steps"], verdict.get("ok"),
                                                [c.get("got") for c in verdict.get("checks", [])]])
        except Exception as err:
            sec.setdefault("trace", []).append([hub.meta["frames"], hub.meta["optimizer_steps"], None, f"{type(err).__name__}: {err}"[:200]])
        finally:
            st["judging"] = False

    def interim():
        """Judge every budget/JUDGE_EVERY frames once training started: the judgment at half the
        budget goes to ``mid`` (the parent tells "still closing in" from "not closing in"), and a
        rung that passed STABLE_JUDGMENTS times in a row with every value steady (each check's
        spread at most half its tolerance) stops early: a correct fast learner need not run the
        budget of the slowest known-good recipe. A value crossing the band on its way elsewhere
        moves more than that between judgments."""
        if CONFIG.get("trace") or hub.max_frames is None or not hub.meta["optimizer_steps"]:
            return
        every = max(1, hub.max_frames // lr.JUDGE_EVERY)
        if hub.meta["frames"] < st.get("next_judgment", every):
            return
        st["next_judgment"] = hub.meta["frames"] + every
        st["judging"] = True
        try:
            verdict = ladder_judge.judge(rung, st)
        except Exception:  # the final judgment reports its own errors
            return
        finally:
            st["judging"] = False
        got = [c.get("got") for c in verdict.get("checks", [])]
        if "mid" not in sec and hub.meta["frames"] >= hub.max_frames // 2:
            sec["mid"] = {"frames": hub.meta["frames"], "got": got}
        history = st.setdefault("history", [])
        history.append((hub.meta["frames"], verdict))
        recent = history[-lr.STABLE_JUDGMENTS:]
        if len(recent) == lr.STABLE_JUDGMENTS and all(v.get("ok") for _, v in recent) and _steady([v for _, v in recent]):
            sec["verdict"] = verdict
            sec["early"] = [f for f, _ in recent]
            st["judged"] = True
            sec["frames"], sec["optimizer_steps"] = hub.meta["frames"], hub.meta["optimizer_steps"]
            sec["ends"] = sum(d.ends for d in st["dyn"])
            hub.stop_reason = "rung-passed"
            raise AuditStop("rung-passed")

    def judge_once():
        if st["judged"]:
            return
        st["judged"] = True
        st["judging"] = True
        try:
            sec["verdict"] = ladder_judge.judge(rung, st)
        except probe_env.ProbeUnsupported as err:
            sec["unsupported"] = str(err)
        except Exception as err:  # reported, never raised into the user's run
            sec["error"] = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
        finally:
            st["judging"] = False
            sec["frames"] = hub.meta["frames"]
            sec["optimizer_steps"] = hub.meta["optimizer_steps"]
            sec["ends"] = sum(d.ends for d in st["dyn"])

    own_checkpoint = hub.checkpoint

    def checkpoint(collecting: bool) -> None:
        if st["judging"]:  # the judge's own resets and steps are not the script's collection
            return
        try:
            own_checkpoint(collecting)
        except AuditStop:
            judge_once()
            raise
        if collecting:
            trace()
            interim()

    hub.checkpoint = checkpoint
    hub.on("target_ended", judge_once)

    def stop_unsupported(reason: str):
        sec["unsupported"] = reason
        st["judged"] = True
        hub.stop_reason = "probe-unsupported"
        raise AuditStop("probe-unsupported")

    def unsupported_guard(env, out):  # a spec the probe cannot carry: stop at once, exit 5
        for dyn in st["dyn"]:
            if dyn.space is None:
                try:
                    dyn._ensure()
                except probe_env.ProbeUnsupported as err:
                    stop_unsupported(str(err))

    hub.on("env_reset", unsupported_guard)


def _held(obj):
    """A strong reference read like a weakref (``ref()``). The judgment at the target's end
    runs after a script's ``main()`` returned and freed its locals: a weakref to its loss
    module or env would be dead by then and the rung reported 'no loss module was called'
    (found by a newcomer trial on a script that trained 640 frames)."""
    return lambda: obj


def _steady(verdicts: list) -> bool:
    """Whether every numeric check moved at most half its tolerance (0.05 where it has none)
    across ``verdicts`` (the same rung's judgments, oldest first)."""
    for i, check in enumerate(verdicts[-1]["checks"]):
        if check.get("info"):  # context (SAC's entropy term), not a known answer
            continue
        values = [v["checks"][i].get("got") for v in verdicts if i < len(v["checks"])]
        if not all(isinstance(x, (int, float)) for x in values) or len(values) < len(verdicts):
            return False
        if max(values) - min(values) > check.get("tol", 0.1) / 2:
            return False
    return True


def unsupported_collector(name: str) -> str | None:
    """Why a collector class cannot be probed (its envs live in worker processes), or None."""
    if any(word in name for word in ("Multi", "Async", "Distributed", "Ray")):
        return (f"{name} collects in worker processes, whose envs the probe does not reach: probe the same script "
                "with a Collector over the same env (a ParallelEnv is run as a SerialEnv here)")
    return None


def _parallel_as_serial() -> None:
    """``ParallelEnv(...)`` builds a ``SerialEnv`` with the same arguments (its ParallelEnv-only
    keywords dropped): the sub-envs then live in this process, where the probe reaches them
    (a spawned worker's envs are built from the factory in a fresh interpreter). Same specs,
    batch size and transforms; the probe judges learning, not process plumbing."""
    import inspect

    from torchrl.envs import ParallelEnv, SerialEnv

    accepted = set(inspect.signature(SerialEnv.__init__).parameters)

    def __new__(cls, *args, **kwargs):
        # mp_start_method is in SerialEnv's signature (BatchedEnvBase's) but it raises on "spawn"
        return SerialEnv(*args, **{k: v for k, v in kwargs.items() if k in accepted and k != "mp_start_method"})

    ParallelEnv.__new__ = __new__


def _extend(col, frames) -> None:
    """Raise a collector's ``total_frames`` to the rung's budget (the ladder owns the length)."""
    total = getattr(col, "total_frames", None)
    if col is None or frames is None or not isinstance(total, int) or total <= 0 or total >= frames:
        return
    per = int(getattr(col, "frames_per_batch", 0) or getattr(col, "requested_frames_per_batch", 0) or 1)
    col.total_frames = -(-frames // per) * per + per
