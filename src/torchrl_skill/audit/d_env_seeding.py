"""env-seeding: does an env re-seed torch's global RNG while the script trains?

``torch.manual_seed`` (the same function as ``torch.random.manual_seed``) is watched while
an env's ``_set_seed`` or ``_reset`` is on the stack (this module wraps it; event
``global_reseed``):
which env class, which method, the user line, and how many frames had been collected.
``EnvBase.set_seed(seed)`` calls ``self._set_seed(seed)`` and seeds nothing else
(torchrl/envs/common.py 0.14.1), so an env that calls ``torch.manual_seed`` there rewinds the
global RNG that the policy's sampling, exploration noise and replay-buffer sampling draw
from (error-index entry ``env-reseeds-global-rng``). Fault: such a call from user code after
the first frame was collected (an evaluation env re-seeded before every evaluation, a
``_reset`` that re-seeds): from then on training replays the same random stream. One call
before collection acts as the script's own ``torch.manual_seed`` and is only noted; a call
made by library code (``GenesisWrapper._set_seed``, torchrl/envs/libs/genesis.py) is noted,
not failed.

Not seen: ``ParallelEnv`` workers (they call ``torch.manual_seed`` in their own process,
torchrl/envs/batched_envs.py 0.14.1) and a ``manual_seed`` the target bound by name
(``from torch import manual_seed``) before importing torchrl.
"""

from __future__ import annotations

import functools
import sys

from torchrl_skill.report import skill_report as sr

from .evidence import need
from .probe import AuditStop, frame_file, is_library_file, user_site

NAME = "env-seeding"
_SEEDING_METHODS = ("_set_seed", "_reset")


def _seeding_env(frame, env_base):
    """``(env, method, by_library)`` for the nearest ``EnvBase._set_seed``/``_reset`` frame at
    or above ``frame``, or None; ``by_library``: no user-code frame from ``frame`` up to it
    (a library env re-seeds, not the user's)."""
    by_library = True
    while frame is not None:
        by_library = by_library and is_library_file(frame_file(frame))
        if frame.f_code.co_name in _SEEDING_METHODS and isinstance(frame.f_locals.get("self"), env_base):
            return frame.f_locals["self"], frame.f_code.co_name, by_library
        frame = frame.f_back
    return None


def _wrap_manual_seed(hub) -> None:
    """Emit ``global_reseed(env, seed, site, by_library, method)`` when ``torch.manual_seed``
    (the same function as ``torch.random.manual_seed``) is called under an env's ``_set_seed``
    or ``_reset``, then seed as asked."""
    import torch
    from torchrl.envs import EnvBase

    orig = torch.manual_seed
    if getattr(orig, "_audit_wrapped", False):
        return

    @functools.wraps(orig)
    def manual_seed(seed):
        if hub.active():
            try:
                found = _seeding_env(sys._getframe(1), EnvBase)
                if found is not None:
                    env, method, by_library = found
                    hub.emit("global_reseed", env, seed, user_site(), by_library, method)
            except AuditStop:
                raise
            except Exception as err:
                hub.probe_error(f"global_reseed:{__name__}", err)
        return orig(seed)

    manual_seed._audit_wrapped = True
    torch.manual_seed = manual_seed
    torch.random.manual_seed = manual_seed


def install(hub) -> None:
    from .probe import caller_is_user

    _wrap_manual_seed(hub)
    sec = hub.section(NAME)
    calls: dict[str, dict] = {}
    seeded = {"calls": 0}

    def on_reseed(env, seed, site, in_library, method):
        where = f"{type(env).__name__}.{method}"
        info = calls.setdefault(f"{where} {site}", {"where": where, "site": site, "library": bool(in_library),
                                                     "before": 0, "during": 0, "first_frame": None, "seeds": []})
        frames = hub.meta["frames"]
        info["during" if frames else "before"] += 1
        if frames and info["first_frame"] is None:
            info["first_frame"] = frames
        if len(info["seeds"]) < 4 and str(seed) not in info["seeds"]:
            info["seeds"].append(str(seed))

    def summarise():
        sec["calls"] = list(calls.values())
        sec["set_seed_calls"] = seeded["calls"]

    def on_seed(env):
        if caller_is_user():  # the script's own set_seed calls, not those a batched env makes
            seeded["calls"] += 1

    hub.on("global_reseed", on_reseed)
    hub.on("env_seed", on_seed)
    hub.summariser(summarise)


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def _words(where: str) -> str:
    """The entry's cause and fix; its cause names ``_set_seed``, so a ``_reset`` gets the fix only."""
    from . import cause_and_fix

    text = cause_and_fix("env-reseeds-global-rng")
    return text if where.endswith("._set_seed") else "fix:" + text.split("; fix:", 1)[1]


def judge(observed: dict) -> str:
    sec = observed["sections"].get(NAME, {})
    calls, n_seed = sec.get("calls", []), sec.get("set_seed_calls", 0)
    faults, notes = [], []
    for c in calls:
        seeds = ", ".join(c["seeds"])
        if c["during"] and not c["library"]:
            before = f", {_times(c['before'])} before it" if c["before"] else ""
            faults.append(f"{c['where']} called torch.manual_seed at {c['site']} {_times(c['during'])} after collection started "
                          f"(first at frame {c['first_frame']}{before}; seeds {seeds}): each call rewinds torch's global RNG mid-training, "
                          f"so the policy's samples and exploration noise repeat from there; {_words(c['where'])}")
        elif c["library"]:
            notes.append(f"{c['where']} re-seeded torch's global RNG from library code {_times(c['before'] + c['during'])} (seeds {seeds})")
        else:
            notes.append(f"{c['where']} at {c['site']} re-seeded torch's global RNG {_times(c['before'])}, before collection "
                         "(as a torch.manual_seed there would; an env.set_seed during training would rewind it)")
    if faults:
        raise sr.CheckFailed(" | ".join(faults))
    if not calls and not n_seed:
        raise sr.CheckSkipped("the script never called env.set_seed, and no env _reset re-seeded torch's global RNG")
    need(observed["meta"]["frames"], 1, "env seeding", "collected frames (a re-seed counts once collection started)")
    if not calls:
        return f"{n_seed} env.set_seed call{'s' if n_seed != 1 else ''} by the script and every env reset: none re-seeded torch's global RNG"
    return "; ".join(notes)
