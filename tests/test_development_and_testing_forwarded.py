"""scan_api_drift.py on keywords handed over in a dict (``distribution_kwargs`` -> ``distribution_class``)
and on ``spec.space.minimum``: the findings are the library's behaviour, the pairs come from the
installed source, and the fixed code scans clean and runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from conftest import FIXTURES, load_module

scan_api_drift = load_module("development-and-testing/scan_api_drift")
_api_table = load_module("development-and-testing/_api_table")
forwarded = load_module("development-and-testing/_forwarded_kwargs")

FIXTURE = FIXTURES / "devtest" / "forwarded_kwargs.py"
FIXES = [(".space.minimum", ".space.low"), (".space.maximum", ".space.high"), ('"min":', '"low":'),
         ('"max":', '"high":'), ("inplase=", "inplace="), ('"bais":', '"bias":')]


@pytest.fixture(scope="module")
def table():
    return _api_table.load_table()


def scan(text: str, table, name: str = "x.py"):
    return scan_api_drift.scan_source(name, text, table)[0]


def import_path(path: Path):
    spec = importlib.util.spec_from_file_location(f"fixture_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fixed_copy(tmp_path, fixes, name="forwarded_fixed.py") -> Path:
    text = FIXTURE.read_text()
    for old, new in fixes:
        text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text)
    return path


def test_dict_keys_checked_against_the_class_they_are_forwarded_to(table):
    found = scan(FIXTURE.read_text(), table, str(FIXTURE))
    got = {(f.kind, f.old, f.line): f for f in found}
    assert set(got) == {
        ("attribute", "action_spec.space.minimum", 21), ("attribute", "action_spec.space.maximum", 21),
        ("kwarg", "TanhDelta(min=)", 21), ("kwarg", "TanhDelta(max=)", 21),
        ("kwarg", "TanhNormal(min=)", 28), ("kwarg", "TanhNormal(max=)", 28),  # the `bounds = {...}` line
        ("kwarg", "ReLU(inplase=)", 35),
        ("kwarg", "Linear(bais=)", 39),  # no layer_class= given: MLP's own default, nn.Linear
    }, [f.text() for f in found]
    delta = got[("kwarg", "TanhDelta(min=)", 21)]
    assert delta.severity == "error" and delta.new == "low=" and got[("kwarg", "TanhDelta(max=)", 21)].new == "high="
    assert "accepted: param, low, high, event_dims, atol, rtol, safe" in delta.note
    assert "ProbabilisticActor(distribution_kwargs=) on line 19 hands its keys to TanhDelta(**distribution_kwargs)" \
           " at tensordict/nn/probabilistic.py:" in delta.note
    assert got[("kwarg", "TanhNormal(min=)", 28)].new == "low="
    relu = got[("kwarg", "ReLU(inplase=)", 35)]
    assert relu.new == "inplace=" and "rejected by installed signature of torch.nn.ReLU" in relu.versions
    box = got[("attribute", "action_spec.space.minimum", 21)]
    assert box.new == "action_spec.space.low" and box.versions == "deprecated 0.2.0, removed 0.4.0"
    assert f"{FIXTURE}:21 [attribute] action_spec.space.minimum -> action_spec.space.low" in box.text()


def test_fixture_fails_for_real_and_its_fix_runs(table, tmp_path):
    import torch
    from tensordict import TensorDict

    td = TensorDict(observation=torch.randn(4, 3), batch_size=[4])
    broken = import_path(FIXTURE)
    with pytest.raises(AttributeError, match="'ContinuousBox' object has no attribute 'minimum'"):
        broken.make_ddpg_actor()
    with pytest.raises(TypeError, match="unexpected keyword argument 'inplase'"):
        broken.make_mlp()
    with pytest.raises(TypeError, match="unexpected keyword argument 'bais'"):
        broken.make_mlp_default_layer()
    # built without complaint: the dict keys raise only when the distribution is built
    sac = broken.make_sac_actor()
    with pytest.raises(TypeError, match="unexpected keyword argument 'min'"):
        sac(td.clone())
    ddpg = import_path(fixed_copy(tmp_path, FIXES[:2], "attrs_only.py")).make_ddpg_actor()
    with pytest.raises(TypeError, match="unexpected keyword argument 'min'"):
        ddpg(td.clone())

    fixed = fixed_copy(tmp_path, FIXES)
    assert scan(fixed.read_text(), table, str(fixed)) == []
    module = import_path(fixed)
    for actor in (module.make_ddpg_actor(), module.make_sac_actor()):
        action = actor(td.clone())["action"]
        assert action.shape == (4, 1) and float(action.detach().abs().max()) <= 2.0
    assert module.make_mlp()(torch.randn(2, 3)).shape == (2, 1)
    assert module.make_mlp_default_layer()[0].bias is None


def test_pairs_are_read_from_the_installed_source():
    from tensordict.nn import ProbabilisticTensorDictModule
    from torch import nn
    from torchrl.modules import MLP, ProbabilisticActor

    for cls in (ProbabilisticActor, ProbabilisticTensorDictModule):
        (pair,) = forwarded.forwarding_pairs(cls)
        assert (pair.kwargs, pair.cls) == ("distribution_kwargs", "distribution_class")
        where, line = pair.site.rsplit(":", 1)
        assert where == "tensordict/nn/probabilistic.py"
        src = Path(ProbabilisticTensorDictModule.__init__.__code__.co_filename).read_text().splitlines()
        assert "self.distribution_class(" in src[int(line) - 1]  # the call that builds the distribution
    pairs = {p.cls: p for p in forwarded.forwarding_pairs(MLP)}
    assert {"activation_class", "norm_class", "layer_class"} <= set(pairs)
    assert pairs["layer_class"].default is nn.Linear  # MLP's own default, used when no class is passed


def test_a_kwargs_class_pair_that_is_never_forwarded_is_not_a_pair(tmp_path):
    src = tmp_path / "stores_only.py"
    src.write_text("class A:\n    def __init__(self, x_class, x_kwargs):\n        self.x_class, self.x_kwargs = x_class, x_kwargs\n")
    assert forwarded._forwarding_site(((str(src), frozenset({"A"})),), "x_kwargs", "x_class") is None
    src.write_text(src.read_text() + "    def build(self):\n        return self.x_class(1, **self.x_kwargs)\n")
    forwarded._parsed.cache_clear()
    assert forwarded._forwarding_site(((str(src), frozenset({"A"})),), "x_kwargs", "x_class").endswith(":5")


HEAD = "from torch import nn\nfrom torchrl.modules import MLP, ProbabilisticActor, TanhNormal\n"


@pytest.mark.parametrize("body,expected", [
    # a module-level dict used inside a function
    ('KW = {"min": -1.0}\ndef f(m):\n    return ProbabilisticActor(m, in_keys=["loc", "scale"], '
     'distribution_class=TanhNormal, distribution_kwargs=KW)\n', ["TanhNormal(min=)"]),
    # no class passed: MLP's default layer_class (nn.Linear) takes bias=, not bais=
    ('MLP(in_features=3, out_features=1, layer_kwargs={"bais": False})\n', ["Linear(bais=)"]),
    # valid keys, spread dicts and unknown values: nothing to say
    ('B = {"low": -1.0}\nProbabilisticActor(m, in_keys=["loc", "scale"], distribution_class=TanhNormal, '
     'distribution_kwargs={**B, "high": 1.0})\n', []),
    # the name is bound twice, or shadowed by a parameter, or the class is a variable: not judged
    ('kw = {"min": -1.0}\nkw = {"low": -1.0}\nProbabilisticActor(m, in_keys=["loc"], distribution_class=TanhNormal, '
     'distribution_kwargs=kw)\n', []),
    ('kw = {"min": -1.0}\ndef f(m, kw):\n    return ProbabilisticActor(m, in_keys=["loc"], '
     'distribution_class=TanhNormal, distribution_kwargs=kw)\n', []),
    ('ProbabilisticActor(m, in_keys=["loc"], distribution_class="normal", distribution_kwargs={"min": 1})\n', []),
    # nn.Tanh's signature is (*args, **kwargs): nothing to judge the keys against (it raises at run time)
    ('MLP(in_features=3, out_features=1, num_cells=[4], activation_class=nn.Tanh, activation_kwargs={"inplace": 1})\n', []),
    ('cls = TanhNormal\nProbabilisticActor(m, in_keys=["loc"], distribution_class=cls, distribution_kwargs={"min": 1})\n', []),
    # .minimum only at the end of a .space chain
    ("def f(spec, x):\n    return spec.minimum, x.space.low, spec.space_minimum\n", []),
    ("def f(env):\n    return env.action_spec.space.maximum\n", ["env.action_spec.space.maximum"]),
])
def test_scope_and_chain_rules(table, body, expected):
    assert [f.old for f in scan(HEAD + body, table)] == expected


def test_space_rule_needs_a_torchrl_import_and_its_rows_hold(table):
    assert scan("def f(box):\n    return box.space.minimum\n", table) == []  # not torchrl code
    rows = [r for r in table["names"] if r["old"].startswith(forwarded.BOX + ".")]
    assert {r["old"].rsplit(".", 1)[-1]: r["new"].rsplit(".", 1)[-1] for r in rows} == {"minimum": "low", "maximum": "high"}

