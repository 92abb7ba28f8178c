"""Check a user's TorchRL environment and name the cause and fix of each fault found.

TARGET is `module:factory` or `path/to/file.py:factory`; the factory is called with no
arguments and must return an EnvBase (a TransformedEnv, SerialEnv or GymEnv counts). With
no TARGET the bundled known-good example (scripts/_example_env.py:make_env) is checked.
Checks: a static scan of the factory's file for worker processes started at import time
(missing `if __name__ == "__main__":` guard); building the env; root Composite specs
shaped by env.batch_size; gymnasium vector envs in NEXT_STEP autoreset mode; what reset
returns; check_env_specs; a short rollout whose ("next", key) entries are compared with
the specs; a batched tensordict sent to the env; same seed -> same rollout; whether
env.set_seed re-seeds torch's global RNG; whether `terminated` fires at one fixed step
count in every episode (a time limit that must be `truncated`); and, with
--expect-transform, that the named transforms are attached. Exit 1 with the diagnosis.
Once a root cause is found in the reset output, later failures that follow from it are
reported under that root cause, not as separate faults.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
import skill_report as sr  # noqa: E402

HERE = Path(__file__).resolve().parent
DEFAULT_TARGET = f"{HERE / '_example_env.py'}:make_env"
EXAMPLE = (
    "python sub-skills/envs-and-transforms/scripts/check_user_env.py my_env.py:make_env "
    "--steps 5 --expect-transform ObservationNorm --json"
)

# Constructors that start worker processes when called (torchrl 0.14.1 / gymnasium 1.x).
PROCESS_STARTERS = {
    "ParallelEnv",
    "MultiSyncCollector",
    "MultiAsyncCollector",
    "MultiSyncDataCollector",
    "MultiaSyncDataCollector",
    "AsyncCollector",
    "AsyncVectorEnv",
    "Process",
    "Pool",
}

# Diagnoses: cause id -> (error texts that identify it, cause sentence, fix sentence).
# Each error text below was observed on torchrl 0.14.1 / tensordict 0.14.3 / gymnasium
# 1.4.0 with the fixtures in tests/fixtures/envs/.
CAUSES = {
    "reward-emitted-from-reset": (
        [
            "was present in the root tensordict of at least one of the tensordicts to stack",
            "expected Tensor as element 1 in argument 0, but got NoneType",
        ],
        "_reset returns a reward entry; reward belongs to _step only (rollouts become lazy "
        "stacks with 'reward' as an exclusive key, collectors fail to stack)",
        "drop reward keys from the TensorDict returned by _reset",
    ),
    "done-true-after-reset": (
        ["was (partially) True after a call to reset()"],
        "_reset returns done/terminated set to True",
        "return done/terminated/truncated as False from _reset (or omit them: EnvBase fills "
        "them with False from env.full_done_spec)",
    ),
    "root-composite-feature-shaped": (
        ["batch dimension mismatch, got self.batch_size="],
        "a root Composite spec was given the feature shape (e.g. Composite(obs=..., shape=(6,))) "
        "instead of the env's batch_size",
        "build root Composites with shape=env.batch_size (or omit shape when batch_size is ()); "
        "feature dims go on the leaf specs only, e.g. Unbounded(shape=(*batch_size, 6))",
    ),
    "key-missing-under-next": (
        ["List of keys present in fake but not in real"],
        "_step does not return every key of env.full_observation_spec / reward / done specs, "
        "so it is missing under ('next', key)",
        "return every observation, reward and done key from _step (EnvBase.step nests them "
        "under 'next'), or remove the key from the spec",
    ),
    "key-not-in-spec": (
        ["keys_in_real_not_in_fake={"],
        "_reset or _step returns a key that no spec declares",
        "declare it (observation_spec / state_spec, or the reward/done specs) or stop returning it",
    ),
    "value-outside-spec": (
        [
            "The dtypes of the real and fake tensordict don't match",
            "The shapes of the tensors to stack is incompatible",
            "spec check failed at root",
        ],
        "a value returned by _reset/_step has a dtype, shape or range outside its spec",
        "cast/reshape the value to spec.dtype and spec.shape (e.g. .to(torch.float32)), or fix "
        "the spec; spec.is_in(value) must be True",
    ),
    "batched-tensordict-to-unbatched-env": (
        [
            "Expected a tensordict with shape==env.batch_size",
            "only one element tensors can be converted to Python scalars",
        ],
        "a tensordict whose batch_size differs from env.batch_size was given to reset/step "
        "(or the env claims batch_locked=False but its _step assumes one instance)",
        "give env.step a tensordict of shape env.batch_size; for N copies use "
        "SerialEnv(N, make_env)/ParallelEnv(N, make_env) or build the env with batch_size=[N] "
        "and batch-aware _reset/_step",
    ),
    "missing-main-guard": (
        ["has finished its bootstrapping phase"],
        "worker processes are started at import time; with the spawn start method each worker "
        "re-imports the main module and starts workers again",
        "move ParallelEnv/collector construction and use under if __name__ == \"__main__\": "
        "and keep the env factory a module-level function",
    ),
    "gym-vector-next-step-autoreset": (
        ["The auto-reset mode must be one of SAME_STEP or DISABLED"],
        "a gymnasium VectorEnv in AutoresetMode.NEXT_STEP: after each done the next step is a "
        "junk transition (reward 0, action ignored) that torchrl records as real data",
        "use SerialEnv(N, functools.partial(GymEnv, ID)) (or ParallelEnv), or GymWrapper(gymnasium.make_vec(ID, "
        "num_envs=N, vector_kwargs={'autoreset_mode': gymnasium.vector.AutoresetMode.SAME_STEP}))",
    ),
    "env-reseeds-global-rng": (
        [],
        "env.set_seed(s) puts torch's global RNG into a state fixed by s (torch.manual_seed in "
        "_set_seed): every env.set_seed call silently restarts the policy's action sampling, "
        "exploration noise, dropout and replay-buffer sampling, and seeding N env copies with "
        "s, s+1, ... leaves the global RNG seeded by whichever copy ran last",
        "give the env its own generator: self.rng = torch.Generator() in __init__, "
        "self.rng.manual_seed(seed) in _set_seed, and torch.rand(..., generator=self.rng) "
        "(numpy: self.np_rng = numpy.random.default_rng(seed)); seed the global RNG once, "
        "in the training script, with torch.manual_seed",
    ),
    "time-limit-as-terminated": (
        [],
        "the env sets terminated when a step budget runs out: value estimators (GAE, TD(lambda), "
        "DQN/SAC targets) bootstrap from the next value on truncated but treat terminated as "
        "a true end (value 0), so every time-limit cut is learned as a terminal state",
        "write the time limit to truncated, not terminated: wrap the env with "
        "TransformedEnv(env, StepCounter(max_steps=N)) (it writes truncated and done), or "
        "declare a truncated entry in done_spec (Composite(done=..., terminated=..., "
        "truncated=...)) and return truncated=True, terminated=False at the limit; "
        "terminated stays for real end states only (correct only if the step count is part "
        "of the observation and the horizon part of the task)",
    ),
}

_KEYS_MISMATCH = "The keys of the specs and data do not match"


def _key_set(text: str, name: str) -> set | None:
    """The set printed as ``name=...`` by check_env_specs' keys mismatch, or None."""
    match = re.search(rf"{name}=(set\(\)|\{{.*?\}})", text)
    if not match:
        return None
    if match.group(1) == "set()":
        return set()
    try:
        return set(ast.literal_eval(match.group(1)))
    except (ValueError, SyntaxError):
        return None


