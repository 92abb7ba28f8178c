"""Diagnose how an actor, a critic and a torchrl loss are wired, before training on it.

Given a Python file whose build_wiring() returns {"loss": LossModule, "batch": TensorDict,
"modules": {"qvalue_network": user_module, ...}, "value_estimator": GAE(...)} (modules
and value_estimator optional; a list of such dicts also works), it checks: the critic
writes the loss's value key (else torchrl raises "value key 'state_value' not found in
value network out_keys [...]"); the batch carries the log-prob key the loss reads (else
"Couldn't find the log-prob action_log_prob in the input data.") and that log-prob does
not require grad (else "tensordict stored action_log_prob requires grad."); a real
forward pass gives finite losses; a standalone value estimator's critic writes its value
key (else "TypeError: 'NoneType' object is not subscriptable" from GAE); and each user
module named in "modules" holds the weights the loss trains (SACLoss/IQL keep their own
stacked copies, so a user's critic silently never changes). "modules" keys are network
names N of the loss with a loss.N_params: actor_network, critic_network (PPO, A2C),
qvalue_network (SAC, TD3, REDQ, CQL, IQL), value_network (DQN, DDPG, IQL). Each failure
names the fix. Default: the built-in known-good PPO and SAC wirings (default_wiring());
a PPO-on-a-user-env example file is assets/ppo_user_env_wiring.py.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import skill_report as sr  # noqa: E402
from _loss_builders import fmt_key as _fmt  # noqa: E402

EXAMPLE = (
    "python sub-skills/objectives-and-training/scripts/check_loss_wiring.py --wiring my_wiring.py --json\n"
    "  (my_wiring.py defines build_wiring() -> {'loss': ..., 'batch': ..., 'modules': {...}})"
)


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument(
        "--wiring",
        metavar="FILE.py",
        help="file defining build_wiring() -> dict(loss=, batch=, modules=); default: the built-in known-good PPO and SAC wirings (default_wiring() in this script)",
    )
    return parser


def default_wiring() -> list:
    """Known-good wirings: ClipPPOLoss with a critic writing "state_value", and SACLoss whose
    user Q-module is synced back from the loss's copy after one training step."""
    import torch
    from tensordict import TensorDict
    import _loss_builders as B
    from torchrl.objectives import ClipPPOLoss, SACLoss

    torch.manual_seed(0)
    actor = B.continuous_actor()
    ppo = ClipPPOLoss(actor, B.state_value())
    ppo.make_value_estimator(gamma=0.99)
    batch = B.forward_batch("onpolicy", actor)

    qnet = B.qsa_value()
    sac = SACLoss(B.continuous_actor(), qnet, num_qvalue_nets=2, action_spec=B._bounded())
    sac_batch = B.make_batch("continuous")
    out = sac(sac_batch)
    opt = torch.optim.Adam(sac.parameters(), lr=1e-2)
    (out["loss_qvalue"] + out["loss_actor"]).backward()
    opt.step()
    TensorDict.from_module(qnet).data.update_(sac.qvalue_network_params[0].data)  # the sync
    return [
        {"name": "ppo", "loss": ppo, "batch": batch},
        {"name": "sac", "loss": sac, "batch": sac_batch, "modules": {"qvalue_network": qnet}},
    ]


