"""Smoke-test TorchRL policy wrappers on CPU: the keys they read and write, their shapes, and when they sample.

Builds, on a random TensorDict batch (no env, no download): a deterministic Actor with
spec projection (safe=True), a ProbabilisticActor with NormalParamExtractor and
TanhNormal (log-prob key present, samples differ under ExplorationType.RANDOM and agree
under DETERMINISTIC, deterministic by default outside a collector), the TanhNormal
log-prob event dim, a ValueOperator (state value and state-action value), a QValueActor
(categorical, with an action mask), a multi-one-hot QValueModule with var_nums, and a
MaskedCategorical ProbabilisticActor that never samples a masked action, and a NoisyLinear
whose noise follows the exploration type (not train()/eval()). Each check's detail names
the keys and shapes it verified.
"""

from __future__ import annotations


from torchrl_skill.report import skill_report as sr  # noqa: E402

EXAMPLE = "python $SKILL_DIR/sub-skills/modules-and-policies/scripts/smoke_actor.py --batch 16 --json"
OBS_DIM = 4


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("--batch", type=sr.int_at_least(2), default=8, help="batch size N of the test TensorDict (default: 8)")
    return parser


def make_obs(n: int):
    """TensorDict ``{"observation": [n, 4], "action_mask": [n, 3] (action 1 masked)}``, batch [n]."""
    import torch
    from tensordict import TensorDict

    g = torch.Generator().manual_seed(0)
    mask = torch.tensor([True, False, True]).expand(n, 3).clone()
    return TensorDict(observation=torch.randn(n, OBS_DIM, generator=g), action_mask=mask, batch_size=[n])


def make_tanh_normal_actor(return_log_prob: bool = True, low: float = -2.0, high: float = 2.0):
    """ProbabilisticActor: observation [*B, 4] -> loc, scale [*B, 1] -> action in [low, high] [*B, 1].

    With ``return_log_prob=True`` it also writes ``action_log_prob`` [*B] (tensordict 0.14.3
    names it after the action key).
    """
    import torch
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torchrl.data import Bounded
    from torchrl.modules import MLP, ProbabilisticActor, TanhNormal

    torch.manual_seed(0)
    net = torch.nn.Sequential(MLP(in_features=OBS_DIM, out_features=2, num_cells=[16]), NormalParamExtractor())
    params = TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"])
    return ProbabilisticActor(
        params,
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": low, "high": high},
        return_log_prob=return_log_prob,
        spec=Bounded(low, high, (1,)),
    )


def check_deterministic_actor(args) -> str:
    import torch
    from torchrl.data import Bounded
    from torchrl.modules import MLP, Actor

    n = args.batch
    torch.manual_seed(0)
    actor = Actor(MLP(in_features=OBS_DIM, out_features=2, num_cells=[16]), spec=Bounded(-1.0, 1.0, (2,)), safe=True)
    td = make_obs(n)
    td["observation"] = td["observation"] * 100  # push the raw output outside [-1, 1]
    out = actor(td.clone())
    again = actor(td.clone())
    sr.expect(actor.in_keys == ["observation"] and actor.out_keys == ["action"], f"Actor keys {actor.in_keys} -> {actor.out_keys}")
    sr.expect(out["action"].shape == torch.Size([n, 2]), f"action shape {list(out['action'].shape)}, expected [{n}, 2]")
    sr.expect(torch.equal(out["action"], again["action"]), "Actor output changed between two calls")
    sr.expect(bool(out["action"].abs().max() <= 1.0), "safe=True did not project the action into Bounded(-1, 1)")
    sr.evidence(n, "batch rows checked")
    return f'Actor(safe=True): "observation" [{n}, 4] -> "action" [{n}, 2], repeatable, projected into [-1, 1]'


