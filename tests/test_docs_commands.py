"""Every command a SKILL.md or reference tells the user to run (``python $SKILL_DIR/....py
...`` in bash blocks and inline code, as ``doccheck.commands`` reads them) runs here and
succeeds: exit 0 on a known-good project.

The commands run as written, from a user's project folder built once per module
(:func:`project`): a file or folder a command names is there (``train.py``,
``envs.py:make_env``, ``my_package.envs:make_env``, ``PATH``, ``DIR``, ``./my_batch``,
``~/rl``), holding the bundle's own known-good examples (the drift scanner's and
audit_run's ``modern_example.py``, check_user_env's ``_example_env.py``, check_llm_wiring's
``_llm_wiring_example.py``). Only a
placeholder that cannot be a file is replaced (:data:`PLACEHOLDERS`: ``N``, ``TARGET``, the error
text of ``--error "LAST LINE"``, ``~``). A command with no argument or only ``--json``
is the script's default run, which tests/test_script_contract.py runs for every script.

Each runs in this process through the script's ``main(argv)`` (no interpreter start);
explain's commands share one test. Commands that start Ray, worker processes, a model or
a training run are marked ``slow``.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import doccheck
import pytest
from conftest import BUNDLE, SCRIPTS, load_module

from torchrl_skill.explain import error_index as ei
from torchrl_skill.explain.tracebacks import answer

# Placeholders that cannot be files: replaced token by token.
# TARGET: "your file.py:make_env" (envs-and-transforms/references/troubleshooting.md says so).
PLACEHOLDERS = {"N": "4", "TARGET": "envs.py:make_env"}
ERROR_PLACEHOLDERS = ("PASTE THE LAST LINE", "LAST LINE", "TEXT")
# Scripts whose documented runs start Ray, worker processes, a model or a training run.
SLOW = {
    "audit_run", "check_ray_scaling", "smoke_services", "trl_round_trips", "smoke_llm_grpo", "smoke_render",
    "check_component_contracts", "smoke_collector", "smoke_recurrent_actor", "post_training_metrics",
    "learning_dqn_cartpole", "check_torchrl_env",
}
SLOW_ARGS = ("parallel",)  # ParallelEnv workers: ~1 min each on 2 busy cores
# Commands that read what an earlier command wrote: run after it, in the same project.
# Scripts whose documented runs start Ray: each runs in a fresh interpreter, as the user runs it.
# In this process a Ray actor inherits the test worker's state (sys.path, imported modules,
# earlier sessions): Collector(backend="ray") died there in CI while it passes from a shell.
OWN_INTERPRETER = {"check_ray_scaling", "smoke_services"}
AFTER = {("post_training_metrics", "--csv-dir runs/grpo_hf_reward --plot run.png"): "trl_round_trips"}
# A command whose text says it fails: (exit code, the words of the text that say so, what its output shows).
EXPECTED = {("smoke_training_step", "--skip-updater-step"): (1, "shows that failure being caught", "did not move"),
            # the project's train.py is the bundled 256-frame smoke example: too slow a learner to settle
            # rung 1 at the PPO budget (tests/test_audit_probe.py probes known-good learners to exit 0)
            ("audit_run", "train.py --probe -- ARGS"): (5, "stops short", "not settled")}
# Not run in the suite, with the reason (CONTRIBUTING.md, "Budgets": learning benchmarks are never asserted in tests).
BY_HAND = {"learning_dqn_cartpole": "a learning benchmark (exit 0 once DQN reaches return 195): measured 453 s on 2 busy "
                                    "cores on 2026-12-01, reaching 195 at 2,500 frames; run it by hand"}


@dataclass(frozen=True)
class Command:
    """One documented command: the bundled script, its argument text, where it is written."""

    script: Path
    args: str
    where: tuple[str, ...]

    @property
    def stem(self) -> str:
        return self.script.stem

    def __str__(self) -> str:
        return f"{self.script.relative_to(BUNDLE).as_posix()} {self.args}".strip()


def documented_commands() -> list[Command]:
    """Every distinct (script, arguments) of the SKILL.md files and references."""
    found: dict[tuple[Path, str], list[str]] = {}
    for md in doccheck.agent_markdown():
        for script, argtext, line, uses_skill_dir in doccheck.commands(md):
            path = doccheck._command_script(md, script, uses_skill_dir)
            assert path is not None, f"{md}:{line}: {script} is not a bundled script"
            found.setdefault((path.resolve(), " ".join(argtext.split())), []).append(f"{md.relative_to(BUNDLE)}:{line}")
    return [Command(path, args, tuple(where)) for (path, args), where in sorted(found.items(), key=lambda kv: str(kv[0]))]


COMMANDS = documented_commands()
DEFAULT_RUNS = [c for c in COMMANDS if c.args in ("", "--json")]
EXPLAIN = [c for c in COMMANDS if c.stem == "explain" and c not in DEFAULT_RUNS]
MANUAL = [c for c in COMMANDS if c.stem in BY_HAND]
OTHERS = [c for c in COMMANDS if c not in DEFAULT_RUNS + EXPLAIN + MANUAL]


def _area(where: str) -> str:
    parts = Path(where.split(":")[0]).parts
    return parts[1] if parts[0] == "sub-skills" else "root"


def argv_of(command: Command, project: Path) -> list[str]:
    """The command's arguments as the shell passes them, placeholders replaced; ``~`` is the project."""
    if command.stem == "explain" and any(f'"{p}"' in command.args for p in ERROR_PLACEHOLDERS):
        # the last line of a real error of the area the command is written in, one its text confirms
        entry = next(e for e in ei.load() if e.area == _area(command.where[0]) and e.proof and e.signatures
                     and any(h.confirmed and h.entry.id == e.id for h in answer(e.title)[0]))
        return ["--error", entry.title]
    argv = []
    for token in shlex.split(command.args):
        token = PLACEHOLDERS.get(token, token)
        argv.append(str(project / token[2:]) if token.startswith("~/") else token)
    return argv


