"""Third-party proof of the run-time auditor: pytorch/rl's own training scripts, unmodified
and with planted faults.

Takes a git mirror of pytorch/rl (the search tool's ``fetch github:pytorch/rl``), exports the
scripts at COMMIT into a temporary folder, and runs each under ``scripts/audit_run.py
--json`` with small hydra overrides (frames, envs: MuJoCo tasks become Pendulum-v1, no
logger). Then it plants one fault per MUTATIONS entry as a declared text edit (``find``
must occur exactly once; the edit is applied to a temporary copy, never to the mirror)
and records which row names it. Measured, never asserted in a test: the result is written
to --out (benchmarks/third_party_audit.json) and committed.

  clean runs: a FAIL row is a false FAIL (the script is correct);
  mutations:  named = the declared row FAILs; broken_pass = the declared row PASSes.

The scripts need hydra-core (and a2c's MuJoCo task mujoco + imageio), which the verified
stack does not pin: pass --python, an interpreter that has them next to torchrl (a venv
with --system-site-packages).

Usage:
  python benchmarks/third_party_audit.py /path/to/mirror/repo --python /work/venvs/thirdparty/bin/python
  python benchmarks/third_party_audit.py MIRROR --only dqn-small-buffer --keep
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUNDLE = Path(__file__).resolve().parents[1]
COMMIT = "ae9719f17"  # pytorch/rl main, 18 commits after "[Versioning] Bump 0.14.0" (#4108); torchrl 0.14.1 installed
SOTA = "sota-implementations"
PENDULUM = ["logger.backend=null", "collector.init_random_frames=500", "collector.frames_per_batch=100",
            "collector.env_per_collector=1", "replay_buffer.size=10000", "optim.batch_size=128", "env.name=Pendulum-v1"]

# Clean targets: folder, script, hydra overrides. Each is run unmodified.
TARGETS = {
    "ppo": (f"{SOTA}/ppo", "ppo_mujoco.py", ["env.env_name=Pendulum-v1", "env.batch_mode=serial", "logger.backend=null",
                                     "collector.frames_per_batch=1024", "loss.mini_batch_size=256", "loss.ppo_epochs=2"]),
    # a2c_mujoco's DoubleToFloat needs float64 observations (Pendulum's are float32): its own HalfCheetah-v4 (mujoco in the venv)
    "a2c": (f"{SOTA}/a2c", "a2c_mujoco.py", ["logger.backend=null", "collector.frames_per_batch=320"]),
    "dqn": (f"{SOTA}/dqn", "dqn_cartpole.py", ["logger.backend=null", "collector.init_random_frames=500", "collector.frames_per_batch=100",
                                       "loss.num_updates=10", "buffer.batch_size=64"]),
    "discrete_sac": (f"{SOTA}/discrete_sac", "discrete_sac.py", ["env.library=gymnasium", "logger.backend=null", "collector.init_random_frames=500",
                                                         "collector.frames_per_batch=100", "replay_buffer.size=10000",
                                                         "optim.batch_size=128", "network.hidden_sizes=[64,64]"]),
    "crossq": (f"{SOTA}/crossq", "crossq.py", PENDULUM + ["env.library=gymnasium", "network.critic_hidden_sizes=[256,256]", "network.actor_hidden_sizes=[64,64]"]),
    "sac": (f"{SOTA}/sac", "sac.py", PENDULUM + ["network.hidden_sizes=[64,64]"]),
    "td3": (f"{SOTA}/td3", "td3.py", PENDULUM + ["network.hidden_sizes=[64,64]"]),
    # tutorials: no arguments; the auditor's early stop ends them once every row has its verdict
    "tutorial-getting-started-5": ("tutorials/sphinx-tutorials", "getting-started-5.py", []),
    "tutorial-coding-ppo": ("tutorials/sphinx-tutorials", "coding_ppo.py", []),
}

# FAIL rows of clean runs shown to be true findings (each with its proof), not false FAILs.
TRUE_FINDINGS = {
    ("a2c", "transforms"): "a2c_mujoco.py builds test_env = make_env(...) with a VecNorm of its own and only calls "
                           "test_env.eval(): VecNorm keeps updating its statistics in eval mode (torchrl 0.14.1; "
                           "tests/test_audit_invariants.py::test_vec_norm_in_eval_mode_still_updates_its_statistics), so "
                           "evaluation normalizes by the eval env's own statistics, not the training env's (pytorch/rl#337's class)",
    ("crossq", "optimizer-coverage"): "crossq.py's update_all computes alpha_loss but calls backward() on q_loss plus actor_loss "
                                      "twice, so CrossQLoss.log_alpha (held by the grouped optimizer) never receives a gradient: "
                                      "the temperature never trains (the row's detail names the tensor)",
}

# Planted faults: (id, target, file, find, replace, class, row that must name it).
MUTATIONS = [
    ("ppo-gradients-accumulate", "ppo", "ppo_mujoco.py",
     "    def update(batch, num_network_updates):\n        optim.zero_grad(set_to_none=True)\n",
     "    def update(batch, num_network_updates):\n", "gradient hygiene: no zero_grad, gradients add up across steps", "grad-flow"),
    ("ppo-lr-reaches-zero", "ppo", "ppo_mujoco.py",
     "alpha = (1 - (num_network_updates / total_network_updates)).clamp_min(0.0)",
     "alpha = 1 - (num_network_updates / 16)", "learning rate: the anneal reaches 0 at update 16, then turns negative", "learning-rate"),
    ("ppo-truncation-as-termination", "ppo", "ppo_mujoco.py",
     "        vectorized=not cfg.compile.compile,\n    )\n\n    loss_module = ClipPPOLoss(",
     "        vectorized=not cfg.compile.compile,\n    )\n    adv_module.set_keys(terminated=\"truncated\")\n\n    loss_module = ClipPPOLoss(",
     "value estimator: truncated read as terminated", "value-estimator"),
    ("ppo-gamma-against-config", "ppo", "ppo_mujoco.py",
     "    adv_module = GAE(\n        gamma=cfg.loss.gamma,", "    adv_module = GAE(\n        gamma=0.9,",
     "value estimator: gamma differs from cfg.loss.gamma", "value-estimator"),
    ("a2c-zero-grad-before-step", "a2c", "a2c_mujoco.py",
     "        optim.step()\n\n        optim.zero_grad(set_to_none=True)\n",
     "        optim.zero_grad(set_to_none=True)\n\n        optim.step()\n",
     "gradient hygiene: gradients cleared between backward() and step()", "grad-flow"),
    ("a2c-old-batches", "a2c", "a2c_mujoco.py",
     ["            data_buffer.empty()\n", "storage=LazyTensorStorage(cfg.collector.frames_per_batch, device=device)"],
     ["            pass\n", "storage=LazyTensorStorage(4 * cfg.collector.frames_per_batch, device=device)"],
     "replay freshness: the on-policy buffer holds 4 batches and is never emptied", "data-freshness"),
    ("dqn-small-buffer", "dqn", "dqn_cartpole.py",
     "max_size=cfg.buffer.buffer_size", "max_size=cfg.collector.frames_per_batch",
     "replay freshness: an off-policy buffer no larger than one batch", "data-freshness"),
    ("dqn-acting-copy", "dqn", "dqn_cartpole.py",
     "        policy=model_explore,\n", "        policy=__import__(\"copy\").deepcopy(model_explore),\n",
     "acting module: the collector acts with a copy that never gets the weights", "acting-module"),
    ("discrete-sac-tau-swapped", "discrete_sac", "utils.py",
     "SoftUpdate(loss_module, eps=cfg.optim.target_update_polyak)", "SoftUpdate(loss_module, tau=cfg.optim.target_update_polyak)",
     "target network: polyak 0.995 passed as tau, the target follows at once", "target-network"),
    ("discrete-sac-gamma-against-config", "discrete_sac", "utils.py",
     "loss_module.make_value_estimator(gamma=cfg.optim.gamma)", "loss_module.make_value_estimator(gamma=0.9)",
     "value estimator: gamma differs from cfg.optim.gamma", "value-estimator"),
    ("crossq-gradients-accumulate", "crossq", "crossq.py",
     "        optimizer.zero_grad(set_to_none=True)\n        td_loss = {}\n        q_loss, value_meta",
     "        td_loss = {}\n        q_loss, value_meta",
     "gradient hygiene: the critic update never clears its gradients", "grad-flow"),
    ("tutorial-gs5-tau-swapped", "tutorial-getting-started-5", "getting-started-5.py",
     "updater = SoftUpdate(loss, eps=0.99)", "updater = SoftUpdate(loss, tau=0.99)",
     "target network: the tutorial's eps=0.99 passed as tau, the target follows at once", "target-network"),
    ("tutorial-ppo-lr-horizon", "tutorial-coding-ppo", "coding_ppo.py",
     "    optim, total_frames // frames_per_batch, 0.0\n", "    optim, 1, 0.0\n",
     "learning rate: a cosine schedule whose horizon is one batch (lr 0 from the second batch on)", "learning-rate"),
    ("sac-done-as-terminated", "sac", "utils.py",
     "    loss_module.make_value_estimator(gamma=cfg.optim.gamma)",
     "    loss_module.set_keys(terminated=\"done\")\n    loss_module.make_value_estimator(gamma=cfg.optim.gamma)",
     "value estimator: done read as terminated", "value-estimator"),
]


# Audit arguments beyond --seconds, where a fault shows only after the early stop would end the run
AUDIT_ARGS = {"tutorial-ppo-lr-horizon": ["--max-frames", "3000"]}


def export(mirror: Path, commit: str, dest: Path) -> None:
    """The sota-implementations folders at ``commit`` into ``dest`` (git archive | tar -x)."""
    folders = sorted({t[0] for t in TARGETS.values()})
    archive = subprocess.run(["git", f"--git-dir={mirror}", "archive", commit, *folders], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)


def audit(python: str, folder: Path, script: str, overrides: list[str], seconds: int, extra: tuple = (), bundle: Path = BUNDLE) -> dict:
    """``{"code", "rows": {name: [status, detail]}, "wall_s"}`` of one audit_run.py --json run
    (``extra`` holds ``--probe`` for a probe-ladder run: its rows are ``rung-N:...``)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", WANDB_MODE="disabled", HYDRA_FULL_ERROR="1", MPLBACKEND="Agg")
    start = time.monotonic()
    proc = subprocess.run([python, str(bundle / "scripts" / "audit_run.py"), "--json", "--seconds", str(seconds), *extra, script, "--", *overrides],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=seconds + 240)
    wall = round(time.monotonic() - start, 1)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"code": proc.returncode, "rows": {}, "wall_s": wall, "stderr": proc.stderr.strip()[-400:]}
    rows = {c["name"]: [c["status"], c.get("detail", "")] for c in report["checks"]}
    return {"code": proc.returncode, "rows": rows, "wall_s": wall}