def check_probabilistic_actor(args) -> str:
    import torch
    from torchrl_skill.checks.modules import policy_checks as _policy_checks
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    n = args.batch
    actor = make_tanh_normal_actor()
    td = make_obs(n)
    findings = _policy_checks.audit_probabilistic_actor(actor, td)
    sr.expect(not findings, "; ".join(findings))
    with set_exploration_type(ExplorationType.RANDOM):
        out = actor(td.clone())
    keys = sorted(k for k in out.keys() if k not in td.keys())
    sr.expect(keys == ["action", "action_log_prob", "loc", "scale"], f"actor wrote {keys}")
    sr.expect(out["action"].shape == torch.Size([n, 1]), f"action {list(out['action'].shape)}")
    sr.expect(out["action_log_prob"].shape == torch.Size([n]), f"action_log_prob {list(out['action_log_prob'].shape)}")
    sr.expect(bool(out["action"].abs().max() <= 2.0), "TanhNormal(low=-2, high=2) sampled outside [-2, 2]")
    sr.evidence(n, "batch rows checked")
    return (
        f'ProbabilisticActor(TanhNormal): wrote loc/scale/action [{n}, 1], action_log_prob [{n}]; '
        "RANDOM samples differ, DETERMINISTIC repeat"
    )


def check_default_is_deterministic(args) -> str:
    import torch
    from torchrl_skill.checks.modules import policy_checks as _policy_checks
    from torchrl.envs.utils import ExplorationType, exploration_type, set_exploration_type

    n = args.batch
    actor = make_tanh_normal_actor()
    td = make_obs(n)
    sr.expect(exploration_type() is None, f"exploration_type() is {exploration_type()} outside any context")
    a1, a2 = actor(td.clone())["action"], actor(td.clone())["action"]
    sr.expect(torch.equal(a1, a2), "outside set_exploration_type the actor sampled; expected its deterministic default")
    sr.expect(_policy_checks.explain_rollout_determinism(actor), "helper did not flag the deterministic default")
    with set_exploration_type(ExplorationType.RANDOM):
        sr.expect(not _policy_checks.explain_rollout_determinism(actor), "helper flagged a RANDOM context")
    prob = _policy_checks.find_probabilistic_module(actor)
    sr.evidence(n, "batch rows checked")
    return f"no context: exploration_type() None, default_interaction_type={prob.default_interaction_type.name}, two calls equal"


def check_tanh_normal_log_prob(args) -> str:
    import torch
    from torchrl_skill.checks.modules import policy_checks as _policy_checks
    from torchrl.modules import TanhNormal

    n = args.batch
    g = torch.Generator().manual_seed(0)
    loc, scale = torch.randn(n, 1, generator=g) * 0.5, torch.rand(n, 1, generator=g) + 0.5
    dist = TanhNormal(loc, scale)
    x = dist.sample()
    lp = dist.log_prob(x)
    elementwise = torch.distributions.Normal(loc, scale).log_prob(torch.atanh(x))
    sr.expect(lp.shape == torch.Size([n]), f"TanhNormal.log_prob shape {list(lp.shape)}, expected [{n}]")
    sr.expect(_policy_checks.find_log_prob_comparison_fault(lp, elementwise), "helper missed the [N] vs [N, 1] comparison")
    reference = (elementwise - torch.log1p(-x.pow(2))).sum(-1)
    sr.expect(not _policy_checks.find_log_prob_comparison_fault(lp, reference), "reference still has the wrong shape")
    err = (lp - reference).abs().max().item()
    sr.expect(err < 1e-4, f"TanhNormal.log_prob differs from the tanh-corrected Normal by {err:.2e}")
    sr.evidence(n, "batch rows checked")
    return f"TanhNormal event_shape {list(dist.event_shape)}: log_prob [{n}] vs Normal [{n}, 1]; summed+tanh-corrected match ({err:.1e})"


def check_value_operator(args) -> str:
    import torch
    from torchrl.modules import MLP, ValueOperator

    n = args.batch
    torch.manual_seed(0)
    td = make_obs(n)
    td["action"] = torch.zeros(n, 1)
    v = ValueOperator(MLP(in_features=OBS_DIM, out_features=1, num_cells=[16]), in_keys=["observation"])
    q = ValueOperator(MLP(in_features=OBS_DIM + 1, out_features=1, num_cells=[16]), in_keys=["observation", "action"])
    sr.expect(v.out_keys == ["state_value"] and q.out_keys == ["state_action_value"], f"default out_keys {v.out_keys}, {q.out_keys}")
    out_v, out_q = v(td.clone()), q(td.clone())
    sr.expect(out_v["state_value"].shape == torch.Size([n, 1]), f"state_value {list(out_v['state_value'].shape)}")
    sr.expect(out_q["state_action_value"].shape == torch.Size([n, 1]), f"state_action_value {list(out_q['state_action_value'].shape)}")
    sr.evidence(n, "batch rows checked")
    return f'ValueOperator: "observation" -> "state_value" [{n}, 1]; with "action" in in_keys -> "state_action_value" [{n}, 1]'


