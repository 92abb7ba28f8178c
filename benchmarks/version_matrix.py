"""Run the bundle on every supported torchrl release line and write down what holds there.

For each line (0.11 to 0.15, defined in benchmarks/_matrix_lines.json) it builds one
environment (benchmarks/_matrix_envs.py: a venv over this interpreter holding that line's
torch, tensordict and torchrl; pip's cache and the wheels cache are reused; a line whose
release the registry does not serve yet runs on its nightly, named as its ``stand_in``), then, from a snapshot of the bundle at its current commit
(``git archive HEAD``, so edits made meanwhile do not leak in), runs with ``-n 1`` and
``OMP_NUM_THREADS=1``:

- ``contract``: the script contract (tests/test_script_contract.py: --help, exit codes,
  one-line errors, the --json report and the default run of every script), the CLI
  contract of explain.py and audit_run.py;
- ``proofs``: every proof the bundle names: each error-index entry's trigger or test, and
  every test tests/proofs.json lists for a section of the references;
- ``recipes``: the bundled known-good recipes: audit_run.py and scan_api_drift.py on
  sub-skills/development-and-testing/assets/modern_example.py, check_loss_wiring.py on
  sub-skills/objectives-and-training/assets/ppo_user_env_wiring.py:build_wiring;
- ``checks``: every bundled check in one run (scripts/run_all_checks.py --json), each row
  kept: what passed, what failed, and what was not run because the line lacks a module,
  name, class member or keyword a newer line has (the honest coverage of the line);
- ``rows``: every api_changes.json row judged against the installed library
  (torchrl_skill.stack.versions ``check_rows``: does the old name or keyword exist where the row's
  versions say it does?);
- ``abi``: which torch releases each cached torchrl wheel's compiled extension loads with
  (benchmarks/_extension_abi.py).

Results go to the cache (``results-<line>-<group>.json``); ``--write`` gathers them into
src/torchrl_skill/data/stack_lines.json (read by the scripts' first row and check_torchrl_env.py) and the
generated block of README.md, keeping lines the cache lacks from
benchmarks/version_matrix.json. ``--adopt 0.15.0`` moves a stand-in line to its release once
the registry serves it: checks that pip can download it, rewrites the line's pins
(the newest tensordict of the line), runs every group on it and writes. It measures; no
test runs it.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _extension_abi as abi  # noqa: E402
import _matrix_envs as envs  # noqa: E402
import _matrix_report as mr  # noqa: E402

GROUPS = ("contract", "proofs", "recipes", "rows", "checks", "abi")
CONTRACT = [
    "tests/test_script_contract.py",
    "tests/test_audit_cli.py",
    "tests/test_explain_names.py::test_every_public_name_of_every_module_resolves_and_explains",
    "tests/test_explain.py::test_error_text_finds_its_entry_and_json_validates",
    "tests/test_explain_tracebacks.py::test_a_whole_traceback_confirms_the_cause_by_its_frame",
    "tests/test_explain.py::test_error_that_matches_nothing_exits_1",
    "tests/test_explain.py::test_bad_input_exits_2_with_one_line",
    "tests/test_explain.py::test_binary_error_file_exits_2",
    "tests/test_explain.py::test_error_from_stdin",
    "tests/test_explain.py::test_cli_keeps_optional_backends_out",
]
RECIPES = [
    ("audit_run.py modern_example.py", ["scripts/audit_run.py", "--json", "--max-frames", "2000"]),
    ("scan_api_drift.py modern_example.py", ["sub-skills/development-and-testing/scripts/scan_api_drift.py", "--json"]),
    ("check_loss_wiring.py ppo_user_env_wiring.py", [
        "sub-skills/objectives-and-training/scripts/check_loss_wiring.py", "--json",
        "sub-skills/objectives-and-training/assets/ppo_user_env_wiring.py:build_wiring"]),
]
# torchrl releases whose extension is measured, and torch releases measured beyond the
# lines' own: 2.9.1 (layered on the 0.11 venv, whose CUDA 12 libraries it needs) and the
# 2.13.0 CPU wheel (layered on the 0.14 venv).
ABI_TORCHRL = ["0.11.0", "0.11.1", "0.12.0", "0.13.1", "0.13.2", "0.13.3", "0.14.0", "0.14.1"]
# (torch, the line whose venv it is layered on, wheels layered with it where the base's differ
# from what that torch pins: torch 2.15.0 pins nvidia-nvshmem-cu13==3.7.2, the base has 3.4.5).
ABI_EXTRA_TORCH = [("torch==2.9.1", "0.11", ()), ("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "0.14", ()),
                   ("torch==2.15.0", "0.15", ("nvidia-nvshmem-cu13==3.7.2",))]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def snapshot(cache: Path) -> tuple[Path, str]:
    """The bundle at HEAD, exported once per commit under the cache: ``(folder, sha)``."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    dest = cache / "src" / sha[:12]
    if not (dest / "src").is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest, sha


