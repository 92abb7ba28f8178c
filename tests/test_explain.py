"""scripts/explain.py: the facts it prints by kind match ground truth computed here on
the real library (torchrl 0.14.1). Finding every public name: tests/test_explain_names.py.

Shared helper kept here (not in conftest): ``lines(name)`` runs the explanation in this
process and returns its text.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
import textwrap
import warnings

import jsonschema
from torchrl_skill import data
import pytest
import torch
from conftest import BUNDLE, load_module, rows, run_main, run_python

from torchrl_skill.explain import facts as fx
from torchrl_skill.explain import kinds
from torchrl_skill.explain import names as en

explain = load_module("scripts/explain")
sys.path.insert(0, str(BUNDLE / "tests" / "error_triggers"))
from _tiny import TinyEnv, actor, critic  # noqa: E402

from torchrl_skill.report import skill_report as sr  # noqa: E402

VERSIONS = sr.stack_versions()
SCHEMA = json.loads(data.REPORT_SCHEMA.read_text())


def lines(name: str) -> str:
    found, out = explain.explain_lines(name, VERSIONS)
    assert found, out
    return " ".join(" ".join(out).split())


# ---------------------------------------------------------------------------- losses
def _qnet():
    from torchrl.modules import ValueOperator

    class QNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def forward(self, observation, action):
            return self.linear(torch.cat([observation, action], -1))

    return ValueOperator(QNet(), in_keys=["observation", "action"])


def _own_copy(loss, name: str, module) -> bool:
    mine = {id(p) for p in module.parameters()}
    leaves = [v for v in getattr(loss, f"{name}_params").values(True, True) if isinstance(v, torch.nn.Parameter)]
    return bool(leaves) and not any(id(v) in mine for v in leaves)


def test_sacloss_trains_its_own_qvalue_copy_even_with_one_net():
    from torchrl.objectives import SACLoss

    truth = {}
    for n in (2, 1):
        qnet = _qnet()
        loss = SACLoss(actor(act=1), qnet, num_qvalue_nets=n)
        truth[n] = _own_copy(loss, "qvalue_network", qnet)
        assert not _own_copy(loss, "actor_network", loss.actor_network)  # the actor is shared
    assert truth == {2: True, 1: True}
    text = lines("SACLoss")
    assert "qvalue_network: own copy" in text and "with num_qvalue_nets=1: own copy" in text
    assert "actor_network: shared" in text
    assert "has target parameters" in text  # target_qvalue_network_params, no updater built


def test_clipppoloss_default_estimator_and_its_gamma_lambda():
    from torchrl.objectives import ClipPPOLoss

    loss = ClipPPOLoss(actor(), critic())
    est = loss.value_estimator
    expected = f"value estimator by default: {type(est).__name__} (gamma={float(est.gamma):g}, lmbda={float(est.lmbda):g})"
    text = lines("ClipPPOLoss")
    assert expected in text and type(est).__name__ == "GAE"
    keys = dataclasses.asdict(loss.tensor_keys)
    assert all(f"{k}={v!r}" in text for k, v in keys.items())
    assert "actor_network: shared" in text and "critic_network: shared" in text
    assert "target parameters: none" in text


def test_ppo_forward_runs_its_estimator_only_without_an_advantage():
    """The claim behind "forward runs it when the batch has no 'advantage' entry"."""
    from torchrl.envs import ExplorationType, set_exploration_type
    from torchrl.objectives import ClipPPOLoss

    policy = actor()
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        batch = TinyEnv().rollout(4, policy)
    loss = ClipPPOLoss(policy, critic())
    calls = []
    estimator = loss.value_estimator
    real = estimator.forward
    estimator.forward = lambda *a, **kw: calls.append(1) or real(*a, **kw)
    loss(batch.clone())
    assert calls == [1]
    with_adv = batch.clone()
    with_adv["advantage"] = torch.zeros(4, 1)
    with_adv["value_target"] = torch.zeros(4, 1)  # what a GAE you ran yourself writes too
    loss(with_adv)
    assert calls == [1]
    assert "forward runs it only when the batch has no 'advantage' entry" in lines("ClipPPOLoss")
    assert "forward runs it" not in lines("DQNLoss")  # DQN computes its target every forward


def test_make_value_estimator_accepts_what_the_loss_accepts():
    from torchrl.objectives import SACLoss
    from torchrl.objectives.utils import ValueEstimators

    loss = SACLoss(actor(act=1), _qnet())
    ok = []
    for member in ValueEstimators:
        try:
            loss.make_value_estimator(member)
            ok.append(member.name)
        except NotImplementedError:
            pass
    assert f"make_value_estimator accepts: {', '.join(ok)};" in lines("SACLoss")


def test_dqn_target_parameters_need_an_updater():
    text = lines("DQNLoss")
    assert "has target parameters" in text and "delay_value=" in text


def test_a_loss_that_cannot_be_built_still_gets_its_class_defaults():
    text = lines("DreamerActorLoss")
    assert "not built: needs" in text and "tensor_keys (class defaults)" in text


# ---------------------------------------------------------------------------- transforms
def _user_transforms():
    """A user transform overriding only _call, and the same with the _reset fix."""
    from torchrl.envs import Transform

    class CallOnly(Transform):
        def _call(self, next_tensordict):
            next_tensordict["observation"] = next_tensordict["observation"] + 100
            return next_tensordict

    class CallAndReset(CallOnly):
        def _reset(self, tensordict, tensordict_reset):
            return self._call(tensordict_reset)

    return CallOnly, CallAndReset


def test_call_only_transform_reports_no_reset_and_really_skips_reset():
    from torchrl.envs import TransformedEnv

    call_only, fixed = _user_transforms()
    for cls, acts_on_reset in ((call_only, False), (fixed, True)):
        env = TransformedEnv(TinyEnv(), cls())
        reset = env.reset()
        stepped = env.rand_step(reset.clone())
        assert bool((reset["observation"] == 100).all()) is acts_on_reset  # TinyEnv returns zeros
        assert bool((stepped["next", "observation"] == 100).all())
        facts = " ".join(kinds.transform_facts(cls))
        assert ("acts on reset output: yes" in facts) is acts_on_reset
        assert ("acts on reset output: no" in facts) is not acts_on_reset
        assert "acts on step output: yes" in facts and "acts on actions (the input of the base env's step): no" in facts
    assert "also define _reset(self, tensordict, tensordict_reset)" in " ".join(kinds.transform_facts(call_only))


def test_user_transform_from_a_file(tmp_path, monkeypatch):
    (tmp_path / "my_transforms.py").write_text(textwrap.dedent("""
        from torchrl.envs import Transform

        class AddHundred(Transform):
            def _call(self, next_tensordict):
                next_tensordict["observation"] = next_tensordict["observation"] + 100
                return next_tensordict
    """))
    monkeypatch.chdir(tmp_path)
    text = lines("my_transforms.py:AddHundred")
    assert "your code" in text and "acts on reset output: no" in text


def test_builtin_transforms_report_what_they_touch():
    from torchrl.envs import StepCounter, TransformedEnv

    env = TransformedEnv(TinyEnv(), StepCounter())
    assert "step_count" in env.reset().keys()  # ground truth: StepCounter acts at reset
    text = lines("StepCounter")
    assert "acts on reset output: yes" in text and "acts on step output: yes" in text
    assert "acts on actions (the input of the base env's step): yes" in lines("DoubleToFloat")


# ---------------------------------------------------------------------------- other kinds
def test_methods_a_class_adds_are_listed_from_the_live_class():
    """VecNormV2 adds freeze/frozen_copy (what evaluation-envs.md's fix calls); the methods it
    overrides (forward, _step) and what its bases define (load_state_dict) are not repeated,
    and a class that adds nothing public gets no line."""
    from torchrl.envs import GymEnv, Transform, VecNormV2

    added = fx.own_methods(VecNormV2)
    assert {"freeze()", "unfreeze()", "frozen_copy()"} <= set(added), added
    assert not [m for m in added if m.split("(")[0] in ("forward", "load_state_dict", "transform_observation_spec")]
    assert all(callable(getattr(VecNormV2, m.split("(")[0])) for m in added)
    assert not [m for m in fx.own_methods(Transform) if m.split("(")[0] in vars(torch.nn.Module)]
    assert fx.own_methods(GymEnv) == [] and fx.own_methods(VecNormV2.freeze) == []
    text = lines("VecNormV2")
    assert "methods it adds: freeze(), unfreeze(), frozen_copy()" in text and "methods it adds" not in lines("GymEnv")


@pytest.mark.slow
def test_collector_num_collectors_alone_builds_the_async_multi_collector():
    from torchrl.collectors import Collector
    from torchrl.testing.mocking_classes import ContinuousActionVecMockEnv

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        built = Collector(ContinuousActionVecMockEnv, None, num_collectors=1, frames_per_batch=4, total_frames=4)
    try:
        truth = type(built).__name__
    finally:
        built.shutdown()
    text = lines("Collector")
    assert f"num_collectors=N alone builds: {truth}" in text and truth == "MultiAsyncCollector"
    assert "num_collectors=N, sync=True builds: MultiSyncCollector" in text
    assert "Collector(make_env, policy) builds: Collector" in text


def test_storage_ndim_fact_matches_a_real_extend():
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    counts = {}
    for ndim in (1, 2):
        rb = ReplayBuffer(storage=LazyTensorStorage(10, ndim=ndim))
        rb.extend(TensorDict(obs=torch.zeros(2, 3), batch_size=[2, 3]))
        counts[ndim] = len(rb)
    text = lines("LazyTensorStorage")
    assert f"stores {counts[1]} items with ndim=1" in text and f"and {counts[2]} with ndim=2" in text


def test_probabilistic_actor_default_interaction_is_deterministic():
    from tensordict import TensorDict
    from torchrl.envs import ExplorationType, set_exploration_type

    policy = actor()
    obs = TensorDict(observation=torch.randn(3))
    first, second = policy(obs.clone())["action"], policy(obs.clone())["action"]
    assert torch.equal(first, second)  # no context: the deterministic mode
    with set_exploration_type(ExplorationType.RANDOM):
        assert not torch.equal(policy(obs.clone())["action"], policy(obs.clone())["action"])
    text = lines("ProbabilisticActor")
    assert "default_interaction_type=InteractionType.DETERMINISTIC" in text
    assert "**kwargs go to: SafeProbabilisticModule(" in text and "return_log_prob=False" in text


def test_signatures_see_through_overloads_and_metaclasses():
    assert "TransformedEnv(base_env, transform=None" in lines("torchrl.envs.TransformedEnv")
    assert "ReplayBuffer(*, storage=None, sampler=None" in lines("ReplayBuffer")
    text = lines("ReplayBuffer.extend")
    sig = text[text.find("signature:"):][:160]
    assert "ReplayBuffer.extend(self, data, *, update_priority=None)" in text, sig
    assert "from torchrl.data import ReplayBuffer" in text


def test_signatures_ignore_what_ray_remote_adds():
    """``ray.remote(cls)`` (what a Ray-backed buffer does) rewrites the methods' signatures in
    place with ``_ray_trace_ctx``; explain shows the parameters a caller passes. Seen as an
    order-dependent failure of the test above in the full suite."""
    import inspect

    import ray
    from torchrl.data import ReplayBuffer

    ray.remote(ReplayBuffer)  # builds the actor class only: no Ray session starts
    assert "_ray_trace_ctx" in str(inspect.signature(ReplayBuffer.extend))
    text = lines("ReplayBuffer.extend")
    assert "ReplayBuffer.extend(self, data, *, update_priority=None)" in text
    assert "_ray_trace_ctx" not in text


def test_value_estimator_keys_are_its_class_defaults():
    from torchrl.objectives.value import GAE

    keys = dataclasses.asdict(GAE._AcceptedKeys())
    assert f"value={keys['value']!r}" in lines("GAE")


# ---------------------------------------------------------------------------- notes
def test_notes_carry_renames_and_index_entries_with_links():
    from torchrl_skill.explain import error_index as ei

    assert en.api_changes_path().is_file()  # a missing table reads as "no notes", silently
    text = lines("ClipPPOLoss")
    assert "keyword entropy_coef= -> entropy_coeff=" in text
    assert "sub-skills/development-and-testing/references/api-changes.md#keyword-arguments" in text
    entry = next(e for e in ei.load() if "ClipPPOLoss" in e.names)
    assert f"[{entry.page}#{entry.anchor}]" in text
    page = (BUNDLE / entry.page).read_text()
    assert f"### {entry.title}" in page and ei.slug(entry.title) == entry.anchor


def test_unknown_and_removed_names(capsys):
    code, report = run_main("scripts/explain", "CompositeSpec", "ClipPPOLos")
    assert code == 1 and not report["ok"]
    detail = rows(report)["explain:CompositeSpec"][1]
    assert f"not in torchrl {VERSIONS['torchrl']}" in detail and "torchrl.data.Composite" in detail
    assert "removed in 0.11.0" in detail and "api-changes.md#removed-or-moved-names" in detail
    assert "torchrl.objectives.ClipPPOLoss" in rows(report)["explain:ClipPPOLos"][1]
    jsonschema.validate(report, SCHEMA)


def test_a_name_only_a_submodule_defines_is_found_there():
    """ContinuousBox, the type of Bounded(...).space, is in no public __all__ (0.14.1)."""
    from torchrl.data import Bounded

    box = type(Bounded(-1, 1, shape=(1,)).space)
    hit = en.resolve("ContinuousBox")
    assert hit.obj is box and hit.path == f"{box.__module__}.ContinuousBox" and not hit.public
    text = lines("ContinuousBox")
    assert f"import: from {box.__module__} import ContinuousBox" in text and "not exported" in text
    assert "ContinuousBox.low" in lines("ContinuousBox.low")
    assert not isinstance(en.resolve("NoSuchThingXyz"), en.Found) and not isinstance(en.resolve("_zip_strict"), en.Found)
    found, out = explain.explain_lines("NoSuchThingXyz", VERSIONS)
    assert not found and f"not in torchrl {VERSIONS['torchrl']}" in out[0]


def test_version_outside_the_verified_range_is_said():
    found, out = explain.explain_lines("StepCounter", {**VERSIONS, "torchrl": "0.15.0"})
    assert found and "outside the verified 0.14.1" in out[0]


# ---------------------------------------------------------------------------- errors
def test_error_text_finds_its_entry_and_json_validates():
    code, report = run_main("scripts/explain", "--error", "KeyError: \"Couldn't find the log-prob sample_log_prob in the input data.\"")
    assert code == 0
    first = [c for c in report["checks"] if c["name"] != "stack:version"][0]  # off the verified stack a row comes first
    assert first["name"] == "error:couldnt-find-log-prob-action-log-2" and "verify:" in first["detail"]
    jsonschema.validate(report, SCHEMA)


def test_error_that_matches_nothing_exits_1():
    code, report = run_main("scripts/explain", "--error", "ZeroDivisionError: division by zero")
    assert code == 1 and rows(report)["error:no-match"][0] == "fail"


@pytest.mark.parametrize("argv, says", [
    ([""], "empty name"),
    (["not-a-name"], "not a Python identifier"),
    (["--error-file", "/no/such/traceback.txt"], "no such file"),
    (["--error", "   "], "empty"),
])
def test_bad_input_exits_2_with_one_line(argv, says):
    proc = run_python([str(BUNDLE / "scripts" / "explain.py"), *argv], timeout=300, warm=True)
    lines_ = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines_) == 1 and says in lines_[0] and "Traceback" not in proc.stderr


def test_binary_error_file_exits_2(tmp_path):
    blob = tmp_path / "core.bin"
    blob.write_bytes(b"\x00\x01\x02")
    assert run_main("scripts/explain", "--error-file", str(blob)) == (2, {})


def test_error_from_stdin():
    proc = run_python([str(BUNDLE / "scripts" / "explain.py"), "--error-file", "-"], timeout=300, warm=True)
    assert proc.returncode == 2  # empty stdin: nothing to look up
    import subprocess

    proc = subprocess.run([sys.executable, str(BUNDLE / "scripts" / "explain.py"), "--error-file", "-", "--json"],
                          input="ValueError: pad_output=True is incompatible with strict_length=True\n",
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "pad-output-true-incompatible-strict-length" in proc.stdout


@pytest.mark.slow
def test_cli_keeps_optional_backends_out():
    """A fresh explain of ClipPPOLoss imports no Ray (torchrl.data imports it when installed)."""
    # read at exit: the script ends through skill_report._exit_now, which runs atexit handlers
    # and then leaves with os._exit (no SystemExit reaches a caller)
    code = (
        "import atexit, runpy, sys\n"
        "atexit.register(lambda: print('RAY', 'ray' in sys.modules and sys.modules['ray'] is not None, file=sys.stderr))\n"
        f"sys.argv = [{str(BUNDLE / 'scripts' / 'explain.py')!r}, 'ClipPPOLoss']\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    proc = run_python(["-c", code], timeout=300)
    assert proc.returncode == 0 and "RAY False" in proc.stderr, proc.stderr[-1500:]


def test_backend_names_report_the_backend_missing():
    text = lines("vLLMWrapper")
    assert "vllm not installed (pip install vllm)" in text


def test_parameter_groups_and_signature_helpers():
    from torchrl.objectives import SACLoss

    groups = " ".join(fx.parameter_groups(SACLoss))
    assert "networks: actor_network (required), qvalue_network (required)" in groups
    assert "targets: delay_actor, delay_qvalue, delay_value" in groups
    assert fx.kind_of(SACLoss) == "loss module" and fx.kind_of(inspect) == "module"