def _diagnose_keys_mismatch(error_text: str) -> str | None:
    """check_env_specs prints both lists (one may be ``set()``); read them, not the labels.
    A root (not under "next") reward key only in the real rollout means _reset emits it."""
    extra = _key_set(error_text, "keys_in_real_not_in_fake")
    missing = _key_set(error_text, "keys_in_fake_not_in_real")
    if extra is None or missing is None:
        return None

    def name(k):
        return k[-1] if isinstance(k, tuple) else k

    def under_next(k):
        return isinstance(k, tuple) and k[0] == "next"

    root_rewards = sorted(str(k) for k in extra if not under_next(k) and "reward" in str(name(k)))
    if root_rewards:
        cause = "reward-emitted-from-reset"
        observed = f"keys in the real rollout but not in the specs: {sorted(map(str, extra))} (root, i.e. from reset)"
    elif missing:
        cause = "key-missing-under-next"
        observed = f"spec keys absent from the real rollout: {sorted(map(str, missing))}"
    elif extra:
        cause = "key-not-in-spec"
        observed = f"keys in the real rollout that no spec declares: {sorted(map(str, extra))}"
    else:
        return None
    texts, why, fix = CAUSES[cause]
    return f"[{cause}] cause: {why}; fix: {fix}; resolves: '{_KEYS_MISMATCH}' ({observed})"