def check_qvalue_actor(args) -> str:
    import torch
    from torchrl.data import Categorical
    from torchrl.modules import MLP, QValueActor

    n = args.batch
    torch.manual_seed(0)
    td = make_obs(n)
    actor = QValueActor(MLP(in_features=OBS_DIM, out_features=3, num_cells=[16]), in_keys=["observation"], spec=Categorical(3))
    out = actor(td.clone())
    for key, shape in (("action_value", [n, 3]), ("action", [n]), ("chosen_action_value", [n, 1])):
        sr.expect(list(out[key].shape) == shape, f"{key} shape {list(out[key].shape)}, expected {shape}")
    sr.expect(torch.equal(out["action"], out["action_value"].argmax(-1)), "action is not argmax(action_value)")
    masked = QValueActor(actor.module[0], in_keys=["observation"], spec=Categorical(3), action_mask_key="action_mask")
    out_m = masked(td.clone())
    sr.expect(not bool((out_m["action"] == 1).any()), "QValueActor(action_mask_key=...) chose masked action 1")
    sr.evidence(n, "batch rows checked")
    return f'QValueActor(Categorical(3)): "action_value" [{n}, 3], "action" [{n}] = argmax, "chosen_action_value" [{n}, 1]; mask honoured'


def check_qvalue_mult_one_hot(args) -> str:
    import torch
    from torchrl_skill.checks.modules import policy_checks as _policy_checks
    from tensordict import TensorDict
    from torchrl.data import MultiOneHot
    from torchrl.modules import QValueModule

    n = args.batch
    spec = MultiOneHot([2, 3])
    module = QValueModule(spec=spec, var_nums=[2, 3])
    findings = _policy_checks.find_qvalue_action_space_faults(module)
    sr.expect(not findings, "; ".join(findings))
    g = torch.Generator().manual_seed(0)
    out = module(TensorDict(action_value=torch.randn(n, 5, generator=g), batch_size=[n]))
    action = out["action"]
    sr.expect(action.shape == torch.Size([n, 5]), f"action shape {list(action.shape)}")
    per_part = [int(part.sum(-1).max()) for part in action.split([2, 3], -1)]
    sr.expect(per_part == [1, 1] and int(action.sum(-1).min()) == 2, f"action is not one-hot per component: {action[0].tolist()}")
    sr.expect(spec.is_in(action.bool()), "action outside MultiOneHot([2, 3])")
    sr.evidence(n, "batch rows checked")
    return f'QValueModule(spec=MultiOneHot([2, 3]), var_nums=[2, 3]): "action" [{n}, 5], one 1 per component'


def check_masked_categorical(args) -> str:
    import torch
    from tensordict.nn import TensorDictModule
    from torchrl.data import Categorical
    from torchrl.envs.utils import ExplorationType, set_exploration_type
    from torchrl.modules import MLP, MaskedCategorical, ProbabilisticActor

    n = args.batch
    torch.manual_seed(0)
    logits = TensorDictModule(MLP(in_features=OBS_DIM, out_features=3, num_cells=[16]), in_keys=["observation"], out_keys=["logits"])
    actor = ProbabilisticActor(
        logits,
        in_keys={"logits": "logits", "mask": "action_mask"},
        distribution_class=MaskedCategorical,
        return_log_prob=True,
        spec=Categorical(3),
    )
    td = make_obs(n)
    with set_exploration_type(ExplorationType.RANDOM):
        draws = actor(td.expand(20, n).clone())["action"]  # 20 draws per row, one call
        out = actor(td.clone())
    sr.expect(out["action"].shape == torch.Size([n]), f"action {list(out['action'].shape)}")
    sr.expect(out["action_log_prob"].shape == torch.Size([n]), f"action_log_prob {list(out['action_log_prob'].shape)}")
    seen = sorted(draws.unique().tolist())
    sr.expect(1 not in seen, f"masked action 1 was sampled ({seen})")
    sr.expect(seen == [0, 2], f"expected both unmasked actions over {20 * n} draws, saw {seen}")
    lp_masked = MaskedCategorical(logits=out["logits"], mask=td["action_mask"]).log_prob(torch.ones(n, dtype=torch.long))
    sr.expect(bool(torch.isinf(lp_masked).all()), "log_prob of a masked action is not -inf")
    sr.evidence(n, "batch rows checked")
    return f'MaskedCategorical via in_keys {{"logits", "mask": "action_mask"}}: "action" [{n}] in {seen}, log_prob(masked) = -inf'