def run_command(command: Command, project: Path) -> tuple[int, str]:
    """``main(argv)`` of the script in this process, from the project folder: (exit code, output);
    a script of :data:`OWN_INTERPRETER` given ``--ray`` runs in a fresh interpreter instead."""
    if command.stem in OWN_INTERPRETER and "--ray" in command.args.split():
        proc = subprocess.run([sys.executable, str(command.script), *argv_of(command, project)], cwd=project,
                              capture_output=True, text=True, timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"})
        return proc.returncode, proc.stdout + proc.stderr
    module = load_module(command.script)
    out = io.StringIO()
    here = os.getcwd()
    os.chdir(project)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                code = module.main(argv_of(command, project))
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else 2
    finally:
        os.chdir(here)
    return code, out.getvalue()


# ---------------------------------------------------------------------------- the project
MAKE_LOSS = '''

def make_loss():
    """ClipPPOLoss over a tanh-normal actor and a state-value critic, with a GAE estimator."""
    net = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 2), NormalParamExtractor())
    actor = ProbabilisticActor(TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"]),
                               in_keys=["loc", "scale"], spec=Bounded(low=-2.0, high=2.0, shape=(1,)),
                               distribution_class=TanhNormal, return_log_prob=True)
    loss = ClipPPOLoss(actor, ValueOperator(nn.Linear(3, 1), in_keys=["observation"]))
    loss.make_value_estimator(gamma=0.99, lmbda=0.95)
    return loss
'''

WITH_NORM = '''

_plain_make_env = make_env


def make_env(batch_size=()):
    """The same env with ObservationNorm attached (loc 0, scale 1: a no-op with its stats set)."""
    from torchrl.envs import ObservationNorm, TransformedEnv

    return TransformedEnv(_plain_make_env(batch_size), ObservationNorm(loc=0.0, scale=1.0, in_keys=["position"]))
'''


@functools.lru_cache(maxsize=1)  # read once: same_input asks for it for every command
def project_files() -> dict[str, str]:
    """The project's source files, relative path -> text: the bundle's known-good examples
    under every name the documented commands use."""
    example = (BUNDLE / "sub-skills" / "development-and-testing" / "assets" / "modern_example.py").read_text()
    env = (BUNDLE / "sub-skills" / "envs-and-transforms" / "assets" / "example_env.py").read_text()
    files = {"train.py": example + MAKE_LOSS, "agent.py": example, "configs.py": example,
             "PATH/train.py": example, "my_project/train.py": example, "path/to/project/train.py": example,
             "notebooks/train.py": example, "my_package/__init__.py": ""}
    for name in ("envs.py", "my_script.py", "FILE.py", "path/to/file.py", "path/to/my_env.py"):
        files[name] = env
    for name in ("my_env.py", "my_package/envs.py"):  # named with --expect-transform ObservationNorm
        files[name] = env + WITH_NORM
    # check_llm_wiring's known-good GRPO wiring (its default run's), as the user's my_grpo.py:wiring
    files["my_grpo.py"] = (BUNDLE / "src" / "torchrl_skill" / "checks" / "llm" / "llm_wiring_example.py").read_text()
    return files


def same_input(command: Command) -> tuple:
    """The command with each project file or folder it names replaced by a digest of what it
    holds: two commands that differ only in the name of the same input (``envs.py:make_env``
    and ``my_script.py:make_env``; ``PATH`` and ``my_project/``) get one key, and run once."""
    import hashlib

    files = project_files()

    def digest(items) -> str:
        return hashlib.sha1(repr(sorted(items)).encode()).hexdigest()[:12]

    key = []
    for token in shlex.split(command.args):
        token = PLACEHOLDERS.get(token, token)
        path, colon, func = token.partition(":") if ".py:" in token else (token, "", "")
        path = path.removeprefix("~/").rstrip("/")
        inside = [(rel[len(path) + 1:], text) for rel, text in files.items() if rel.startswith(path + "/")]
        if path in files:
            token = f"<file {digest([files[path]])}>{colon}{func}"
        elif inside and "." not in path:
            token = f"<folder {digest(inside)}>"
        key.append(token)
    return command.script, tuple(key)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A user's project holding every file and folder the documented commands name."""
    root = tmp_path_factory.mktemp("project")
    files = project_files()
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    logs = BUNDLE / "tests" / "fixtures" / "collectors"
    for name in ("FILE", "traceback.txt", "worker.log"):  # a log with no known fault: the diagnosis passes
        shutil.copy(logs / "unrelated_error.log", root / name)
    _dumps(root / "DIR")
    load_module("llm-vla-and-services/check_vla_schema").make_vla_batch().memmap(root / "my_batch")
    _checkout(root / "rl")
    return root


def _dumps(folder: Path) -> None:
    """``rb.dumps(DIR)`` of 20 Pendulum frames in trajectories of 5 (slices of 4 fit)."""
    from torchrl.collectors import Collector
    from torchrl.data import LazyTensorStorage, ReplayBuffer
    from torchrl.envs import PendulumEnv

    rb = ReplayBuffer(storage=LazyTensorStorage(20))
    collector = Collector(PendulumEnv(), None, frames_per_batch=20, total_frames=20, max_frames_per_traj=5)
    try:
        for batch in collector:
            rb.extend(batch)
    finally:
        collector.shutdown()
    rb.dumps(folder)


def _checkout(repo: Path) -> None:
    """A pytorch/rl-shaped git checkout with a branch one commit ahead of ``origin/main``."""
    selector = load_module("development-and-testing/select_focused_tests")
    selector.build_synthetic_checkout(repo)
    (repo / "test" / "test_collectors.py").write_text("def test_cpu_only():\n    assert True\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    subprocess.run([*git, "update-ref", "refs/remotes/origin/main", "HEAD"], check=True)
    (repo / "torchrl" / "objectives" / "ppo.py").write_text("class ClipPPOLoss:\n    pass\n")
    subprocess.run([*git, "commit", "-qam", "change"], check=True)


# ---------------------------------------------------------------------------- tests
def test_commands_are_read_from_every_skill_and_reference(capsys):
    files = {w.split(":")[0] for c in COMMANDS for w in c.where}
    with capsys.disabled():
        print(f"\ndocs commands: {len(COMMANDS)} distinct in {len(files)} files; {len(DEFAULT_RUNS)} default runs "
              f"(tests/test_script_contract.py), {len(EXPLAIN)} explain, {len(OTHERS)} others")
    assert len(COMMANDS) > 60 and "SKILL.md" in files
    assert any(c.stem == "explain" and c.args == "RayCollector" for c in COMMANDS)


def test_default_runs_are_the_contracts_runs():
    """A command with no argument or only ``--json`` is what test_script_contract runs for each script."""
    contract = {p.resolve() for p in SCRIPTS}
    outside = [str(c) for c in DEFAULT_RUNS if c.script not in contract]
    assert outside == [], f"documented default runs of scripts the contract does not run: {outside}"


@pytest.mark.slow
def test_explain_commands_succeed(project):
    failed = []
    for command in EXPLAIN:
        code, out = run_command(command, project)
        if code != 0:
            failed.append(f"{command} ({', '.join(command.where)}): exit {code}: {out[-600:]}")
    assert failed == [], "\n".join(failed)


def gate_flags(script: Path) -> set[str]:
    """The options of ``script`` that only switch on declared checks: ``--x`` store_true
    options whose destination is the ``flag`` of a check in its ``CHECKS``
    (``skill_report.run_declared`` skips such a check as "not asked for" without it)."""
    module = load_module(script)
    flags = {c.flag for c in getattr(module, "CHECKS", []) if c.flag}
    return {a.option_strings[-1] for a in module.build_parser()._actions
            if a.dest in flags and a.nargs == 0 and a.const is True and a.option_strings}


def widest(key: tuple, keys: list[tuple]) -> tuple:
    """The key of the run that covers ``key``'s: another of the same script whose tokens hold
    all of ``key``'s plus only gate flags (:func:`gate_flags`) runs every check ``key`` runs,
    with the same inputs, and more; else ``key`` itself."""
    script, tokens = key
    wider = [k for k in keys if k != key and k[0] == script and set(tokens) < set(k[1])
             and len(k[1]) == len(set(k[1])) and not (set(k[1]) - set(tokens)) - gate_flags(script)]
    return max(wider, key=lambda k: len(k[1])) if wider else key


def _params():
    """One run per distinct input (:func:`same_input`): the first command of each group runs,
    and the test id names it; the others of its group are the same run under other names. A
    command whose checks a wider documented command runs too (:func:`widest`) is in its group."""
    slow = [pytest.mark.slow]
    inputs = {c: same_input(c) for c in OTHERS}
    keys = list(dict.fromkeys(inputs.values()))
    groups: dict[tuple, list[Command]] = {}
    for c in sorted(OTHERS, key=lambda c: widest(inputs[c], keys) != inputs[c]):  # a group starts with its widest
        groups.setdefault(widest(inputs[c], keys), []).append(c)
    return [pytest.param(cs[0], id=str(cs[0]), marks=slow if cs[0].stem in SLOW or any(a in cs[0].args for a in SLOW_ARGS) else [])
            for cs in groups.values()]


def test_commands_naming_the_same_input_share_one_run():
    """The grouping is by content, never by script alone: a different flag or a different
    file's content is its own run."""
    by_key = {}
    for c in OTHERS:
        by_key.setdefault(same_input(c), []).append(str(c))
    shared = [cs for cs in by_key.values() if len(cs) > 1]
    assert any("envs.py:make_env" in " ".join(cs) and "my_script.py:make_env" in " ".join(cs) for cs in shared)
    env, norm = (Command(BUNDLE / "sub-skills/envs-and-transforms/scripts/check_user_env.py", a, ()) for a in
                 ("envs.py:make_env", "my_env.py:make_env"))  # my_env.py holds an ObservationNorm: other content
    assert same_input(env) != same_input(norm)
    flagged = Command(env.script, "envs.py:make_env --steps 5", ())
    assert same_input(flagged) != same_input(env)
    assert len(_params()) < len(OTHERS)


def test_a_command_whose_checks_a_wider_one_runs_shares_its_run():
    """``check_ray_scaling.py --ray`` runs a subset of ``--ray --ray-collector``'s checks
    (``--ray-collector`` only switches on ray:collector): one run, the wider one. An extra
    option that changes how checks run (``--grace 15``, ``--steps 5``) is no gate: its own run."""
    ray = BUNDLE / "sub-skills/collectors-and-replay/scripts/check_ray_scaling.py"
    assert gate_flags(ray) == {"--ray", "--ray-collector"}
    narrow, wide, graced = (Command(ray, a, ()) for a in ("--ray", "--ray --ray-collector", "--ray --grace 15"))
    keys = [same_input(c) for c in (narrow, wide, graced)]
    assert widest(keys[0], keys) == keys[1] and widest(keys[1], keys) == keys[1] and widest(keys[2], keys) == keys[2]
    env = BUNDLE / "sub-skills/envs-and-transforms/scripts/check_user_env.py"
    plain, stepped = (same_input(Command(env, a, ())) for a in ("envs.py:make_env", "envs.py:make_env --steps 5"))
    assert widest(plain, [plain, stepped]) == plain
    runs = [str(p.values[0]) for p in _params()]  # both are documented: the wide one runs, once
    assert {str(narrow), str(wide)} <= {str(c) for c in OTHERS} and str(wide) in runs and str(narrow) not in runs


@pytest.mark.parametrize("command", _params())
def test_documented_command_succeeds(command, project):
    writer = AFTER.get((command.stem, command.args))
    if writer is not None and not (project / "runs").exists():  # its writer ran on another worker, or not yet
        assert run_command(next(c for c in OTHERS if c.stem == writer and "--log-dir runs" in c.args), project)[0] == 0
    code, out = run_command(command, project)
    expected, says, shows = EXPECTED.get((command.stem, command.args), (0, "", ""))
    assert code == expected, f"{command} ({', '.join(command.where)}): exit {code}, not {expected}\n{out[-2000:]}"
    assert shows in out
    if says:  # the text says this exit code: read it there
        assert all(says in " ".join((BUNDLE / w.split(":")[0]).read_text().split()) for w in command.where), says


def test_commands_run_by_hand_are_benchmarks():
    """Only a learning benchmark is left to a person; a check script never is."""
    assert all(c.script.parent == BUNDLE / "benchmarks" for c in MANUAL), MANUAL
    assert {c.stem for c in MANUAL} <= set(BY_HAND)
