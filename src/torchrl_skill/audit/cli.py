"""Run a TorchRL training script unmodified and name its silent faults, with the evidence.

TARGET is a training script run as __main__ (train.py, its own arguments after --), or
file.py:function / package.module:function called with no arguments. It runs in a child
process whose torchrl and torch are instrumented before the target's imports run; the run
stops at --seconds (default 60), at --max-frames collected frames, or when the target
ends; without --max-frames it stops as soon as training started and every detector that
saw its component has its verdict. Each detector prints one row: PASS with what it
measured (on at least its minimum evidence), FAIL with the evidence, the file and line,
the cause and the fix, SKIP when the component is not used, or when the run ended short of
the detector's minimum evidence (it says how much it saw), or "not measured" when the
auditor's own probe raised on it; effect monitors name a fault by what it does (what the
env receives, log-probs, gradients, values, rewards); info rows (never a fault) give the
update-to-data ratio, the frames per second and observation features of very different
scales. A run in which no optimizer stepped (it ended inside init_random_frames, or never
trains) audited nothing about training: its training row says what budget to ask for, and
the exit code is 5. The target's stdout/stderr go to a log (--log FILE keeps a copy);
nothing is written in your project. Worker processes (ParallelEnv, multi-process
collectors) are instrumented too and their events merged into the rows; the run row counts
them and names any it could not instrument. Without TARGET it audits the bundled known-good example
(sub-skills/development-and-testing/assets/modern_example.py). What each row measures:
references/run-time-audit.md.

--probe asks "does it learn now?": the script runs unmodified once per rung of a ladder of
probe envs that keep its envs' specs and have known answers (constant reward, observation-
dependent reward, two steps, action-dependent reward, action-and-observation reward); each
rung judges the networks of the loss module the script trains against the known value or
best action at a measured frame budget. Exit 0: every rung passed; 1: a rung failed (its row
names what that rung isolates and the nearest audit rows); 5: a rung could not be probed
(the row says why). references/probe-ladder.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import importlib  # noqa: E402

from torchrl_skill.report import skill_report as sr  # noqa: E402
from torchrl_skill.audit import DETECTORS, INFO  # noqa: E402
from torchrl_skill.audit import d_optimizer_coverage  # noqa: E402
from torchrl_skill.audit import worker_reports as _workers  # noqa: E402

EXAMPLE = (
    "python $SKILL_DIR/scripts/audit_run.py train.py -- --lr 3e-4\n"
    "  python $SKILL_DIR/scripts/audit_run.py my_project/train.py:main --max-frames 30000 --seconds 120 --json"
)
DEFAULT_TARGET = sr.BUNDLE_ROOT / "sub-skills" / "development-and-testing" / "assets" / "modern_example.py"
MODULES = [importlib.import_module(f"torchrl_skill.audit.{name}") for name in DETECTORS]
INFO_MODULES = [importlib.import_module(f"torchrl_skill.audit.{name}") for name in INFO]
WORKER_BLIND = "the rows saw only the processes that were instrumented"


EXIT_5_HELP = ("  5    nothing audited: no check failed, but no optimizer stepped (the training row\n"
               "       says what budget to ask for); with --probe: a rung could not be probed (its row says why)\n")


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.epilog = parser.epilog.replace("  130 ", EXIT_5_HELP + "  130 ")
    parser.usage = "%(prog)s [--probe [--probe-seed K]] [--seconds S] [--max-frames N] [--log FILE] [--json] [TARGET] [-- SCRIPT_ARGS ...]"
    parser.add_argument("target", nargs="?", metavar="TARGET", help="train.py, file.py:function or package.module:function (default: the bundled known-good example)")
    parser.add_argument("--seconds", type=sr.number_above(0.0), default=60.0, help="stop the run after this many seconds (default: 60)")
    parser.add_argument("--max-frames", type=sr.int_at_least(1), default=None, metavar="N", help="stop once N frames were collected (at the next collection call)")
    parser.add_argument("--log", type=Path, default=None, metavar="FILE", help="keep a copy of the target's stdout/stderr here")
    parser.add_argument("--probe", action="store_true",
                        help="does it learn now? run the script once per rung of the probe ladder (probe envs with its specs and "
                             "known answers; --max-frames N: frames per rung instead of the measured budget; "
                             "references/probe-ladder.md)")
    parser.add_argument("--probe-seed", type=sr.int_at_least(0), default=0, metavar="K",
                        help="with --probe: add K to every torch.manual_seed the script calls and seed the probe envs with K (default: 0)")
    own_parse = parser.parse_args

    def parse_args(argv=None, namespace=None):
        argv = list(sys.argv[1:] if argv is None else argv)
        cut = argv.index("--") if "--" in argv else len(argv)
        args = own_parse(argv[:cut], namespace)
        args.script_args = argv[cut + 1:]
        return args

    parser.parse_args = parse_args
    return parser


def _tail(log: str, n: int = 3) -> str:
    lines = [ln for ln in log.strip().splitlines() if ln.strip()]
    return " / ".join(ln.strip()[:200] for ln in lines[-n:]) or "(no output)"


def _refuse(label: str, end: dict, meta: dict, outcome, seconds: float) -> None:
    """Exit 2 with one line when the target never got as far as building a TorchRL object."""
    how = end.get("how")
    if how == "cannot-run":
        line = (end.get("reason") or ["cannot import the target"])[-1]
        reason, _, fix = line.partition(": error: ")[2].partition("; fix: ")
        sr.cannot_run(reason or line, fix)
    if how == "probe-failed":
        sr.cannot_run(f"the auditor could not instrument torchrl: {end.get('error')}", "check the stack: python scripts/check_torchrl_env.py")
    if meta.get("built"):
        return
    if how in ("raised", "interrupted"):
        sr.cannot_run(f"{label} raised {end.get('error', 'KeyboardInterrupt')} (at {end.get('site', '?')}) before building any TorchRL object",
                      "fix that error first (run the script alone to see its traceback)")
    if how == "exit":
        sr.cannot_run(f"{label} exited with code {end.get('exit_code')} before building any TorchRL object (last output: {_tail(outcome.log)})",
                      "check the script's arguments (pass them after --) and run it alone")
    if how in ("stuck", "budget") or outcome.killed:
        where = end.get("site") or meta.get("stuck_at") or "its budget"
        sr.cannot_run(f"{label} built no TorchRL object in {seconds:g} s and was stopped at {where}",
                      "find the wait or loop there, or give it more time with --seconds")
    sr.cannot_run(f"{label} ended without building any TorchRL object (env, collector, loss or replay buffer)",
                  "pass the script that trains, or file.py:function that runs the training")


def check_run(args):
    """Run the target under the auditor; hand on the observations (see _audit/probe.py)."""
    from torchrl_skill.runtime import user_code as _user_code
    from torchrl_skill.audit import runner

    spec = args.target or str(DEFAULT_TARGET)
    target = _user_code.parse_target(spec, script_ok=True)
    outcome = runner.run(spec, args.script_args, args.seconds, args.max_frames, args.log)
    observed = outcome.observed
    if not observed:
        sr.cannot_run(f"the audited process ended without reporting (last output: {_tail(outcome.log)})", "run the target alone to check it starts")
    meta, end = observed["meta"], observed["end"]
    _workers.merge(observed, MODULES + INFO_MODULES)
    _refuse(target.label, end, meta, outcome, args.seconds)
    observed["outcome"] = {"log_tail": _tail(outcome.log), "lines": len(outcome.log.splitlines()), "leftovers": outcome.leftovers,
                           "killed": outcome.killed, "label": target.label, "seconds": args.seconds}
    notes = [f"built {', '.join(meta['built'][:3])}"]
    if end.get("reason") == "verdicts":
        notes.insert(0, "stopped as soon as every detector that saw its component had its verdict (see exit)")
    notes += _workers.notes(meta)
    if meta["workers"]:
        notes.append(f"not instrumented: workers of {', '.join(meta['workers'])} ({WORKER_BLIND})")
    uninstrumented = meta.get("uninstrumented", {})
    moved = [f"{k}: {v}" for k, v in uninstrumented.items() if "(" in k]
    if moved:  # classes this torchrl/tensordict moved or dropped: the rows reading them see nothing of them
        notes.append(f"not instrumented on this torchrl: {'; '.join(moved)}")
    owned = {m.__name__ for m in MODULES + INFO_MODULES}
    stray = {k: v for k, v in meta["probe_errors"].items() if k.rpartition(":")[2] not in owned}
    if stray:  # errors of a detector's own probes are shown in that detector's row
        notes.append(f"auditor probe errors (rows may under-report): {'; '.join(f'{k}: {v}' for k, v in list(stray.items())[:3])}")
    coverage = observed["sections"].get(d_optimizer_coverage.NAME, {})
    stepped = [o["steps"] for o in coverage.get("optimizers", []) if o.get("steps")]
    steps = f"{meta['optimizer_steps']} optimizer steps"
    if len(stepped) > 1:  # the other rows count the most-stepped optimizer
        steps += f" (summed over {len(stepped)} optimizers; the most-stepped made {max(stepped)})"
    detail = (f"{target.label}: {meta.get('elapsed_s', 0):.1f} s, {meta['frames']} frames, {steps}, "
              f"{observed['outcome']['lines']} output lines; " + "; ".join(notes))
    return sr.Passed(detail, observed)


def check_exit(observed):
    """How the target ended: finished or stopped at the budget pass; a raise, a non-zero
    exit, a hang or processes left running fail."""
    end, meta, out = observed["end"], observed["meta"], observed["outcome"]
    how = end.get("how")
    if out["killed"]:
        raise sr.CheckFailed(f"the target did not stop when asked and was killed (last output: {out['log_tail']})")
    if how == "raised":
        raise sr.CheckFailed(f"{end['error']} (at {end['site']}); last output: {out['log_tail']}; the rows below cover what ran before it")
    if how == "exit":
        raise sr.CheckFailed(f"exited with code {end.get('exit_code')}; last output: {out['log_tail']}")
    if how == "stuck":
        raise sr.CheckFailed(f"no collection or optimizer step past the {out['seconds']:g} s budget; stopped at {end.get('site')}: "
                             "a wait that never returns (a worker that died, a queue read without timeout); fix that line, or raise --seconds if it was only slow")
    left = out["leftovers"] or end.get("workers_alive", [])
    if how == "finished" and left:
        raise sr.CheckFailed(f"finished but left {len(left)} processes running ({', '.join(left[:4])}; stopped by the auditor): "
                             "a plain run waits for them at exit; fix: call collector.shutdown() and env.close() in a finally block")
    if how == "budget" and end.get("reason") == "verdicts":
        done = meta.get("verdicts_in") or {}
        return (f"stopped once every detector that saw its component had its verdict ({', '.join(done.get('rows', [])) or '?'}; at "
                f"{done.get('frames', meta['frames'])} frames, {done.get('s', 0):.1f} s), after {meta['frames']} frames, {meta.get('elapsed_s', 0):.1f} s; "
                "components first used later (an evaluation every N frames) were not seen: --max-frames N runs to N frames")
    if how == "budget":
        return f"stopped at the budget ({end.get('reason')}) after {meta['frames']} frames, {meta.get('elapsed_s', 0):.1f} s"
    return f"{how} after {meta.get('elapsed_s', 0):.1f} s"


def _probe_errors(observed, module) -> str:
    """``"its EVENT probe raised ERROR; ... (an auditor bug)"`` for the exceptions the
    auditor's own listeners of ``module`` raised in the child (see probe.Hub.probe_error), or ""."""
    errors = [f"its {where.rpartition(':')[0]} probe raised {err}" for where, err in observed["meta"].get("probe_errors", {}).items()
              if where.rpartition(":")[2] == module.__name__]
    return f"{'; '.join(errors)} (an auditor bug)" if errors else ""


