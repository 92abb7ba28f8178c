"""audit_run.py --probe (parent side): run the script once per rung of the probe ladder.

Each rung is one child run (child.py with ``{"probe": ...}`` in its config: ladder_child.py
swaps the dynamics of every leaf env for the rung's, probe_env.py, stops at the rung's frame
budget and judges the loss module's networks against the known answer), so the rungs are
independent: nothing learnt on one carries to the next. Rungs run in order; each later rung
needs the one before it to pass (a failing rung names what it isolates, and the rungs above
it would only fail for the same reason). Exit 0: every rung passed; 1: a rung failed; 5
(``report.nothing_audited``): the ladder could not probe the script (it says why). The
children fork from this process once it imported torchrl (runner.fork_child), so torchrl is
imported once, not once per rung.
"""

from __future__ import annotations

from torchrl_skill.report import skill_report as sr

from . import ladder_rungs as lr

WHY_ROWS = "python $SKILL_DIR/scripts/audit_run.py TARGET -- ARGS prints them"


class CouldNotProbe(Exception):
    """The rung ran but proves nothing either way (the run row's exit 5)."""


def _fmt(c: dict) -> str:
    if c.get("info"):
        return f"{c['what']} = {c['got']}"
    want = c.get("want")
    if isinstance(want, (int, float)) and "tol" in c:
        want = f"{want:g} ± {c['tol']:g}"
    extra = f" (action {c['action']}, best {c['best']})" if "action" in c else ""
    return f"{c['what']} = {c['got']} (want {want}){extra}"


# A run stopped (by --seconds or the script's end) at 90% of the rung's budget or more is
# judged as at the budget: budgets are at least twice the frames the slowest measured
# known-good recipe needed (references/probe-ladder.md), so 90% of one still holds 1.8x.
FULL_SHARE = 0.9


def _trend(verdict: dict, mid: dict | None, frames: int, budget: int | None) -> str:
    """``" (V(s): 2.06 at 3072 frames -> 1.88 at 6144, toward 1: ...)"`` for the failing
    numeric checks, from the judgment at half the budget (ladder_child ``mid``), or ""."""
    if not mid:
        return ""
    parts, slow = [], True
    for check, before in zip(verdict["checks"], mid.get("got", [])):
        want, now = check.get("want"), check.get("got")
        if check["ok"] or not all(isinstance(x, (int, float)) for x in (want, now, before)):
            continue
        closer = abs(now - want) < 0.8 * abs(before - want)
        slow = slow and closer
        parts.append(f"{check['what']}: {before} at {mid['frames']} frames -> {now} at {frames}, "
                     f"{'toward' if closer else 'not toward'} {want:g}")
    if not parts:
        return ""
    hint = (f"still closing in: perhaps only slow at this budget (a small learning rate, few updates per frame); "
            f"--max-frames {2 * (budget or frames)} tells slow from wrong" if slow else "not closing in: wrong, not slow")
    return f" ({'; '.join(parts)}: {hint})"


def run_rung(args, rung: int) -> dict:
    """Run the target on ``rung`` and return its ``ladder`` section with the run's facts
    (``end``, ``frames``, ``log_tail``). Raises ``skill_report.CannotRun`` (exit 2) when the
    target cannot be run at all, as the plain audit does."""
    from . import runner

    spec = args.target
    cfg = {"rung": rung, "seed": args.probe_seed, "frames": args.max_frames}
    outcome = runner.run(spec, args.script_args, args.seconds, args.max_frames or lr.DEFAULT_FRAMES * 4, args.log,
                         extra={"probe": cfg})
    observed = outcome.observed
    log = [ln.strip() for ln in outcome.log.strip().splitlines() if ln.strip()]
    tail = " / ".join(ln[:200] for ln in log[-3:]) or "(no output)"
    if not observed:
        sr.cannot_run(f"the audited process ended without reporting (last output: {tail})", "run the target alone to check it starts")
    section = dict(observed["sections"].get("ladder", {}))
    section.update(end=observed["end"], meta=observed["meta"], log_tail=tail, killed=outcome.killed)
    return section