def child_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TORCHRL_CONSOLE_STREAM")}
    return {**env, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def proof_nodes(src: Path) -> list[str]:
    """Every test a proof names: error-index ``proof`` fields and the tests tests/proofs.json lists."""
    sys.path.insert(0, str(src / "src"))
    try:
        from torchrl_skill.stack import versions as _versions

        return _versions.proof_nodes(src)
    finally:
        sys.path.remove(str(src / "src"))


def run_pytest(python: str, src: Path, nodes: list[str], out: Path, timeout: int, workers: int = 1) -> dict:
    """Run ``nodes`` with ``-n workers``; ``{node id: "passed" | "failed: first line" | "skipped: why"}``."""
    xml = out.with_suffix(".xml")
    cmd = [python, "-m", "pytest", "-n", str(workers), "-p", "no:randomly", "-q", "-rN", "--no-header",
           f"--junitxml={xml}", "-o", "junit_family=xunit1", *nodes]
    proc = subprocess.run(cmd, cwd=src, env=child_env(), capture_output=True, text=True, timeout=timeout)
    if not xml.exists():
        raise RuntimeError(f"pytest wrote no report (exit {proc.returncode}): {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    results = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        node = f"{case.get('file') or case.get('classname', '').replace('.', '/') + '.py'}::{case.get('name')}"
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        skip = case.find("skipped")
        if bad is not None:
            results[node] = "failed: " + mr.first_line(bad.get("message") or bad.text or "")
        elif skip is not None:
            results[node] = "skipped: " + mr.first_line(skip.get("message") or "")
        else:
            results[node] = "passed"
    return results


def run_recipes(python: str, src: Path) -> dict:
    """``{recipe: "passed" | "failed: ..."}``: each known-good recipe must exit 0 with no failed row."""
    out = {}
    for label, argv in RECIPES:
        with tempfile.TemporaryDirectory() as cwd:
            proc = subprocess.run([python, *[str(src / a) if a.endswith((".py",)) or ".py:" in a else a for a in argv]],
                                  cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=900)
        try:
            report = json.loads(proc.stdout)
            failed = [f"{c['name']}: {c['detail'][:160]}" for c in report["checks"] if c["status"] == "fail"]
        except ValueError:
            failed = [f"no JSON report; stderr: {mr.first_line(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else '')}"]
        out[label] = "passed" if proc.returncode == 0 and not failed else f"failed: exit {proc.returncode}; {'; '.join(failed)[:400]}"
    return out


def run_checks_rows(python: str, src: Path) -> dict:
    """``{row: "passed" | "failed: ..." | "skipped: ..."}`` of scripts/run_all_checks.py --json."""
    with tempfile.TemporaryDirectory() as cwd:
        proc = subprocess.run([python, str(src / "scripts" / "run_all_checks.py"), "--json"], cwd=cwd, env=child_env(),
                              capture_output=True, text=True, timeout=3600)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        raise RuntimeError(f"run_all_checks.py printed no report (exit {proc.returncode}): {proc.stderr[-1500:]}") from None
    status = {"pass": "passed", "missing": "skipped: backend missing"}
    return {c["name"]: status.get(c["status"]) or f"{'failed' if c['status'] == 'fail' else 'skipped'}: {c['detail'][:300]}"
            for c in report["checks"]}


def run_rows(python: str, src: Path) -> dict:
    """``{row label: "passed" | "failed: why"}`` from torchrl_skill.stack.versions.check_rows, run in the line's env."""
    code = "import json, sys; sys.path.insert(0, 'src'); from torchrl_skill.stack import versions; print('ROWS ' + json.dumps(versions.check_rows()))"
    proc = subprocess.run([python, "-c", code], cwd=src, env=child_env(), capture_output=True, text=True, timeout=900)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("ROWS ")), None)
    if line is None:
        raise RuntimeError(f"check_rows printed nothing: {proc.stderr[-1500:]}")
    return json.loads(line[5:])