def diagnose(error_text: str) -> str | None:
    """Return ``"cause: ...; fix: ...; resolves: '...'"`` for a known error text, else None.

    check_env_specs' keys mismatch (torchrl/envs/utils.py, 0.14.1) is read from the two
    key sets it prints, so a reward returned by _reset is not reported as a missing key."""
    if _KEYS_MISMATCH in error_text:
        found = _diagnose_keys_mismatch(error_text)
        if found:
            return found
    for cause_id, (texts, cause, fix) in CAUSES.items():
        for text in texts:
            if text in error_text:
                return f"[{cause_id}] cause: {cause}; fix: {fix}; resolves: '{text}'"
    return None


def _diagnosis(cause_id: str, observed: str) -> str:
    texts, cause, fix = CAUSES[cause_id]
    return f"[{cause_id}] cause: {cause}; fix: {fix}; observed: {observed}"


def _fail_from(err: BaseException, what: str) -> "sr.CheckFailed":
    text = f"{type(err).__name__}: {err}"
    first = text.strip().splitlines()[0][:300]
    found = diagnose(text)
    if found:
        return sr.CheckFailed(f"{what} raised {first} -> {found}")
    return sr.CheckFailed(f"{what} raised {first} (no known cause; read the traceback of this call)")


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument(
        "target",
        nargs="?",
        default=None,
        help="module:factory or path/to/file.py:factory (default: the bundled example env)",
    )
    parser.add_argument("--steps", type=sr.int_at_least(1), default=5, help="rollout length (default: 5)")
    parser.add_argument(
        "--time-limit-steps",
        type=sr.int_at_least(4),
        default=300,
        metavar="N",
        help="rollout length of the time-limit check; it needs two whole episodes, so give more "
        "than twice the env's step limit (default: 300)",
    )
    parser.add_argument(
        "--expect-transform",
        action="append",
        default=[],
        metavar="NAME",
        help="a transform class the env must carry, e.g. ObservationNorm (repeatable)",
    )
    return parser


def split_target(target: str) -> tuple[str, str]:
    """Split ``module:factory`` / ``path.py:factory`` at the last colon (Windows drive safe)."""
    head, sep, attr = target.rpartition(":")
    if not sep or not head or not attr:
        sr.cannot_run(f"TARGET {target!r} is not module:factory or path/to/file.py:factory", "e.g. my_env.py:make_env")
    return head, attr