def detector_check(module):
    """The check of one detector or info ``module``: its ``judge``, with the exceptions its
    probes raised in the row. A probe that raised measured nothing, so a SKIP ("not used")
    becomes "not measured: ..."; a pass or a fail keeps its verdict and says what it could
    not measure."""
    def judge(observed):
        missing = observed["meta"].get("uninstrumented", {}).get(module.NAME)
        if missing:  # its install raised: an internal it reads moved (a newer torchrl line)
            raise sr.CheckSkipped(f"not instrumented on this torchrl: {missing} (the row reads an internal that moved; "
                                  "the other rows ran)")
        errors = _probe_errors(observed, module)
        if module.NAME == "training":
            return _judge_training(module, observed, errors)
        if not errors:
            return module.judge(observed)
        try:
            detail = module.judge(observed)
        except sr.CheckSkipped:
            raise sr.CheckSkipped(f"not measured: {errors}") from None
        except sr.CheckFailed as err:
            raise sr.CheckFailed(f"{err}; partly not measured: {errors}") from None
        return f"{detail}; partly not measured: {errors}"

    judge.__name__ = f"judge_{module.NAME.replace('-', '_')}"
    judge.__doc__ = module.__doc__
    return judge


def _judge_training(module, observed, errors):
    """The training row: a run that trained nothing is noted in ``observed`` (exit 5)."""
    try:
        detail = module.judge(observed)
    except module.NothingTrained as err:
        observed["nothing_trained"] = str(err)
        raise sr.CheckSkipped(f"{err}{'; partly not measured: ' + errors if errors else ''}") from None
    return f"{detail}; partly not measured: {errors}" if errors else detail