def run_line(line: envs.Line, groups: list[str], cache: Path, src: Path, sha: str, workers: int = 1) -> int:
    """Run ``groups`` on ``line``; the number of items that failed."""
    record = envs.build(line, cache, log=log)
    python = record["python"]
    failed = 0
    for group in groups:
        if group == "abi":
            continue
        log(f"[{line.name}] {group}")
        start = time.perf_counter()
        if group == "contract":
            results = run_pytest(python, src, CONTRACT, cache / f"results-{line.name}-contract.json", 7200, workers)
        elif group == "proofs":
            results = run_pytest(python, src, proof_nodes(src), cache / f"results-{line.name}-proofs.json", 10800, workers)
        elif group == "recipes":
            results = run_recipes(python, src)
        elif group == "checks":
            results = run_checks_rows(python, src)
        else:
            results = run_rows(python, src)
        summary = mr.count(results)
        (cache / f"results-{line.name}-{group}.json").write_text(json.dumps({
            "line": line.name, "group": group, "commit": sha, "date": time.strftime("%Y-%m-%d"),
            "versions": record["versions"], "seconds": round(time.perf_counter() - start, 1), "results": results}, indent=1) + "\n")
        log(f"[{line.name}] {group}: {summary['passed']}/{summary['total']} passed in {time.perf_counter() - start:.0f} s")
        failed += summary["failed"]
        for item, res in results.items():
            if res.startswith("failed"):
                log(f"    {item}: {res[:300]}")
    return failed


def _wheel(cache: Path, spec: str) -> Path:
    """The wheel of ``spec`` (``torchrl==0.14.1``, ``torchrl-nightly==2026.10.27``) in the cache, downloaded once."""
    dist, version = spec.split("==")
    pattern = str(cache / "wheels" / f"{dist.replace('-', '_')}-{version}-*.whl")
    if not glob.glob(pattern):  # a constraints file capping torch for the venvs does not apply to one wheel downloaded
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(cache / "wheels"), spec],
                       check=True, timeout=3600, env={**os.environ, "PIP_CONSTRAINT": os.devnull})
    return Path(glob.glob(pattern)[0])