def judge_rung(rung: int, got: dict) -> str:
    """The row of one rung: the pass detail, or raise CheckFailed / CouldNotProbe."""
    info = lr.RUNGS[rung]
    end, meta = got["end"], got["meta"]
    how = end.get("how")
    if how in ("cannot-run", "probe-failed") or (not meta.get("built") and how in ("raised", "exit", "stuck", "finished")):
        reason = end.get("error") or (end.get("reason") or ["the target could not be imported"])[-1]
        sr.cannot_run(f"the target could not run under the probe: {reason} (last output: {got['log_tail']})",
                      "run it alone first: python $SKILL_DIR/scripts/audit_run.py TARGET -- ARGS")
    if got.get("unsupported"):
        raise CouldNotProbe(f"the env's specs cannot carry a probe: {got['unsupported']}")
    if got.get("killed") or how == "stuck":
        raise CouldNotProbe(f"the run hung under the probe (stopped at {end.get('site') or meta.get('stuck_at', '?')}); last output: {got['log_tail']}")
    verdict = got.get("verdict")
    if got.get("error"):
        raise CouldNotProbe(f"the ladder's judge raised {got['error']} (an auditor bug to report); last output: {got['log_tail']}")
    if how == "raised":
        raise CouldNotProbe(f"the script raised {end.get('error')} (at {end.get('site')}) on probe data: a script that reads "
                            f"its env's dynamics (a reward threshold, a fixed episode length) cannot be probed; last output: {got['log_tail']}")
    if how == "exit":
        raise CouldNotProbe(f"the script exited with code {end.get('exit_code')} on probe data; last output: {got['log_tail']}")
    if not verdict or verdict.get("ok") is None:
        raise CouldNotProbe((verdict or {}).get("reason") or f"nothing to judge: no loss module was called (last output: {got['log_tail']})")
    frames, steps, budget = got.get("frames", meta.get("frames", 0)), got.get("optimizer_steps", 0), got.get("budget")
    if not steps:
        raise CouldNotProbe(f"no optimizer step in {frames} frames: the ladder judges what the script trained "
                            "(its init_random_frames may exceed the rung's budget: pass --max-frames N)")
    where = (f"after {frames} frames, {steps} optimizer steps; {verdict['loss']} ({verdict['family']}), gamma {verdict['gamma']:.4g}, "
             f"{verdict['env']} over {got.get('leaves', '?')} probe leaf env(s) ({', '.join(got.get('leaf_types', []))})")
    checks = "; ".join(_fmt(c) for c in verdict["checks"])
    if got.get("early") and verdict["ok"]:
        return (f"{checks} {where}; passed early: at each of the judgments at {', '.join(str(f) for f in got['early'])} frames, "
                f"steady (budget {budget})")
    if budget and frames < FULL_SHARE * budget:
        more = -(-budget // max(frames, 1))
        raise CouldNotProbe(f"the script stopped after {frames} of the rung's {budget} frames ({how}"
                            f"{': ' + str(end.get('reason')) if end.get('reason') else ''}); a correct agent is only known to pass at "
                            f"{budget}: give it about {more}x the frames (its total_frames or iterations; probe episodes last 1-2 "
                            f"steps, so a script collecting with env.rollout(max_steps) until done gets fewer frames per iteration "
                            f"than on its own env) or more --seconds; so far: {checks}")
    if not verdict["ok"]:
        trend = _trend(verdict, got.get("mid"), frames, budget)
        bad = "; ".join(_fmt(c) for c in verdict["checks"] if not c["ok"]) + trend
        held = "; ".join(_fmt(c) for c in verdict["checks"] if c["ok"])
        numeric = all(isinstance(c.get("want"), (int, float)) for c in verdict["checks"] if not c["ok"])
        if numeric and "still closing in" in trend:
            # every failing value still moves toward its answer: slow at this budget is not
            # wrong (the bundled modern_example at lr 3e-4 settles near 17k frames on rung 1)
            raise CouldNotProbe(f"not settled at the rung's budget: {bad} {where}; a pass at twice the budget means "
                                "slow, not wrong")
        raise sr.CheckFailed(f"{bad}{' (held: ' + held + ')' if held else ''} {where}. Rung {rung} isolates {info['isolates']}. "
                             f"Nearest audit rows: {', '.join(info['rows'])} ({WHY_ROWS}); "
                             "how to read it: references/probe-ladder.md, 'Reading a failure'")
    return f"{checks} {where}"


def _rung(rung: int, args, ladder_report):
    """Run ``rung`` and judge it; a rung that cannot be probed sets the report's ``nothing_audited`` (exit 5)."""
    got = run_rung(args, rung)
    try:
        detail = judge_rung(rung, got)
    except CouldNotProbe as err:
        ladder_report.nothing_audited = ladder_report.nothing_audited or f"rung {rung}: {err}"
        raise sr.CheckSkipped(f"could not probe: {err}") from None
    return sr.Passed(detail, True)


# One function per rung: each takes the value the rung below gives when it passed, so a
# failing rung skips the ones above it (skill_report.run_declared).
def rung_1(args, ladder_report):
    """Constant reward: the critic's value is 1."""
    return _rung(1, args, ladder_report)


def rung_2(args, ladder_report, passed_1):
    """Observation-dependent reward: the critic's value follows the observation (+1 / -1)."""
    return _rung(2, args, ladder_report)


def rung_3(args, ladder_report, passed_2):
    """Two steps: V(B) = 1, V(A) = gamma x V(B)."""
    return _rung(3, args, ladder_report)


def rung_4(args, ladder_report, passed_3):
    """Action-dependent reward: the policy's action earns the best reward."""
    return _rung(4, args, ladder_report)


def rung_5(args, ladder_report, passed_4):
    """Reward depending on action and observation: the best action in each state."""
    return _rung(5, args, ladder_report)


RUNG_CHECKS = {1: rung_1, 2: rung_2, 3: rung_3, 4: rung_4, 5: rung_5}


def check_setup(args):
    """What the ladder will run: the target, the seed, the frames per rung; imports torchrl
    here once so that each rung's child is forked warm (runner.fork_child)."""
    from torchrl_skill.runtime import user_code as _user_code

    from . import runner

    if not args.target:  # the bundled example trains 256 frames at lr 3e-4: a smoke run, not a learner to probe
        sr.cannot_run("--probe needs the training script to probe", "python $SKILL_DIR/scripts/audit_run.py train.py --probe -- ARGS")
    target = _user_code.parse_target(args.target, script_ok=True)
    if runner.START is runner.start_child:
        import torchrl  # noqa: F401  (the rungs' children fork from here with it imported)

        runner.START = runner.fork_child
    per = f"{args.max_frames} frames per rung (--max-frames)" if args.max_frames else \
        "frames per rung by the family of the loss module: " + "; ".join(
            f"{fam} {'/'.join(str(n) for n in table.values())}" for fam, table in lr.FRAMES.items())
    return (f"{target.label}: rungs 1-5 in order, each a run of its own on probe envs with the script's specs (seed {args.probe_seed}); "
            f"{per}; at most {args.seconds:g} s each")


CHECKS = [
    sr.Check("probe:setup", check_setup),
    *[sr.Check(f"rung-{k}:{lr.RUNGS[k]['name']}", RUNG_CHECKS[k], gives=f"passed_{k}") for k in lr.RUNGS],
]


def run_checks(args, report) -> None:
    """Run the ladder's CHECKS (audit_run.py --probe)."""
    sr.run_declared(CHECKS, report, args=args, ladder_report=report)
