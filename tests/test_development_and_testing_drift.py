"""scan_api_drift.py and api_changes.json: the scanner finds legacy and live-signature drift in
user code, passes modern code, survives files it cannot parse, and the table's rows hold."""

from __future__ import annotations

import importlib.util
import inspect
import json
import re

import pytest
from conftest import FIXTURES, load_module, rows, run_main, run_python, script_path

scan_api_drift = load_module("development-and-testing/scan_api_drift")
_api_table = load_module("development-and-testing/_api_table")  # the table's testing seam (see its docstring)

DEVTEST = FIXTURES / "devtest"
VERSION_RE = re.compile(r"^0\.\d+\.\d+$")


@pytest.fixture(scope="module")
def table():
    return _api_table.load_table()


def scan(text: str, table, name: str = "x.py"):
    return scan_api_drift.scan_source(name, text, table)[0]


def scan_file(path, table):
    return scan_api_drift.scan_source(str(path), path.read_text(), table)[0]


def import_fixture(path):
    spec = importlib.util.spec_from_file_location(f"fixture_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def legacy(table):
    return scan_file(DEVTEST / "legacy_torchrl.py", table)


# ---------------------------------------------------------------- the table's rows


@pytest.mark.parametrize("old,new", [
    ("torchrl.collectors.SyncDataCollector", "torchrl.collectors.Collector"),
    ("torchrl.collectors.MultiaSyncDataCollector", "torchrl.collectors.MultiAsyncCollector"),
    ("torchrl.data.CompositeSpec", "torchrl.data.Composite"),
    ("torchrl.data.BoundedTensorSpec", "torchrl.data.Bounded"),
    ("torchrl.data.UnboundedContinuousTensorSpec", "torchrl.data.Unbounded"),
    ("torchrl.data.OneHotDiscreteTensorSpec", "torchrl.data.OneHot"),  # via `import torchrl.data as D`
])
def test_legacy_names_reported_with_replacement(legacy, old, new):
    hits = [f for f in legacy if f.kind == "name" and f.old == old]
    assert hits, [f.text() for f in legacy]
    assert hits[0].new == new and hits[0].severity == "error"
    assert "removed" in hits[0].versions and ":%d " % hits[0].line in hits[0].text()


def test_legacy_key_and_kwargs_reported(legacy):
    key = [f for f in legacy if f.kind == "key"]
    assert key and key[0].old == "'sample_log_prob'" and key[0].new == "'action_log_prob'"
    kw = {f.old: f for f in legacy if f.kind == "kwarg"}
    assert kw["ClipPPOLoss(entropy_coef=)"].new == "entropy_coeff=" and kw["ClipPPOLoss(entropy_coef=)"].severity == "error"
    # update_policy_weights_ is found through `collector = SyncDataCollector(...)` -> Collector
    assert kw["update_policy_weights_(policy_weights=)"].severity == "deprecated"


def test_modern_example_is_clean(table):
    path = scan_api_drift.DEFAULT_EXAMPLE  # the bundled 0.14.1 example doubles as the modern fixture
    findings, stats = scan_api_drift.scan_source(str(path), path.read_text(), table)
    assert findings == [], [f.text() for f in findings]
    assert stats["refs"] >= 10 and stats["calls"] >= 10  # it really looked at torchrl names and calls


def test_exit_codes_and_output(capsys):
    assert scan_api_drift.main([str(DEVTEST / "legacy_torchrl.py")]) == 1
    out = capsys.readouterr().out
    assert "legacy_torchrl.py:5 [name] torchrl.data.CompositeSpec -> torchrl.data.Composite" in out
    code, report = run_main("development-and-testing/scan_api_drift", str(scan_api_drift.DEFAULT_EXAMPLE))
    assert code == 0 and report["ok"] and report["summary"]["fail"] == 0


def test_explicit_log_prob_key_is_a_note_not_a_failure(table, capsys):
    """log_prob_key="sample_log_prob" on an actor (and set_keys(sample_log_prob=...)) is valid on 0.14.1."""
    path = DEVTEST / "explicit_log_prob_key.py"
    findings = scan_file(path, table)
    assert {(f.kind, f.severity) for f in findings} == {("key-note", "note")}, [f.text() for f in findings]
    assert {f.old for f in findings} == {"log_prob_key='sample_log_prob'", "sample_log_prob='sample_log_prob'"}
    assert scan_api_drift.main([str(path), "--strict"]) == 0
    assert "[key-note] log_prob_key='sample_log_prob'" in capsys.readouterr().out
    # the fact behind the note: a loss built from that actor adopts its key and runs
    loss, out = import_fixture(path).build()
    assert loss.tensor_keys.sample_log_prob == "sample_log_prob"
    assert all(out[k].isfinite().all() for k in ("loss_objective", "loss_critic", "loss_entropy"))


def test_legacy_key_reads_stay_findings_next_to_an_explicit_actor_key(table):
    src = (
        "from torchrl.modules import ProbabilisticActor\n"
        "a = ProbabilisticActor(None, in_keys=['loc'], log_prob_key='sample_log_prob')\n"
        "def f(td, obj):\n"
        "    obj.update(sample_log_prob='sample_log_prob')\n"  # not set_keys: an ordinary write
        "    return td['sample_log_prob']\n"
    )
    found = scan(src, table)
    keys = [f for f in found if f.kind == "key"]
    assert [f.line for f in keys] == [4, 5] and all(f.severity == "error" for f in keys)
    assert "log_prob_key= on line 2" in keys[0].note
    assert [f.line for f in found if f.kind == "key-note"] == [2]


def test_strict_fails_on_deprecated_only_code(tmp_path, capsys):
    f = tmp_path / "dep.py"
    f.write_text("from torchrl.collectors import VanillaWeightUpdater\n")
    assert scan_api_drift.main([str(f)]) == 0
    assert scan_api_drift.main([str(f), "--strict"]) == 1
    assert "torchrl.weight_update.SharedMemWeightSyncScheme" in capsys.readouterr().out


def test_signature_rejection_moved_module_and_opt_in_key(table):
    src = (
        "from torchrl.objectives import DQNLoss\n"
        "from torchrl.data.rlhf import PromptData\n"
        "from torchrl.collectors.collectors import SyncDataCollector\n"
        "from tensordict.nn import set_composite_lp_aggregate\n"
        "set_composite_lp_aggregate(True).set()\n"
        "loss = DQNLoss(None, delay_valu=True)\n"
        "k = 'sample_log_prob'\n"
    )
    found = {(f.kind, f.old): f for f in scan(src, table)}
    assert found[("kwarg", "DQNLoss(delay_valu=)")].new == "delay_value="
    assert found[("name", "torchrl.data.rlhf.PromptData")].new == "torchrl.data.llm.PromptData"
    assert found[("name", "torchrl.collectors.collectors.SyncDataCollector")].new == "torchrl.collectors.Collector"
    assert not any(k == "key" for k, _ in found)  # the file opted back into the legacy key


def test_a_name_that_moved_is_found_where_it_lives_now(table):
    """No table row: GAE is not in torchrl.envs, but the scanner finds where it lives."""
    assert not any(r["old"].endswith(".GAE") for r in table["names"])
    found = scan("from torchrl.envs import GAE\n", table)
    assert [(f.kind, f.old, f.new) for f in found] == [("name", "torchrl.envs.GAE", "torchrl.objectives.value.GAE")]


def test_unverified_names_from_a_module_that_cannot_import(table):
    """torchrl.trainers.algorithms.configs needs hydra-core and omegaconf (troubleshooting entry)."""
    found = scan("from torchrl.trainers.algorithms.configs import TrainerConfig\n", table)
    if importlib.util.find_spec("hydra") is None:
        assert [(f.kind, f.severity) for f in found] == [("unverified", "note")]
        assert "hydra-core and omegaconf" in found[0].note
        import torchrl.trainers.algorithms  # noqa: F401  (the package itself imports without hydra)
    else:
        assert not [f for f in found if f.kind == "unverified"]


def test_notebook_cells_are_scanned(tmp_path, table):
    nb = {"cells": [{"cell_type": "code", "source": ["%pip install torchrl\n", "from torchrl.data import CompositeSpec\n"]},
                    {"cell_type": "markdown", "source": "from torchrl.data import BoundedTensorSpec"}]}
    (tmp_path / "n.ipynb").write_text(json.dumps(nb))
    findings, scanned = scan_api_drift.scan_paths([tmp_path], table)
    assert len(scanned) == 1 and [f.old for f in findings] == ["torchrl.data.CompositeSpec"]


# ---------------------------------------------------------------- the live library


def test_untabled_kwargs_rejected_with_accepted_names_and_closest_match(table):
    """TanhNormal(loc, scale, min=-2, max=2): no table row, caught by the installed signature."""
    assert not [r for r in table["kwargs"] if "TanhNormal" in r["callable"]]  # nothing tabled for it
    path = DEVTEST / "untabled_kwarg.py"
    found = {f.old: f for f in scan_file(path, table) if f.kind == "kwarg"}
    assert set(found) == {"TanhNormal(min=)", "TanhNormal(max=)", "StepCounter(max_step=)",
                          "ProbabilisticActor(return_log_probs=)", "ClipPPOLoss(entropy_cof=)"}, list(found)
    tanh = found["TanhNormal(min=)"]
    assert tanh.severity == "error" and f"{path}:{tanh.line} [kwarg]" in tanh.text()
    assert "accepted: loc, scale, upscale, low, high, event_dims, tanh_loc, safe_tanh" in tanh.note
    assert tanh.new == "low=" and found["TanhNormal(max=)"].new == "high="  # named from the docstring
    assert found["StepCounter(max_step=)"].new == "max_steps="  # difflib
    # followed through ProbabilisticActor(**kwargs) into the module it forwards to
    assert found["ProbabilisticActor(return_log_probs=)"].new == "return_log_prob="
    assert "**kwargs followed into ProbabilisticActor.__init__" in found["ProbabilisticActor(return_log_probs=)"].note
    # PPOLoss.__init__ keeps unknown keywords without an error: reported as silently ignored
    ignored = found["ClipPPOLoss(entropy_cof=)"]
    assert "silently ignored" in ignored.versions and ignored.new == "entropy_coeff="


def test_untabled_kwarg_fixture_fails_for_real_and_its_fix_passes(table, tmp_path):
    """The findings are the library's behaviour: each call raises (or drops the keyword)."""
    import torch
    from torchrl.modules import ValueOperator

    fixture = import_fixture(DEVTEST / "untabled_kwarg.py")
    for build, text in [(fixture.make_dist, "'min'"), (fixture.make_env, "'max_step'"),
                        (fixture.make_actor, "'return_log_probs'")]:
        with pytest.raises(TypeError, match=f"unexpected keyword argument {text}"):
            build()
    fixed_src = ((DEVTEST / "untabled_kwarg.py").read_text()
                 .replace("min=-2.0, max=2.0", "low=-2.0, high=2.0").replace("max_step=5", "max_steps=5")
                 .replace("return_log_probs=True", "return_log_prob=True").replace("entropy_cof=", "entropy_coeff="))
    fixed = tmp_path / "untabled_kwarg_fixed.py"
    fixed.write_text(fixed_src)
    assert scan_file(fixed, table) == []
    module = import_fixture(fixed)
    assert float(module.make_dist().sample().abs().max()) <= 2.0
    assert module.make_env().transform.max_steps == 5
    loss = module.make_loss(module.make_actor(), ValueOperator(torch.nn.Linear(3, 1), in_keys=["observation"]))
    assert float(loss.entropy_coeff) == pytest.approx(0.01)


def test_bad_override_flagged_with_the_call_torchrl_makes(table):
    path = DEVTEST / "bad_override.py"
    found = scan_file(path, table)
    assert [(f.kind, f.old) for f in found] == [("override", "CounterEnv.close(self)")], [f.text() for f in found]
    f = found[0]
    assert f.line == 29 and f.severity == "error"
    assert "cannot take raise_if_closed=" in f.note and "torchrl calls close(raise_if_closed=...) at torchrl/" in f.note
    assert "base EnvBase.close(self, *, raise_if_closed=True)" in f.note


def test_bad_override_fixture_fails_for_real_and_its_fix_passes(table, tmp_path):
    from torchrl.envs import StepCounter, TransformedEnv

    env = TransformedEnv(import_fixture(DEVTEST / "bad_override.py").CounterEnv(), StepCounter(3))
    with pytest.raises(TypeError, match="unexpected keyword argument 'raise_if_closed'"):
        env.close()
    fixed = tmp_path / "bad_override_fixed.py"
    fixed.write_text((DEVTEST / "bad_override.py").read_text().replace(
        "def close(self):", "def close(self, *, raise_if_closed=True):"))
    assert scan_file(fixed, table) == []
    env = TransformedEnv(import_fixture(fixed).CounterEnv(), StepCounter(3))
    env.close()
    assert env.is_closed


def test_usual_overrides_and_forwarded_kwargs_are_not_flagged(table):
    src = (
        "import torchrl.envs as E\n"
        "from torchrl.envs import EnvBase, GymEnv, Transform, TransformedEnv\n"
        "class Env(EnvBase):\n"
        "    def __init__(self, n):\n"  # constructors are the user's to define
        "        super().__init__(batch_size=(), device='cpu')\n"
        "    def _reset(self, td):\n"  # base: _reset(self, tensordict, **kwargs)
        "        pass\n"
        "    def _step(self, td):\n"
        "        pass\n"
        "    def _set_seed(self, seed):\n"
        "        pass\n"
        "    def close(self, *, raise_if_closed=True):\n"
        "        pass\n"
        "class T(Transform):\n"
        "    def _call(self, next_tensordict):\n"
        "        return next_tensordict\n"
        "    def _reset(self, tensordict, tensordict_reset):\n"
        "        return self._call(tensordict_reset)\n"
        "    def transform_observation_spec(self, observation_spec):\n"
        "        return observation_spec\n"
        "env = TransformedEnv(GymEnv('Pendulum-v1', render_mode='rgb_array'), E.StepCounter(max_steps=3))\n"
        "env.rollout(3, break_when_any_done=False)\n"
    )
    assert scan(src, table) == [], [f.text() for f in scan(src, table)]


def test_super_init_keywords_and_rejected_ones_carry_torchrl_message(table):
    src = (
        "from torchrl.envs import EnvBase, TransformedEnv, PendulumEnv\n"
        "class Env(EnvBase):\n"
        "    def __init__(self):\n"
        "        super().__init__(batch_sizes=())\n"
        "env = TransformedEnv(env=PendulumEnv())\n"
    )
    found = {f.old: f for f in scan(src, table)}
    assert found["super().__init__(batch_sizes=)"].new == "batch_size="
    # TransformedEnv's metaclass and __init__ are followed: torchrl raises on env= on purpose
    assert "The 'env' argument has been removed. Use 'base_env' instead." in found["TransformedEnv(env=)"].note


def test_missing_class_attribute_names_the_closest(table):
    found = scan("import torchrl.envs as E\nE.EnvBase.rolout\nE.EnvBase.rollout\n", table)
    assert [(f.kind, f.line) for f in found] == [("attribute", 2)]
    assert found[0].new == "torchrl.envs.EnvBase.rollout" and "AttributeError" in found[0].note


def test_unparsable_file_is_named_and_the_scan_goes_on(tmp_path, table):
    (tmp_path / "deep.py").write_text("x = 1" + "+1" * 100_000 + "\n")  # RecursionError in ast.parse
    (tmp_path / "old.py").write_text("from torchrl.data import CompositeSpec\n")
    findings, scanned = scan_api_drift.scan_paths([tmp_path], table)
    assert len(scanned) == 2
    by_kind = {f.kind: f for f in findings}
    assert "deep.py" in by_kind["unparsable"].text() and "RecursionError" in by_kind["unparsable"].note
    assert by_kind["name"].old == "torchrl.data.CompositeSpec"  # the real finding is still there
    code, report = run_main("development-and-testing/scan_api_drift", str(tmp_path))
    assert code == 1 and {c["name"] for c in report["checks"] if c["status"] == "fail"} == {"drift:unparsable", "drift:name"}


def test_missing_path_exits_2_with_one_line(tmp_path):
    proc = run_python([str(script_path("development-and-testing/scan_api_drift")), str(tmp_path / "nope.py")], timeout=120, warm=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "does not exist" in proc.stderr and "Traceback" not in proc.stderr


# ---------------------------------------------------------------- the table itself


def test_every_row_has_versions(table):
    for section in ("names", "keys", "kwargs"):
        for row in table[section]:
            assert row.get("changed_in") and VERSION_RE.match(row["changed_in"]), row
            for k in ("deprecated_in", "removed_in"):
                assert row.get(k) is None or VERSION_RE.match(row[k]), row
    for row in table["deprecated"]:
        assert VERSION_RE.match(row["deprecated_in"]), row


def test_name_rows_hold(table):
    for row in table["names"]:
        assert not _api_table.exists(row["old"]), f"{row['old']} still exists"
        assert _api_table.exists(row["new"]), f"{row['new']} does not resolve"


def test_deprecated_rows_hold(table):
    for row in table["deprecated"]:
        assert _api_table.exists(row["old"]) and _api_table.exists(row["new"]), row


def test_kwarg_rows_hold(table):
    for row in table["kwargs"]:
        assert _api_table.exists(row["callable"]), row
        obj = _api_table.resolve(row.get("checked_on", row["callable"]))  # a concrete class for a base-class row
        params = dict(inspect.signature(obj).parameters)
        if inspect.isclass(obj):
            params.update(inspect.signature(obj.__init__).parameters)
        if row["new"]:
            assert row["new"] in params, row
        if row.get("status") not in ("deprecated", "raises"):
            assert row["old"] not in params, row


def test_removed_kwargs_raise_the_documented_error():
    from torchrl.data import Bounded

    with pytest.raises(TypeError, match="'maximum' has been removed. Please use 'high' instead."):
        Bounded(minimum=0.0, maximum=1.0, shape=(1,))


def test_reference_table_matches_json(table):
    md = (script_path("development-and-testing/scan_api_drift").parents[1] / "references" / "api-changes.md").read_text()
    start, end = md.index(_api_table.BEGIN_MARK), md.index(_api_table.END_MARK) + len(_api_table.END_MARK)
    assert md[start:end] == _api_table.render_markdown(table), "regenerate the block with _api_table.render_markdown()"


@pytest.mark.slow
def test_live_rules_report_nothing_on_the_bundles_own_code(table):
    """No false positive of the live rules (keywords, overrides, class attributes) on the
    bundle's scripts and tests, which run on the verified stack (broken fixtures aside)."""
    from conftest import BUNDLE

    findings, scanned = scan_api_drift.scan_paths([BUNDLE / "scripts", BUNDLE / "src", BUNDLE / "sub-skills", BUNDLE / "tests"], table)
    live = [f for f in findings if "/tests/fixtures/" not in f.path and (
        f.kind in ("override", "attribute", "unparsable")
        or f.versions.startswith(("rejected by installed", "accepted and silently ignored")))]
    assert live == [], [f.text() for f in live]
    assert len(scanned) > 50


# ---------------------------------------------------------------- --to: the upgrade plan
_migration = load_module("development-and-testing/_migration")


def _plan(fixture: str, installed: str, target: str):
    uses, bad = _migration.uses_in([DEVTEST / fixture])
    assert bad == []
    return _migration.plan(uses, installed, target), _migration.fixes_for_uses(uses, installed, target)


def test_upgrade_plan_names_each_old_collector_use_with_its_replacement():
    steps, fixes = _plan("project_for_0_12.py", "0.12.0", "0.14")
    texts = [s.text() for s in steps]
    assert all(s.breaks for s in steps)
    for line, old, new in [(3, "SyncDataCollector", "Collector"), (3, "MultiaSyncDataCollector", "MultiAsyncCollector"),
                           (9, "SyncDataCollector", "Collector"), (10, "MultiaSyncDataCollector", "MultiAsyncCollector")]:
        assert any(t.startswith(f"{DEVTEST / 'project_for_0_12.py'}:{line} torchrl.collectors.{old} -> torchrl.collectors.{new} "
                                "(removed in 0.13.0)") for t in texts), texts
    assert len(steps) == 4  # ReplayBuffer, LazyTensorStorage, ClipPPOLoss(entropy_coeff=) stay as they are
    assert "ReplayBuffer" in fixes and all(f["first"] for f in fixes["ReplayBuffer"])


def test_upgrade_plan_scope_the_fixed_twin_and_a_target_that_still_has_the_names():
    assert _plan("project_for_0_14.py", "0.12.0", "0.14")[0] == []  # the twin written for 0.14
    assert _plan("project_for_0_12.py", "0.11.1", "0.12")[0] == []  # 0.12 still has the aliases


def test_to_on_the_installed_line_plans_nothing_and_passes():
    code, report = run_main("development-and-testing/scan_api_drift", str(DEVTEST / "project_for_0_14.py"), "--to", "0.14")
    status, detail = rows(report)["migrate:plan"]
    assert code == 0 and status == "pass" and "0 change(s) your code needs there" in detail
    assert "pip install torch==2.14.1 tensordict==0.14.3 torchrl==0.14.1" in detail or "pip install 'torchrl>=0.14,<0.15'" in detail


@pytest.mark.parametrize("to, says", [("0.13", "older than the installed torchrl"), ("0.16", "not a supported torchrl release line"),
                                      ("latest", "not a supported torchrl release line")])
def test_a_bad_target_line_exits_2_with_one_line(to, says):
    proc = run_python([str(script_path("development-and-testing/scan_api_drift")), "--to", to], timeout=300, warm=True)
    assert proc.returncode == 2 and says in proc.stderr and proc.stderr.strip().count("\n") == 0, proc.stderr