def run_abi(cache: Path, lines: list[str]) -> None:
    """Measure every (torchrl release, torch release) pair of the selected lines (each line's
    torchrl releases and nightly stand-in, against the selected lines' torch and the extra
    torch releases layered on them); merged into ``abi.json`` in the cache, the pairs not
    measured now kept from the last run (there, or benchmarks/version_matrix.json)."""
    chosen = [envs.LINES[n] for n in lines]
    specs = [(f"torchrl=={v}", None) for v in ABI_TORCHRL if envs.line_of(v) in lines]
    specs += [(f"{ln.torchrl_dist}=={ln.torchrl}", ln) for ln in chosen if ln.nightly]
    wheels, labels = [], {}
    for spec, line in specs:
        wheel = _wheel(cache, spec)
        wheels.append(wheel)
        if line is not None:
            labels[wheel] = envs.installed(envs.build(line, cache, log=log)["python"])["torchrl"]
    torch_envs = [abi.TorchEnv(ln.torch, str(envs.build(ln, cache, log=log)["python"])) for ln in chosen]
    for spec, base, layered in ABI_EXTRA_TORCH:
        if base not in lines:
            continue
        try:
            wheel = Path(spec) if spec.endswith(".whl") else _wheel(cache, spec)
            extras = tuple(_wheel(cache, extra) for extra in layered)
        except (subprocess.CalledProcessError, IndexError) as err:
            log(f"abi: {spec} could not be downloaded ({type(err).__name__}); not measured")
            continue
        if not wheel.exists():
            log(f"abi: {wheel} not here; torch {wheel.name} not measured")
            continue
        folder = abi.torch_only(wheel, cache / "torch-only", extras)
        torch_envs.append(abi.TorchEnv(wheel.name.split("-")[1], str(envs.venv_python(cache, base)), (str(folder),)))
    log(f"abi: {len(wheels)} torchrl wheels x {len(torch_envs)} torch releases")
    measured = abi.measure(wheels, torch_envs, cache / "extensions", log=log, labels=labels)
    old_path = cache / "abi.json"
    old = json.loads(old_path.read_text()) if old_path.exists() else \
        json.loads((ROOT / "benchmarks" / "version_matrix.json").read_text()).get("abi", {})
    merged = dict(old.get("torchrl", {}))
    for version, row in measured.items():
        keep = merged.get(version, {"loads": [], "fails": {}})
        now = set(row["loads"]) | set(row["fails"])
        merged[version] = {"loads": sorted({*[t for t in keep["loads"] if t not in now], *row["loads"]}),
                           "fails": {**{t: e for t, e in keep["fails"].items() if t not in now}, **row["fails"]}}
    (cache / "abi.json").write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "how": abi.__doc__.split("\n\n")[1].strip(),
                                                "torchrl": merged}, indent=1) + "\n")


def adopt(version: str, cache: Path) -> str:
    """Move the line of ``version`` (``0.15.0``) from its stand-in to the release: pip must be
    able to download ``torchrl==version`` (else RuntimeError), the line's tensordict becomes
    the newest release of that line pip finds, and the line's entry in
    benchmarks/_matrix_lines.json loses its ``stand_in``. Returns the line's name."""
    line = envs.line_of(version)
    data = json.loads(envs.LINES_PATH.read_text())
    if line not in data["lines"]:
        raise RuntimeError(f"--adopt {version}: line {line} is not in {envs.LINES_PATH.name}; add it there first")
    with tempfile.TemporaryDirectory() as tmp:
        for spec in (f"torchrl=={version}", f"tensordict>={line},<{line.split('.')[0]}.{int(line.split('.')[1]) + 1}"):
            proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, spec],
                                  capture_output=True, text=True, timeout=1800)
            if proc.returncode != 0:
                raise RuntimeError(f"--adopt {version}: the registry does not serve {spec} yet: "
                                   f"{mr.first_line(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else '')}")
        tensordict = next(Path(tmp).glob("tensordict-*.whl")).name.split("-")[1]
    row = data["lines"][line]
    row.update({"torchrl": version, "tensordict": tensordict})
    for key in ("torchrl_dist", "stand_in"):
        row.pop(key, None)
    envs.LINES_PATH.write_text(json.dumps(data, indent=1) + "\n")
    envs.LINES.clear()
    envs.LINES.update(envs.load_lines())
    if version not in ABI_TORCHRL:
        ABI_TORCHRL.append(version)
    log(f"adopt: line {line} is now torchrl {version}, tensordict {tensordict}, torch {row['torch']} ({envs.LINES_PATH.name})")
    return line