def check_noisy_linear(args) -> str:
    """NoisyLinear adds its noise only under ExplorationType.RANDOM (pytorch/rl#3082 fixing
    #875/#3069); train()/eval() does not switch it, and forward does not resample
    (reset_noise does). The switch is ``use_exploration_type``, read from the installed
    signature: absent in torchrl 0.11 (skipped), opt-in in 0.12 (default None; unset, it is
    turned on here and said; an explicit False is checked as it is), the default since 0.13."""
    import inspect

    import torch
    from torchrl.envs.utils import ExplorationType, set_exploration_type
    from torchrl.modules import NoisyLinear, reset_noise

    switch = inspect.signature(NoisyLinear).parameters.get("use_exploration_type")
    if switch is None:
        raise sr.CheckSkipped(f"NoisyLinear of torchrl {sr.installed_version('torchrl')} has no use_exploration_type "
                              "(the exploration-type switch came in 0.12): not checked on this release")
    opt_in = {"use_exploration_type": True} if switch.default is None else {}  # 0.12's unset default warns
    n = args.batch
    torch.manual_seed(0)
    layer = NoisyLinear(OBS_DIM, 2, **opt_in)
    x = make_obs(n)["observation"]
    mean = torch.nn.functional.linear(x, layer.weight_mu, layer.bias_mu)
    with set_exploration_type(ExplorationType.RANDOM):
        noisy, again = layer(x), layer(x)
        layer.eval()
        noisy_in_eval = layer(x)
        layer.train()
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        greedy = layer(x)
    sr.expect(not torch.allclose(noisy, mean), "NoisyLinear under RANDOM returned the mean weights' output")
    sr.expect(torch.equal(noisy, again), "NoisyLinear resampled its noise inside forward")
    sr.expect(torch.equal(noisy_in_eval, noisy), "eval() switched the noise off under RANDOM")
    sr.expect(torch.allclose(greedy, mean) and torch.allclose(layer(x), mean), "DETERMINISTIC / no context did not use the mean weights")
    layer.apply(reset_noise)
    with set_exploration_type(ExplorationType.RANDOM):
        sr.expect(not torch.equal(layer(x), noisy), "reset_noise did not resample")
    sr.evidence(n, "batch rows checked")
    return ("NoisyLinear: noisy only under RANDOM (also in eval()), mean weights under DETERMINISTIC or no context; "
            "reset_noise resamples" + (f" (opt-in on this release: use_exploration_type defaults to {switch.default!r})" if opt_in else ""))


CHECKS = [
    sr.Check("actor:deterministic", check_deterministic_actor,
             proves="Actor(safe=True) writes a repeatable action inside its Bounded spec for every row"),
    sr.Check("actor:probabilistic", check_probabilistic_actor,
             proves="ProbabilisticActor(TanhNormal) writes loc, scale, action and action_log_prob of the right shapes, in bounds"),
    sr.Check("actor:default-deterministic", check_default_is_deterministic,
             proves="outside set_exploration_type a ProbabilisticActor returns its deterministic action"),
    sr.Check("actor:tanh-normal-log-prob", check_tanh_normal_log_prob,
             proves="TanhNormal.log_prob is [N] and equals the summed tanh-corrected Normal log-prob"),
    sr.Check("value:operator", check_value_operator, proves="ValueOperator writes state_value / state_action_value [N, 1]"),
    sr.Check("qvalue:categorical", check_qvalue_actor, proves="QValueActor's action is the argmax of action_value and honours the mask"),
    sr.Check("qvalue:multi-one-hot", check_qvalue_mult_one_hot, proves="QValueModule over MultiOneHot picks one action per component"),
    sr.Check("actor:masked-categorical", check_masked_categorical,
             proves="MaskedCategorical never samples a masked action and gives it log_prob -inf"),
    sr.Check("noisy:exploration-type", check_noisy_linear,
             proves="NoisyLinear is noisy only under ExplorationType.RANDOM and resamples only on reset_noise"),
]


def run_checks(args, report: sr.Report) -> None:
    sr.run_declared(CHECKS, report, args=args)


def main(argv=None) -> int:
    return sr.standard_main(__file__, build_parser, run_checks, argv)