def source_file(module_part: str) -> Path | None:
    """The .py file behind ``module_part`` (a path, or a module name found without importing it)."""
    if module_part.endswith(".py") or "/" in module_part or "\\" in module_part:
        path = Path(module_part).expanduser().resolve()
        if not path.is_file():
            sr.cannot_run(f"file {module_part} not found", "pass an existing path/to/file.py:factory")
        return path
    try:
        spec = importlib.util.find_spec(module_part)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _is_main_guard(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    text = ast.unparse(node.test)
    return "__name__" in text and "__main__" in text


def _call_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def unguarded_process_starts(source: str) -> list[tuple[int, str]]:
    """Calls to PROCESS_STARTERS that run at import time: module level, outside any
    function/class body and outside ``if __name__ == "__main__":``. Returns (line, name)."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return
        if _is_main_guard(node):
            for child in node.orelse:  # the else branch runs on import
                visit(child)
            return
        if isinstance(node, ast.Call) and _call_name(node) in PROCESS_STARTERS:
            found.append((node.lineno, _call_name(node)))
        for child in ast.iter_child_nodes(node):
            visit(child)

    for stmt in ast.parse(source).body:
        visit(stmt)
    return found


def check_static(path: Path | None) -> str:
    if path is None:
        raise sr.CheckSkipped("no .py source found for the target module; static scan not run")
    hits = unguarded_process_starts(path.read_text(encoding="utf-8"))
    if hits:
        where = ", ".join(f"{path.name}:{line} {name}(...)" for line, name in hits)
        raise sr.CheckFailed(
            _diagnosis(
                "missing-main-guard",
                f"{where} runs at import time; run as a script it dies with 'An attempt has been made "
                "to start a new process before the current process has finished its bootstrapping phase'",
            )
        )
    return f"{path.name}: no ParallelEnv/collector/vector-env process started at import time"


def load_factory(target: str):
    """Import the module of ``target`` (a file is imported under a private name, its folder
    put on sys.path for sibling imports) and return the factory attribute."""
    module_part, attr = split_target(target)
    if module_part.endswith(".py") or "/" in module_part or "\\" in module_part:
        path = Path(module_part).expanduser().resolve()
        sys.path.insert(0, str(path.parent))
        name = f"_user_env_{path.stem}_{abs(hash(str(path))) % 10**8}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_part)
    if not hasattr(module, attr):
        raise sr.CheckFailed(f"{module_part} has no attribute {attr!r}; pass the name of a function returning the env")
    return getattr(module, attr)


def root_spec_shapes(env) -> list[str]:
    """Names of root Composite specs whose shape is not env.batch_size."""
    bad = []
    for name in ("full_observation_spec", "full_state_spec", "full_action_spec", "full_reward_spec", "full_done_spec"):
        spec = getattr(env, name)
        if spec.shape != env.batch_size:
            bad.append(f"env.{name}.shape={tuple(spec.shape)} vs env.batch_size={tuple(env.batch_size)}")
    return bad


def check_root_shapes(env) -> str:
    bad = root_spec_shapes(env)
    if bad:
        raise sr.CheckFailed(_diagnosis("root-composite-feature-shaped", "; ".join(bad)))
    return f"root Composite specs (observation, state, action, reward, done) all shaped {list(env.batch_size)} = env.batch_size"


def gym_vector_autoreset(env) -> str | None:
    """AutoresetMode name when ``env`` (or the env under its transforms) wraps a gymnasium
    VectorEnv, else None."""
    base = getattr(env, "base_env", env)
    inner = getattr(base, "_env", None)
    mode = getattr(inner, "autoreset_mode", None)
    if mode is None:
        return None
    return getattr(mode, "name", str(mode))


def check_gym_autoreset(env) -> str:
    mode = gym_vector_autoreset(env)
    if mode is None:
        raise sr.CheckSkipped("not a GymEnv/GymWrapper over a gymnasium VectorEnv")
    if mode == "NEXT_STEP":
        raise sr.CheckFailed(
            _diagnosis(
                "gym-vector-next-step-autoreset",
                f"{type(getattr(env, 'base_env', env)).__name__} wraps a VectorEnv with autoreset_mode=NEXT_STEP "
                "(GymEnv(ID, num_envs=N) builds one on gymnasium>=1.1)",
            )
        )
    return f"gymnasium VectorEnv autoreset_mode={mode} (SAME_STEP/DISABLED are handled by torchrl)"


def check_reset(env) -> str:
    try:
        td = env.reset()
    except Exception as err:
        raise _fail_from(err, "env.reset()") from None
    keys = set(td.keys(True, True))
    rewards = [k for k in env.reward_keys if k in keys]
    if rewards:
        raise sr.CheckFailed(_diagnosis("reward-emitted-from-reset", f"env.reset() output holds {rewards}"))
    sr.expect(td.batch_size == env.batch_size, f"reset output batch {list(td.batch_size)} != env.batch_size {list(env.batch_size)}")
    return f"reset returned {len(keys)} keys, batch {list(td.batch_size)}, no reward, done flags False"


def check_specs(env) -> str:
    from torchrl.envs.utils import check_env_specs

    try:
        check_env_specs(env, seed=0)
    except Exception as err:
        raise _fail_from(err, "check_env_specs(env, seed=0)") from None
    return "check_env_specs(env, seed=0) passed"


def check_rollout(env, steps: int) -> str:
    """Rollout with random actions; every spec key present under "next" and inside its spec."""
    import torch
    from tensordict import LazyStackedTensorDict

    try:
        first = env.rand_step(env.reset())
        td = env.rollout(steps, break_when_any_done=False)
    except Exception as err:
        raise _fail_from(err, f"env.rand_step(env.reset()) / env.rollout({steps})") from None
    if isinstance(td, LazyStackedTensorDict):
        td_keys = set(td.keys(True, True))
        exclusive = set()
        for sub in td.tensordicts:
            exclusive |= set(sub.keys(True, True)) ^ td_keys
        rewards = [k for k in exclusive if k in env.reward_keys]
        if rewards:
            raise sr.CheckFailed(_diagnosis("reward-emitted-from-reset", f"rollout is a lazy stack with exclusive keys {sorted(map(str, exclusive))}"))
    problems, missing = [], []
    specs = [env.full_observation_spec, env.full_reward_spec, env.full_done_spec]
    n = 0
    first_keys = set(first.keys(True, True))
    for spec in specs:
        for key, leaf in spec.items(True, True):
            n += 1
            nkey = ("next", *key) if isinstance(key, tuple) else ("next", key)
            if nkey not in first_keys:
                missing.append(nkey)
                continue
            value = first.get(nkey)
            if value.dtype != leaf.dtype:
                problems.append(f"{nkey} dtype {value.dtype} vs spec {leaf.dtype}")
            elif value.shape != leaf.shape:
                problems.append(f"{nkey} shape {tuple(value.shape)} vs spec {tuple(leaf.shape)}")
            elif not leaf.is_in(value):
                problems.append(f"{nkey} values outside the spec's bounds")
    if missing:
        raise sr.CheckFailed(_diagnosis("key-missing-under-next", f"env.step output lacks {missing}"))
    if problems:
        raise sr.CheckFailed(_diagnosis("value-outside-spec", "; ".join(problems)))
    bad_rollout = [k for k in td.keys(True, True) if k[0] == "next" and k in first_keys and not _in_spec(env, k[1:] if len(k) > 2 else k[1], td.get(k))]
    if bad_rollout:
        raise sr.CheckFailed(_diagnosis("value-outside-spec", f"rollout values outside the spec for {bad_rollout}"))
    sr.expect(td.batch_size == torch.Size([*env.batch_size, steps]), f"rollout batch {list(td.batch_size)}")
    return (
        f"rollout batch {list(td.batch_size)}: {n} spec keys present under 'next', dtype/shape/bounds in spec; "
        f"{_done_note(env, td, steps)}"
    )


def _done_steps(env, td):
    """Rollout step indices (time dim = last batch dim of ``td``) where any done key of the
    env is True under "next", and how many done events that makes over the batch."""
    import torch

    have = set(td.keys(True, True))
    flags = None
    for key in env.done_keys:
        nkey = ("next", *key) if isinstance(key, tuple) else ("next", key)
        if nkey not in have:
            continue
        value = td.get(nkey)
        value = value.reshape(*td.batch_size, -1).any(-1)
        flags = value if flags is None else flags | value
    if flags is None:
        return [], 0
    per_step = flags.reshape(-1, td.batch_size[-1]).any(0)
    return torch.nonzero(per_step).flatten().tolist(), int(flags.sum())


def _done_note(env, td, steps: int) -> str:
    """Say what env.rollout(steps, break_when_any_done=False) did at each done, so that a
    time limit (e.g. StepCounter(max_steps=50)) with --steps 60 does not look ignored."""
    at, count = _done_steps(env, td)
    how = (
        f"env.rollout({steps}, break_when_any_done=False) resets every finished episode and keeps going, "
        f"so the batch is {steps} steps long whatever the time limit"
    )
    if not count:
        return f"{how}; no done flag was set in these {steps} steps"
    shown = ", ".join(map(str, at[:6])) + (", ..." if len(at) > 6 else "")
    return (
        f"{how}; done was set {count} time(s), at step index(es) {shown} (each followed by a reset); "
        "the default break_when_any_done=True would have stopped at the first one"
    )


def _in_spec(env, key, value) -> bool:
    """True when every step of a rollout entry ``value`` ([*batch, T, ...]) is in its spec."""
    spec = env.full_observation_spec
    for full in (env.full_observation_spec, env.full_reward_spec, env.full_done_spec):
        if key in full.keys(True, True):
            spec = full[key]
            break
    else:
        return True
    t_dim = len(env.batch_size)
    return all(spec.is_in(value.select(t_dim, t)) for t in range(value.shape[t_dim]))


def check_batched_input(env) -> str:
    """Give the env a tensordict with one extra leading dim of 2 and classify the outcome."""
    import torch

    td = env.reset()
    batched = torch.stack([td, td.clone()], 0).contiguous()
    batched.update(torch.stack([env.full_action_spec.rand(), env.full_action_spec.rand()], 0))
    try:
        out = env.step(batched)
    except Exception as err:
        text = f"{type(err).__name__}: {err}"
        if env.batch_locked and "Expected a tensordict with shape==env.batch_size" in text:
            return (
                f"batch-locked env (batch_size {list(env.batch_size)}) rejects a [2, ...] tensordict with "
                "'Expected a tensordict with shape==env.batch_size' (step one env.batch_size at a time, "
                "or use SerialEnv/ParallelEnv)"
            )
        raise sr.CheckFailed(
            _diagnosis(
                "batched-tensordict-to-unbatched-env",
                f"env.batch_locked={env.batch_locked}; env.step on a [2, ...] tensordict raised "
                f"{text.splitlines()[0][:200]}",
            )
        ) from None
    if env.batch_locked:
        raise sr.CheckFailed(f"batch-locked env accepted a tensordict of batch {list(batched.batch_size)}")
    sr.expect(out.batch_size[:1] == torch.Size([2]), f"batched step returned batch {list(out.batch_size)}")
    return f"batch_locked=False env stepped a [2, ...] tensordict -> batch {list(out.batch_size)}"


def _rollout_signature(env, seed: int, steps: int):
    import torch

    torch.manual_seed(seed)
    env.set_seed(seed)
    td = env.rollout(steps, break_when_any_done=False)
    specs = list(env.full_observation_spec.keys(True, True)) + list(env.reward_keys) + list(env.done_keys)
    keys = [("next", *k) if isinstance(k, tuple) else ("next", k) for k in specs]
    have = set(td.keys(True, True))  # a LazyStackedTensorDict's keys view misses nested keys on `in`
    present = [td.get(k).float() for k in keys if k in have]
    sr.expect(bool(present), "the rollout holds none of the spec'd observation, reward or done keys under 'next'")
    return present


def check_seed(env, steps: int) -> str:
    import torch

    a = _rollout_signature(env, 0, steps)
    b = _rollout_signature(env, 0, steps)
    same = all(torch.equal(x, y) for x, y in zip(a, b))
    sr.expect(
        same,
        "two rollouts after env.set_seed(0) (and torch.manual_seed(0)) differ: the env draws from an RNG "
        "that _set_seed does not seed (numpy.random, random, or an unseeded generator); fix: seed that "
        "RNG inside _set_seed(seed)",
    )
    c = _rollout_signature(env, 1, steps)
    differs = not all(torch.equal(x, y) for x, y in zip(a, c))
    note = "seeds 0 and 1 give different rollouts" if differs else (
        "seeds 0 and 1 give identical observations (deterministic env, or _set_seed ignores the seed)"
    )
    return f"set_seed(0) twice -> identical rollouts; {note}"


def global_rng_after_set_seed(env, seed: int = 7):
    """Call ``env.set_seed(seed)`` from two different states of torch's global RNG and return
    ``(reseeded, equals_manual_seed, changed)``: ``reseeded`` when the global state after the
    call is the same both times (set_seed fixed it, whatever it was before);
    ``equals_manual_seed`` when that state is the one torch.manual_seed(seed) gives;
    ``changed`` when set_seed moved the global state at all. The caller's global RNG state is
    restored. EnvBase.set_seed (torchrl/envs/common.py, 0.14.1) only calls _set_seed(seed)."""
    import torch

    saved = torch.get_rng_state()
    try:
        afters, changed = [], False
        for prior in (1234, 98765):
            torch.manual_seed(prior)
            torch.rand(3)
            before = torch.get_rng_state()
            env.set_seed(seed)
            after = torch.get_rng_state()
            changed |= not torch.equal(before, after)
            afters.append(after)
        torch.manual_seed(seed)
        reference = torch.get_rng_state()
        reseeded = torch.equal(afters[0], afters[1])
        return reseeded, reseeded and torch.equal(afters[0], reference), changed
    finally:
        torch.set_rng_state(saved)


def check_global_rng(env) -> str:
    seed = 7
    reseeded, equals_manual, changed = global_rng_after_set_seed(env, seed)
    if reseeded:
        how = (
            f"after env.set_seed({seed}) torch's global RNG is in exactly the state torch.manual_seed({seed}) gives"
            if equals_manual
            else f"after env.set_seed({seed}) torch's global RNG is in the same state whatever it was before "
            "(re-seeded with a value derived from the seed)"
        )
        raise sr.CheckFailed(_diagnosis("env-reseeds-global-rng", how))
    if changed:
        return (
            f"env.set_seed({seed}) draws from torch's global RNG but does not re-seed it (state after the call "
            "depends on the state before); the env's randomness follows torch.manual_seed"
        )
    return f"env.set_seed({seed}) leaves torch's global RNG untouched (the env seeds only its own RNGs)"


def episodes_from_rollout(env, td) -> list[tuple[int, bool, bool]]:
    """Whole episodes of a rollout made with break_when_any_done=False, as
    ``(length, terminated, truncated)`` read at the step where done was set, for every
    batch element (batch dims flattened); the unfinished tail is left out. Reads the root
    ("next", "done"/"terminated"/"truncated") entries; [] when the env has no root done."""
    have = set(td.keys(True, True))
    if ("next", "done") not in have:
        return []
    t = td.batch_size[-1]

    def flag(name):
        if ("next", name) not in have:
            return None
        return td.get(("next", name)).reshape(*td.batch_size, -1).any(-1).reshape(-1, t).tolist()

    done, term, trunc = flag("done"), flag("terminated"), flag("truncated")
    episodes = []
    for i, row in enumerate(done):
        length = 0
        for step, is_done in enumerate(row):
            length += 1
            if is_done:
                episodes.append(
                    (length, bool(term[i][step]) if term else False, bool(trunc[i][step]) if trunc else False)
                )
                length = 0
    return episodes


def fixed_terminal_length(episodes: list[tuple[int, bool, bool]]) -> int | None:
    """The step count L at which ``terminated`` ends episodes like a time limit, else None.

    Flagged only when it is near certain: at least 2 episodes end with terminated at exactly
    L >= 2 steps, no episode is longer than L (a cap), and those episodes are at least half
    of all whole episodes. Real end states reached by random actions from random starts
    spread over many lengths, so they do not pass this; a 1-step (bandit) task is left
    alone."""
    if not episodes:
        return None
    longest = max(length for length, _, _ in episodes)
    at_cap = sum(1 for length, term, _ in episodes if length == longest and term)
    if longest >= 2 and at_cap >= 2 and 2 * at_cap >= len(episodes):
        return longest
    return None


def check_time_limit(env, steps: int) -> str:
    """Roll out ``steps`` random steps and fail when terminated acts as a step limit."""
    import torch

    torch.manual_seed(0)
    env.set_seed(0)
    td = env.rollout(steps, break_when_any_done=False)
    episodes = episodes_from_rollout(env, td)
    has_truncated = any((k[-1] if isinstance(k, tuple) else k) == "truncated" for k in env.done_keys)
    limit = fixed_terminal_length(episodes)
    lengths = sorted({length for length, _, _ in episodes})
    if limit is not None:
        n_at = sum(1 for length, term, _ in episodes if length == limit and term)
        trunc_note = (
            "the env has a truncated key, yet terminated is set at the limit too"
            if has_truncated
            else "the env has no truncated key"
        )
        raise sr.CheckFailed(
            _diagnosis(
                "time-limit-as-terminated",
                f"in env.rollout({steps}, break_when_any_done=False) with random actions, {n_at} of "
                f"{len(episodes)} whole episodes ended with terminated=True at exactly step {limit} and none "
                f"ran longer; {trunc_note}",
            )
        )
    if len(episodes) < 2:
        if has_truncated:
            return (
                f"env declares truncated; {len(episodes)} whole episode(s) in {steps} random steps, too few to "
                "test terminated for a fixed step count"
            )
        raise sr.CheckSkipped(
            f"only {len(episodes)} whole episode(s) in {steps} random steps, no truncated key: cannot tell whether "
            "terminated is a time limit; pass --time-limit-steps N with N over twice the episode limit"
        )
    return (
        f"{len(episodes)} whole episodes in {steps} random steps, lengths {lengths[:8]}{' ...' if len(lengths) > 8 else ''}: "
        f"terminated does not fire at one fixed step count; truncated key {'present' if has_truncated else 'absent'}"
    )


def transform_names(env) -> list[str]:
    """Class names of the transforms on ``env`` (nested TransformedEnvs and Compose flattened)."""
    from torchrl.envs import Compose, TransformedEnv

    names: list[str] = []

    def walk(t):
        if isinstance(t, Compose):
            for sub in t.transforms:
                walk(sub)
        else:
            names.append(type(t).__name__)

    e = env
    while isinstance(e, TransformedEnv):
        walk(e.transform)
        e = e.base_env
    return names


def check_transforms(env, expected: list[str]) -> str:
    names = transform_names(env)
    missing = [n for n in expected if n not in names]
    if missing:
        raise sr.CheckFailed(
            f"expected transform(s) {missing} are not attached; attached: {names or 'none'}; cause: the transform was "
            "built but never added (e.g. Compose() left empty, or a new TransformedEnv made from the base env); fix: "
            f"env.append_transform({missing[0]}(...)) or TransformedEnv(base_env, Compose(...))"
        )
    if not names:
        return f"no transforms attached ({type(env).__name__}); pass --expect-transform NAME to require one"
    return f"transforms attached in order: {names}"


ROOT_CAUSES = ("reward-emitted-from-reset", "done-true-after-reset")


def relabel(detail: str, root: str, found_by: str) -> str:
    """Report a failure under the root cause ``root`` found earlier by check ``found_by``
    when it names another cause (or none): the fault it saw follows from the root cause."""
    if f"[{root}]" in detail:
        return detail
    tags = re.findall(r"\[([a-z0-9-]+)\]", detail)
    if not tags and "(no known cause" not in detail:
        return detail  # the check's own diagnosis, unrelated to the reset output
    seen = detail.split(" -> [", 1)[0]
    if seen.startswith("["):
        seen = detail.split("observed: ", 1)[-1]
    texts, cause, fix = CAUSES[root]
    return (
        f"[{root}] follows from the root cause found by {found_by}; cause: {cause}; fix: {fix}; "
        f"then rerun this check. It saw: {seen.replace(' (no known cause; read the traceback of this call)', '')}"
    )


def mapped(fn, root: dict | None = None):
    """Wrap a check so that an unexpected exception is reported with its named cause, and,
    when ``root`` holds a root cause (``{"id": ..., "by": check name}``), so that a failure
    is reported under it instead of as a separate fault."""

    def call():
        try:
            return fn()
        except (sr.CheckFailed, sr.CheckSkipped, sr.BackendMissing):
            raise
        except Exception as err:
            raise _fail_from(err, "the check") from None

    def wrapper():
        try:
            return call()
        except sr.CheckFailed as err:
            if root and root.get("id"):
                raise sr.CheckFailed(relabel(str(err), root["id"], root["by"])) from None
            raise

    return wrapper


def run_checks(args, report: sr.Report) -> None:
    target = args.target or DEFAULT_TARGET
    module_part, _ = split_target(target)
    path = source_file(module_part)
    report.run("target:static-main-guard", lambda: check_static(path))
    static = report.result("target:static-main-guard")
    names = [
        "env:root-spec-shapes",
        "env:gym-vector-autoreset",
        "env:reset-output",
        "env:check_env_specs",
        "env:rollout-next-keys-in-spec",
        "env:batched-input",
        "env:seed-reproducible",
        "env:seed-global-rng",
        "env:time-limit-as-truncation",
        "env:transforms",
    ]
    if static.status == "fail":
        report.add("target:build", "skip", "not imported: it would start worker processes (fix the guard first)")
        for name in names:
            report.add(name, "skip", "not run: the env was not built")
        return
    state: dict = {}

    def build():
        try:
            factory = load_factory(target)
            env = factory() if callable(factory) else factory
        except sr.CheckFailed:
            raise
        except BaseException as err:
            raise _fail_from(err, f"building {target}") from None
        from torchrl.envs import EnvBase

        sr.expect(isinstance(env, EnvBase), f"{target} returned {type(env).__name__}, not a torchrl EnvBase")
        state["env"] = env
        return f"{target} -> {type(env).__name__}, batch_size {list(env.batch_size)}"

    report.run("target:build", build)
    env = state.get("env")
    if env is None:
        for name in names:
            report.add(name, "skip", "not run: the env was not built")
        return
    try:
        report.run("env:root-spec-shapes", mapped(lambda: check_root_shapes(env)))
        report.run("env:gym-vector-autoreset", mapped(lambda: check_gym_autoreset(env)))
        report.run("env:reset-output", mapped(lambda: check_reset(env)))
        reset = report.result("env:reset-output")
        root: dict = {}
        for cause_id in ROOT_CAUSES:
            if reset.status == "fail" and f"[{cause_id}]" in reset.detail:
                root.update(id=cause_id, by="env:reset-output")
        # these checks reset and roll out the env: a root cause in the reset output explains
        # their failures; the RNG and time-limit checks look at independent faults.
        report.run("env:check_env_specs", mapped(lambda: check_specs(env), root))
        report.run("env:rollout-next-keys-in-spec", mapped(lambda: check_rollout(env, args.steps), root))
        report.run("env:batched-input", mapped(lambda: check_batched_input(env), root))
        report.run("env:seed-reproducible", mapped(lambda: check_seed(env, args.steps), root))
        report.run("env:seed-global-rng", mapped(lambda: check_global_rng(env)))
        report.run("env:time-limit-as-truncation", mapped(lambda: check_time_limit(env, args.time_limit_steps)))
        report.run("env:transforms", mapped(lambda: check_transforms(env, args.expect_transform)))
    finally:
        try:
            if not env.is_closed:
                env.close()
        except Exception:  # closing a half-built env must not hide the diagnosis
            pass


def main(argv=None) -> int:
    return sr.standard_main(__file__, build_parser, run_checks, argv)


if __name__ == "__main__":
    sr.main_guard(main)
