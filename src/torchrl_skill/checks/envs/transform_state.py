"""Probe of check_user_env.py: does a transform rewrite state that the env under it reads back?

An env whose ``_step`` computes the next state from the state keys of its input (PendulumEnv,
most hand-written envs) is "stateless": under a TransformedEnv it receives the previous
output as the transforms left it. A transform that rewrites such a key in place (a scaler
with ``out_keys == in_keys``, ObservationNorm or VecNormV2 on ``"th"``) and does not undo it
in ``_inv_call`` makes every next step start from the rewritten value; specs, seeds and
rollouts all still look fine. The probe measures it: one reset and two steps are recorded
at the base env, then the base env's ``_step`` is run again from the input it received and
from the same input with the rewritten keys put back as the base env returned them.
Facts observed on torchrl 0.14.1 / tensordict 0.14.3.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from torchrl_skill.checks.envs.env_probes import base_env


def _differs(a, b) -> bool:
    """True when two leaves hold different values. Floats are compared to float32 precision:
    DoubleToFloat rounding a float64 state is not a change of the dynamics."""
    import torch

    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    if a.shape != b.shape:
        return True
    if a.is_floating_point() or b.is_floating_point():
        return not torch.allclose(a.double(), b.double(), rtol=1e-5, atol=1e-6, equal_nan=True)
    return not torch.equal(a, b)


def _leaf_gaps(a, b) -> dict:
    """``{key: largest |a - b|}`` (float; 1.0 for a non-float leaf that differs, inf for a
    key only one side holds) over the leaves where tensordicts ``a`` and ``b`` differ."""
    ka, kb = set(a.keys(True, True)), set(b.keys(True, True))
    gaps = {}
    for key in ka | kb:
        if key not in ka or key not in kb:
            gaps[key] = float("inf")
            continue
        x, y = a.get(key), b.get(key)
        if not _differs(x, y):
            continue
        same_shape = getattr(x, "shape", None) == getattr(y, "shape", None)
        floats = same_shape and x.is_floating_point() and y.is_floating_point()
        gaps[key] = (x.double() - y.double()).abs().max().item() if floats else 1.0
    return gaps


@contextlib.contextmanager
def _recording(env):
    """Record every ``env._reset``/``env._step`` call as ``(input or None, output)`` clones."""
    calls, own = [], {n: vars(env)[n] for n in ("_step", "_reset") if n in vars(env)}
    step, reset = env._step, env._reset

    def rec_step(tensordict):
        given = tensordict.clone()
        out = step(tensordict)
        calls.append((given, out.clone()))
        return out

    def rec_reset(tensordict=None, **kwargs):
        out = reset(tensordict, **kwargs)
        calls.append((None, out.clone()))
        return out

    env._step, env._reset = rec_step, rec_reset
    try:
        yield calls
    finally:
        for name in ("_step", "_reset"):
            if name in own:
                setattr(env, name, own[name])
            else:
                delattr(env, name)


@dataclass
class Handover:
    """One handover from the base env to its next ``_step``: ``produced`` what it returned
    (a ``_reset`` output or a ``_step`` output), ``received`` the ``_step`` input it got
    next, ``keys`` its observation/state keys that the transforms rewrote in the output the
    user sees and did not restore in ``received``."""

    produced: object
    received: object
    keys: list


def transform_state_changes(env, seed: int = 0) -> list[Handover] | None:
    """The handovers (reset -> step 1, step 1 -> step 2, each only when it holds a rewritten
    key) of the base env under the transforms of ``env``, recorded over one reset and two
    ``rand_step`` calls after ``torch.manual_seed(seed)`` and ``env.set_seed(seed)``. None
    when the base env was not called as exactly one ``_reset`` then two ``_step`` (a wrapper
    that resets or steps more): no verdict.

    TransformedEnv._step (torchrl/envs/transforms/_base.py, 0.14.1) hands the base env
    ``transform.inv(tensordict)``: the previous output as the transforms rewrote it, less
    what ``_inv_call`` undoes. Floats equal to float32 precision count as unchanged."""
    import torch
    from torchrl.envs.utils import step_mdp

    base = base_env(env)
    keys = dict.fromkeys([*base.full_observation_spec.keys(True, True), *base.full_state_spec.keys(True, True)])
    torch.manual_seed(seed)
    env.set_seed(seed)
    with _recording(base) as calls:
        reset = env.reset().clone()
        first = env.rand_step(reset.clone())
        env.rand_step(step_mdp(first))
    if [given is None for given, _ in calls] != [True, False, False]:
        return None
    found = []
    for produced, shown, received in [(calls[0][1], reset, calls[1][0]), (calls[1][1], first.get("next"), calls[2][0])]:
        changed = []
        for key in keys:
            tds = (produced, shown, received)
            if all(key in td.keys(True, True) for td in tds) and _differs(produced.get(key), shown.get(key)) \
                    and _differs(produced.get(key), received.get(key)):
                changed.append(key)
        if changed:
            found.append(Handover(produced, received, changed))
    return found


def restored_step_gaps(env, handover: Handover, seed: int = 0) -> tuple[dict, dict] | None:
    """Run ``env._step`` (the base env) from ``handover.received`` and from the same input
    with the rewritten keys put back as ``handover.produced`` holds them: ``(gaps, by_key)``,
    ``gaps`` ``{output key: largest |difference|}`` between the two outputs (empty: the
    rewrite does not change the dynamics), ``by_key`` ``{rewritten key: bool}`` whether
    putting back that key alone changes the output. A step that raises from one input and
    not the other counts as a change (gap inf). None when two runs from the same input
    already differ (state kept inside the env, or unseeded randomness): no verdict. Each
    run follows ``torch.manual_seed(seed)`` and ``env.set_seed(seed)`` under
    ``torch.random.fork_rng`` (the caller's global RNG is left as it was)."""
    import torch

    def run(td):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            env.set_seed(seed)
            return env._step(td.clone()).clone()

    def restored(keys):
        td = handover.received.clone()
        for key in keys:
            td.set(key, handover.produced.get(key).clone())
        return td

    def gaps_from(td):
        try:
            return _leaf_gaps(control, run(td))
        except Exception as err:  # the step refuses the state it returned itself: a change all the same
            return {f"{type(err).__name__} raised": float("inf")}

    control = run(handover.received)
    if _leaf_gaps(control, run(handover.received)):
        return None
    return gaps_from(restored(handover.keys)), {k: bool(gaps_from(restored([k]))) for k in handover.keys}


def rewritten_state(env) -> tuple[list, dict | None]:
    """``(rewritten keys, finding)`` for a TransformedEnv ``env``: the base env's state keys
    that its transforms rewrite (over one reset and two steps), and ``None`` when putting
    them back changes none of the base env's next steps, else ``{"read": keys whose own
    restoring changes the step, "writers": names of the transforms whose out_keys hold
    them, "gaps": {output key: largest |difference|} of the last changed step}``.
    Raises ``skill_report.CheckSkipped`` when no verdict is possible (the calls could not be
    paired, or ``_step`` gives two outputs for one input)."""
    from torchrl_skill.report import skill_report as sr
    from torchrl_skill.checks.envs.env_probes import transform_chain

    base = base_env(env)
    name, handovers = type(base).__name__, transform_state_changes(env)
    if handovers is None:
        raise sr.CheckSkipped(f"{name} was not called as one _reset then two _step: cannot pair its outputs with its inputs")
    changed, finding = [], None
    sr.evidence(len(handovers), "base-env steps replayed")
    for handover in handovers:
        result = restored_step_gaps(base, handover)
        if result is None:
            raise sr.CheckSkipped(f"the transforms rewrite {handover.keys}; {name}._step gives two outputs for one input "
                                  "(state kept inside the env): cannot measure whether it reads them")
        changed += [k for k in handover.keys if k not in changed]
        gaps, by_key = result
        if gaps:
            read = [k for k in handover.keys if by_key[k]] or handover.keys
            writers = sorted({type(t).__name__ for t in transform_chain(env) for k in read if k in (getattr(t, "out_keys", None) or [])})
            finding = {"read": read, "writers": writers, "gaps": gaps}
    return changed, finding