def move_verified(line: envs.Line, root: Path = ROOT) -> list[str]:
    """Rewrite the verified stack's pins to ``line``'s (torch, tensordict, torchrl): the three
    pins of requirements.txt, ``VERIFIED`` in src/torchrl_skill/stack/probe.py and the ``torchrl-version`` /
    ``tensordict-version`` metadata of every SKILL.md. Returns the files changed. What
    follows is the verification itself: ``pip install -r requirements.txt``, ``python -m
    pytest``, then the provenance block of references/repo-provenance.md."""
    if line.nightly:
        raise RuntimeError(f"line {line.name} runs on a nightly stand-in; adopt its release first")
    pins = {"torch": line.torch, "tensordict": line.tensordict, "torchrl": line.torchrl}
    edits = [(root / "requirements.txt", [(rf"(?m)^{d}==\S+$", f"{d}=={v}") for d, v in pins.items()]),
             (root / "src" / "torchrl_skill" / "stack" / "probe.py", [(r'(?m)^VERIFIED = \{.*\}$', "VERIFIED = " + json.dumps(pins))])]
    edits += [(md, [(r'(?m)^(  torchrl-version: )"[^"]*"$', rf'\g<1>"{line.torchrl}"'),
                    (r'(?m)^(  tensordict-version: )"[^"]*"$', rf'\g<1>"{line.tensordict}"')])
              for md in sorted([root / "SKILL.md", *root.glob("sub-skills/*/SKILL.md")])]
    changed = []
    for path, subs in edits:
        text = new = path.read_text(encoding="utf-8")
        for pattern, repl in subs:
            new = re.sub(pattern, repl, new)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(str(path.relative_to(root)))
    return changed


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.strip(), formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="example:\n  python benchmarks/version_matrix.py --lines 0.11 0.14 --groups contract recipes\n"
                                            "  python benchmarks/version_matrix.py --adopt 0.15.0   # the 0.15 release replaces its nightly\n"
                                            "  python benchmarks/version_matrix.py --adopt 0.15.0 --as-verified   # and becomes the verified stack\n"
                                            "  python benchmarks/version_matrix.py --write   # gather the cached results\n\n"
                                            "exit codes:\n  0    every group ran (what failed inside is data, not an error, unless --strict)\n"
                                            "  1    an environment could not be built, a group could not run, or with\n"
                                            "       --strict an item failed\n"
                                            "  2    bad arguments\n  130  interrupted")
    parser.add_argument("--lines", nargs="+", choices=list(envs.LINES), default=list(envs.LINES))
    parser.add_argument("--adopt", metavar="VERSION", help="move VERSION's line (e.g. 0.15.0) from its stand-in to the "
                        "release, run every group on it and write (implies --lines LINE --write)")
    parser.add_argument("--as-verified", action="store_true", help="with --adopt: also move the verified stack's pins "
                        "(requirements.txt, src/torchrl_skill/stack/probe.py VERIFIED, SKILL.md metadata) to that line")
    parser.add_argument("--groups", nargs="+", choices=GROUPS, default=list(GROUPS))
    parser.add_argument("--cache", type=Path, default=envs.DEFAULT_CACHE, help=f"default: {envs.DEFAULT_CACHE}")
    parser.add_argument("--workers", type=int, default=1, help="pytest-xdist workers per line (default: 1)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when anything in the groups run failed (CI)")
    parser.add_argument("--write", action="store_true", help="only gather cached results into src/torchrl_skill/data/stack_lines.json "
                        "and README.md (runs nothing)")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    if args.write and not args.adopt:
        mr.write(args.cache, ROOT, envs.LINES)
        return 0
    if args.adopt:
        try:
            args.lines, args.groups = [adopt(args.adopt, args.cache)], list(GROUPS)
        except RuntimeError as err:
            print(f"version_matrix.py: error: {err}", file=sys.stderr)
            return 1
    src, sha = snapshot(args.cache)
    log(f"bundle at {sha[:12]} -> {src}")
    failed = 0
    try:
        for name in args.lines:
            failed += run_line(envs.LINES[name], [g for g in args.groups if g != "abi"], args.cache, src, sha, args.workers)
        if "abi" in args.groups:
            run_abi(args.cache, args.lines)
    except (RuntimeError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
        print(f"version_matrix.py: error: {str(err)[-1500:]}", file=sys.stderr)
        return 1
    if failed:
        log(f"{failed} item(s) failed (listed above)")
    if args.adopt:
        mr.write(args.cache, ROOT, envs.LINES)
        log("written: src/torchrl_skill/data/stack_lines.json, README.md, benchmarks/version_matrix.json")
        if args.as_verified:
            changed = move_verified(envs.LINES[args.lines[0]])
            log(f"verified stack moved in {', '.join(changed)}; now: pip install -r requirements.txt && python -m pytest, "
                "then update the provenance block of references/repo-provenance.md")
    return 1 if failed and args.strict else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("version_matrix.py: interrupted", file=sys.stderr)
        sys.exit(130)