def load_wiring(path: str) -> list:
    """Import ``path`` and call its ``build_wiring()``; a dict or a list of dicts."""
    file = Path(path)
    if not file.is_file():
        sr.cannot_run(f"--wiring {path} is not a file", "pass a .py file defining build_wiring()")
    spec = importlib.util.spec_from_file_location(f"_wiring_{file.stem}", file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if not hasattr(mod, "build_wiring"):
        sr.cannot_run(f"{path} defines no build_wiring()", "add def build_wiring(): return {'loss': ..., 'batch': ...}")
    out = mod.build_wiring()
    items = out if isinstance(out, list) else [out]
    for i, item in enumerate(items):
        item.setdefault("name", f"{file.stem}" if len(items) == 1 else f"{file.stem}[{i}]")
    return items


def check_value_key(loss) -> str:
    """The critic's out_keys must contain ``loss.tensor_keys.value`` (PPO/A2C/Reinforce family)."""
    critic = getattr(loss, "critic_network", None)
    if critic is None or not hasattr(loss.tensor_keys, "value"):
        raise sr.CheckSkipped(f"{type(loss).__name__} has no critic_network/value key to check")
    want = loss.tensor_keys.value
    outs = list(critic.out_keys)
    if want not in outs:
        real = [_fmt(k) for k in outs]
        raise sr.CheckFailed(
            f"value key '{_fmt(want)}' not found in value network out_keys {real} (torchrl raises this KeyError "
            f"at make_value_estimator or at the first forward); fix: loss.set_keys(value={real[-1]!r}) BEFORE "
            "loss.make_value_estimator(...), or build the critic with out_keys=['state_value']"
        )
    return f"critic out_keys {[_fmt(k) for k in outs]} contain value key '{_fmt(want)}'"


def check_log_prob_key(loss, batch) -> str:
    """The batch must hold the log-prob key the loss reads (``sample_log_prob`` field, default "action_log_prob")."""
    tk = loss.tensor_keys
    field = "sample_log_prob" if hasattr(tk, "sample_log_prob") else None
    if field is None or getattr(tk, field) not in getattr(loss, "in_keys", []):
        raise sr.CheckSkipped(f"{type(loss).__name__} does not read a stored log-prob")
    want = getattr(tk, field)
    keys = [_fmt(k) for k in batch.keys(True, True)]
    if _fmt(want) in keys:
        if batch.get(want).requires_grad:
            raise sr.CheckFailed(grad_message(_fmt(want), type(loss).__name__))
        return f"batch holds '{_fmt(want)}' (tensor_keys.{field}), no grad"
    others = [k for k in keys if k.endswith("log_prob")]
    hint = (
        f"the batch names it {others[0]!r}; fix: batch.rename_key_({others[0]!r}, {_fmt(want)!r}) or "
        f"loss.set_keys({field}={others[0]!r})"
        if others
        else "fix: collect with an actor built with return_log_prob=True (ProbabilisticActor), or set_keys to the key you store"
    )
    raise sr.CheckFailed(f"Couldn't find the log-prob {_fmt(want)} in the input data. ({type(loss).__name__}); {hint}")


def grad_message(key: str, loss_name: str) -> str:
    """The torchrl 0.14.1 error for a stored log-prob that requires grad, plus its fix.

    Source: torchrl/objectives/ppo.py raises ``RuntimeError: tensordict stored <key> requires grad.``
    for the stored log-prob (PPOLoss._log_weight) and then for the stored action (_get_cur_log_prob).
    """
    return (
        f"tensordict stored {key} requires grad. ({loss_name} raises this RuntimeError at forward): the batch was "
        "rolled out with gradient tracking on; fix: collect under torch.no_grad() (with torch.no_grad(): "
        "batch = env.rollout(...); a Collector already does this), or detach the stored batch: batch = batch.detach() "
        "(detaching only the log-prob is not enough: the loss then raises the same error for the stored action)"
    )


def check_forward(loss, batch) -> str:
    """A real forward pass: every "loss*" entry finite."""
    import torch

    try:
        out = loss(batch.clone())
    except RuntimeError as err:
        if "requires grad." in str(err):
            key = str(err).split("tensordict stored ", 1)[-1].split(" requires grad", 1)[0]
            raise sr.CheckFailed(grad_message(key, type(loss).__name__)) from err
        raise
    losses = {_fmt(k): out.get(k) for k in out.keys(True, True) if _fmt(k).startswith("loss")}
    sr.expect(bool(losses), f"forward returned no loss_* entries: {sorted(out.keys())}")
    bad = [k for k, v in losses.items() if not torch.isfinite(v).all()]
    sr.expect(not bad, f"non-finite losses {bad}")
    return f"forward: {', '.join(f'{k}={float(v.mean()):.3g}' for k, v in losses.items())}"


def network_names(loss) -> list[str]:
    """Names N accepted as "modules" keys: the loss has a ``loss.N_params`` TensorDict (not target copies)."""
    from tensordict import TensorDictBase
    from tensordict.nn import TensorDictParams

    names = []
    for attr in dir(loss):
        if attr.endswith("_params") and not attr.startswith(("_", "target_")):
            try:
                value = getattr(loss, attr)
            except Exception:  # noqa: BLE001 - a property that cannot build here
                continue
            if isinstance(value, (TensorDictBase, TensorDictParams)) and not value.is_empty():
                names.append(attr[: -len("_params")])
    return sorted(set(names))


def check_estimator(estimator, batch) -> str:
    """A standalone value estimator (GAE, TD0Estimator, TDLambdaEstimator, ...) must find its value key.

    torchrl 0.14.1 (torchrl/objectives/value/advantages.py, _call_value_nets): when the value
    network does not write ``estimator.tensor_keys.value`` (default "state_value"), GAE fails
    with ``TypeError: 'NoneType' object is not subscriptable``. Then runs it on a copy of the batch.
    """
    import torch

    net = getattr(estimator, "value_network", None)
    want = estimator.tensor_keys.value
    name = type(estimator).__name__
    if net is not None:
        outs = [_fmt(k) for k in net.out_keys]
        if _fmt(want) not in outs:
            raise sr.CheckFailed(
                f"{name} reads value key '{_fmt(want)}' but its value_network writes {outs}; torchrl fails with "
                f"TypeError: 'NoneType' object is not subscriptable (in _call_value_nets); fix: build the critic with "
                f"out_keys=['{_fmt(want)}'], or {name.lower()}.set_keys(value={outs[-1]!r})"
            )
    with torch.no_grad():
        out = estimator(batch.clone())
    adv = out.get(estimator.tensor_keys.advantage)
    sr.expect(torch.isfinite(adv).all(), f"{name} produced non-finite advantages")
    return f"{name} reads value key '{_fmt(want)}' from its value network; advantage {list(adv.shape)} finite"


def check_module_sync(loss, name: str, module) -> str:
    """``module`` (the user's network) must hold the weights of ``loss.<name>_params`` (copy 0 if stacked).

    SACLoss / REDQLoss / IQLLoss / DiscreteIQLLoss / TD3Loss / CQLLoss keep their Q-network
    parameters as an expanded copy ([num_qvalue_nets, ...]) that does not share memory with
    the module passed in; the optimizer trains the copy and the module never changes.
    """
    import torch
    from tensordict import TensorDict

    params = getattr(loss, f"{name}_params", None)
    if params is None:
        raise sr.CheckFailed(
            f'"modules" key {name!r}: {type(loss).__name__} has no {name}_params; use one of {network_names(loss)}'
        )
    stacked = params.batch_dims > 0
    ref = params[0] if stacked else params
    mine = TensorDict.from_module(module)
    shared = any(
        a.data_ptr() == b.data_ptr() for a, b in zip(ref.values(True, True), mine.values(True, True))
    )
    diff = max(float((a - b).abs().max()) for a, b in zip(ref.values(True, True), mine.values(True, True)))
    copy_expr = f"loss.{name}_params[0].data" if stacked else f"loss.{name}_params.data"
    fix = f"TensorDict.from_module(module).data.update_({copy_expr})"
    if diff > 0:
        raise sr.CheckFailed(
            f"user {name} module differs from the loss's trained copy (max |diff| {diff:.3g}; the loss holds "
            f"{'stacked ' if stacked else ''}copies {list(params.batch_size)} that do not share memory with your "
            f"module, so it never changes); fix: {fix}"
        )
    how = "shares memory with the loss" if shared else f"is in sync now, but the loss trains its own copy: re-sync with {fix}"
    return f"user {name} module {how}"


def run_checks(args, report: sr.Report) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        items = load_wiring(args.wiring) if args.wiring else default_wiring()
        for item in items:
            loss, batch, tag = item["loss"], item["batch"], item["name"]
            report.run(f"{tag}:value-key", lambda l=loss: check_value_key(l))
            report.run(f"{tag}:log-prob-key", lambda l=loss, b=batch: check_log_prob_key(l, b))
            report.run(f"{tag}:forward", lambda l=loss, b=batch: check_forward(l, b))
            if item.get("value_estimator") is not None:
                report.run(f"{tag}:value-estimator", lambda e=item["value_estimator"], b=batch: check_estimator(e, b))
            for name, module in (item.get("modules") or {}).items():
                report.run(f"{tag}:sync:{name}", lambda l=loss, n=name, m=module: check_module_sync(l, n, m))


def main(argv=None) -> int:
    return sr.standard_main(__file__, build_parser, run_checks, argv)


if __name__ == "__main__":
    sr.main_guard(main)