def info_frames_per_second(observed):
    """Collected frames per second from the first to the last collected frame (information)."""
    meta = observed["meta"]
    if not meta["frames"] or meta["first_frame_s"] is None:
        raise sr.CheckSkipped("no frames collected")
    span = meta["last_frame_s"] - meta["first_frame_s"]
    if span <= 0:
        raise sr.CheckSkipped(f"all {meta['frames']} frames came at once")
    return (f"{meta['frames'] / span:.0f} frames/s between the first and the last collected frame ({meta['frames']} frames in "
            f"{span:.1f} s, training included; the first frame came {meta['first_frame_s']:.1f} s after the target started)")


CHECKS = [
    sr.Check("run", check_run, gives="observed"),
    sr.Check("exit", check_exit),
    *[sr.Check(m.NAME, detector_check(m)) for m in MODULES],
    sr.Check("info:frames-per-second", info_frames_per_second),
    *[sr.Check(m.NAME, detector_check(m)) for m in INFO_MODULES],
]


def run_checks(args, report):
    if args.probe:  # the probe ladder: its own rows (_audit/ladder.py)
        from torchrl_skill.audit import ladder

        ladder.run_checks(args, report)
        return
    done = sr.run_declared(CHECKS, report, args=args)
    report.nothing_audited = (done.get("observed") or {}).get("nothing_trained")


def main(argv=None):
    return sr.standard_main(__file__, build_parser, run_checks, argv, import_torchrl=False)