def apply(folder: Path, file: str, find, replace) -> None:
    """Apply one declared edit (or a list of them, pairwise) to ``folder / file``; each
    ``find`` must occur exactly once."""
    path = folder / file
    text = path.read_text()
    for f, r in zip(*((find, replace) if isinstance(find, list) else ([find], [replace]))):
        if text.count(f) != 1:
            raise SystemExit(f"mutation anchor occurs {text.count(f)} times in {file} (must be 1): {f[:60]!r}")
        text = text.replace(f, r)
    path.write_text(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("mirror", type=Path, help="git directory of a pytorch/rl mirror")
    parser.add_argument("--commit", default=COMMIT)
    parser.add_argument("--python", default=sys.executable, help="interpreter with torchrl and hydra-core")
    parser.add_argument("--seconds", type=int, default=150)
    parser.add_argument("--only", nargs="*", default=None, help="target or mutation ids to run")
    parser.add_argument("--out", type=Path, default=BUNDLE / "benchmarks" / "third_party_audit.json")
    args = parser.parse_args(argv)
    full = subprocess.run(["git", f"--git-dir={args.mirror}", "rev-parse", args.commit], capture_output=True, text=True, check=True).stdout.strip()
    result = json.loads(args.out.read_text()) if args.out.exists() and args.only else {}
    result.update(commit=full, python=args.python, seconds=args.seconds)
    # the bundle's commit each entry was measured on (entries of an --only run replace theirs)
    bundle = subprocess.run(["git", "-C", str(BUNDLE), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result.setdefault("clean", {})
    result.setdefault("mutations", {})
    with tempfile.TemporaryDirectory(prefix="tp_audit_") as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        export(args.mirror, full, base)
        for name, (folder, script, overrides) in TARGETS.items():
            if args.only is not None and name not in args.only:
                continue
            run = audit(args.python, base / folder, script, overrides, args.seconds)
            fails = {k: v[1][:300] for k, v in run["rows"].items() if v[0] == "fail" and (name, k) not in TRUE_FINDINGS}
            found = {k: {"detail": v[1][:300], "why": TRUE_FINDINGS[(name, k)]} for k, v in run["rows"].items()
                     if v[0] == "fail" and (name, k) in TRUE_FINDINGS}
            result["clean"][name] = {"bundle_commit": bundle, "script": f"{folder}/{script}", "overrides": overrides, "code": run["code"], "wall_s": run["wall_s"],
                                     "false_fails": fails, "true_findings": found, "passes": sum(v[0] == "pass" for v in run["rows"].values()),
                                     **({"stderr": run["stderr"]} if "stderr" in run else {})}
            print(f"clean {name}: exit {run['code']}, {len(fails)} FAIL rows {sorted(fails)}", flush=True)
        for mid, target, file, find, replace, kind, expect in MUTATIONS:
            if args.only is not None and mid not in args.only:
                continue
            folder, script, overrides = TARGETS[target]
            work = Path(tmp) / mid
            shutil.copytree(base / folder, work)
            apply(work, file, find, replace)
            run = audit(args.python, work, script, overrides, args.seconds, tuple(AUDIT_ARGS.get(mid, ())))
            status, detail = run["rows"].get(expect, ["absent", ""])
            others = {k: v[1][:200] for k, v in run["rows"].items() if v[0] == "fail" and k != expect}
            result["mutations"][mid] = {"bundle_commit": bundle, "target": target, "file": f"{folder}/{file}", "find": find, "replace": replace, "class": kind,
                                        "row": expect, "audit_args": AUDIT_ARGS.get(mid, []), "status": status, "detail": detail[:600], "named": status == "fail",
                                        "broken_pass": status == "pass", "other_fails": others, "code": run["code"], "wall_s": run["wall_s"],
                                        **({"stderr": run["stderr"]} if "stderr" in run else {})}
            print(f"mutation {mid}: {expect} {status}; other FAIL rows {sorted(others)}", flush=True)
    muts = result["mutations"].values()
    result["summary"] = {
        "clean_runs": len(result["clean"]), "false_fails": sum(len(c["false_fails"]) for c in result["clean"].values()),
        "true_findings_in_clean_runs": sum(len(c.get("true_findings", {})) for c in result["clean"].values()),
        "clean_runs_that_did_not_run": sorted(n for n, c in result["clean"].items() if c["code"] not in (0, 1)),
        "mutations": len(result["mutations"]), "named_on_the_right_row": sum(m["named"] for m in muts),
        "broken_row_passed": sum(m["broken_pass"] for m in muts),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
