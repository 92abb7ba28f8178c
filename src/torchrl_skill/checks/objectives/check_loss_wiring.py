"""Diagnose how an actor, a critic, a value estimator and a torchrl loss are wired, before training on it.

TARGET is your own function, called with no arguments: FILE.py:make_loss or
package.module:make_loss (--wiring FILE.py means FILE.py:build_wiring). It returns the
loss module, (loss, batch), or a dict {"loss", "batch", "modules", "value_estimator"}
(or a list of these; see _loss_wiring.py). Per loss it checks: the critic writes the
loss's value key; the batch holds the log-prob key the loss reads, without grad; where
the advantage comes from (a batch without "advantage" makes a PPO/A2C loss recompute it
with its own estimator, by default GAE(gamma=0.99, lmbda=0.95), not yours); that the
batch is whole trajectories along the estimator's time dim (GAE on a flattened
[env*time] or shuffled batch leaks advantages across envs); a real forward pass gives
finite losses; a standalone estimator finds its value key; and each module named in
"modules" holds the weights the loss trains (SACLoss/IQL keep their own copies). Each
failure names the fix. With no TARGET: the built-in known-good PPO and SAC wirings.
"""

from __future__ import annotations

import functools
import inspect

from torchrl_skill.runtime import user_code as _user_code  # noqa: E402
from torchrl_skill.report import skill_report as sr  # noqa: E402
from torchrl_skill.checks.objectives.estimator_views import EstimatorView, loss_estimator_view, trajectory_breaks, view_of  # noqa: E402
from torchrl_skill.checks.objectives.loss_builders import fmt_key  # noqa: E402

EXAMPLE = (
    "python $SKILL_DIR/sub-skills/objectives-and-training/scripts/check_loss_wiring.py train.py:make_loss --json\n"
    "  python $SKILL_DIR/sub-skills/objectives-and-training/scripts/check_loss_wiring.py --wiring my_wiring.py\n"
    "  (make_loss() returns the loss, (loss, batch) or {'loss': ..., 'batch': ..., 'value_estimator': ...})"
)


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("target", nargs="?", metavar="TARGET", help="FILE.py:function or package.module:function returning the loss (see above)")
    parser.add_argument("--wiring", metavar="FILE.py", help="same as TARGET FILE.py:build_wiring (kept for older commands)")
    sr.add_timeout_flag(parser)
    return parser


def resolve_target(args):
    """The parsed TARGET, or None for the built-in wirings; exit 2 on a bad or unreadable target."""
    if args.target and args.wiring:
        sr.cannot_run("give TARGET or --wiring, not both", "drop --wiring (TARGET FILE.py:build_wiring is the same)")
    spec = args.target or args.wiring
    if spec is None:
        return None
    if args.wiring and not args.wiring.rpartition(":")[2].isidentifier():
        spec = f"{args.wiring}:build_wiring"
    return _user_code.parse_target(spec, form="FILE.py:make_loss or package.module:make_loss")


def check_build(target) -> sr.Passed:
    """Import TARGET and call it with no arguments; read what it returns into wirings."""
    from torchrl_skill.checks.objectives import loss_wiring as _loss_wiring

    if target is None:
        wirings = _loss_wiring.wirings_from(_loss_wiring.default_wiring(), "default_wiring()", "default")
        sr.evidence(len(wirings), "wirings built")
        return sr.Passed("built-in known-good wirings: ppo, sac", wirings)
    fn = _user_code.load_attr(target)
    call = f"{target.attr}()"
    if not callable(fn):
        raise sr.CheckFailed(f"{target.label} is {type(fn).__name__}, not a function; point TARGET at the function that builds the loss")
    try:
        required = [p.name for p in inspect.signature(fn).parameters.values() if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    except (TypeError, ValueError):
        required = []
    if required:
        raise sr.CheckFailed(f"{target.attr}({', '.join(required)}) needs arguments, and the checker calls it with none; give them defaults, or point TARGET at a function that builds them")
    try:
        value = _user_code.call_user(fn, call)
    except (sr.CheckFailed, _user_code.TimeLimitExceeded):
        raise
    except Exception as err:  # the user's function failed: that is this check's finding
        raise sr.CheckFailed(f"{call} raised {sr.first_line(err)} (at {_user_code.error_site(err)}); fix that line, then rerun") from None
    stem = target.path.stem if target.path is not None else target.module.rpartition(".")[2]
    wirings = _loss_wiring.wirings_from(value, call, stem)
    sr.evidence(len(wirings), "wirings built")
    return sr.Passed(f"{call} returned {len(wirings)} wiring(s): {', '.join(w.name for w in wirings)}", wirings)


def needs_batch(batch) -> None:
    if batch is None:
        raise sr.CheckSkipped("no batch: return (loss, batch) or {'loss': ..., 'batch': ...} to run this check")


def check_value_key(loss) -> str:
    """The critic's out_keys must contain ``loss.tensor_keys.value`` (PPO/A2C/Reinforce family)."""
    critic = getattr(loss, "critic_network", None)
    if critic is None or not hasattr(loss.tensor_keys, "value"):
        raise sr.CheckSkipped(f"{type(loss).__name__} has no critic_network/value key to check")
    want = loss.tensor_keys.value
    outs = list(critic.out_keys)
    if want not in outs:
        real = [fmt_key(k) for k in outs]
        raise sr.CheckFailed(
            f"value key '{fmt_key(want)}' not found in value network out_keys {real} (torchrl raises this KeyError "
            f"at make_value_estimator or at the first forward); fix: loss.set_keys(value={real[-1]!r}) BEFORE "
            "loss.make_value_estimator(...), or build the critic with out_keys=['state_value']"
        )
    sr.evidence(1, "critics read")
    return f"critic out_keys {[fmt_key(k) for k in outs]} contain value key '{fmt_key(want)}'"


def check_log_prob_key(loss, batch) -> str:
    """The batch must hold the log-prob key the loss reads (``sample_log_prob`` field, default "action_log_prob")."""
    keys = loss.tensor_keys
    if not hasattr(keys, "sample_log_prob") or keys.sample_log_prob not in getattr(loss, "in_keys", []):
        raise sr.CheckSkipped(f"{type(loss).__name__} does not read a stored log-prob")
    needs_batch(batch)
    want = keys.sample_log_prob
    present = [fmt_key(k) for k in batch.keys(True, True)]
    if fmt_key(want) in present:
        if batch.get(want).requires_grad:
            raise sr.CheckFailed(grad_message(fmt_key(want), type(loss).__name__))
        sr.evidence(batch.batch_size.numel(), "batch steps holding it")
        return f"batch holds '{fmt_key(want)}' (tensor_keys.sample_log_prob), no grad"
    others = [k for k in present if k.endswith("log_prob")]
    hint = (
        f"the batch names it {others[0]!r}; fix: batch.rename_key_({others[0]!r}, {fmt_key(want)!r}) or "
        f"loss.set_keys(sample_log_prob={others[0]!r})"
        if others
        else "fix: collect with an actor built with return_log_prob=True (ProbabilisticActor), or set_keys to the key you store"
    )
    raise sr.CheckFailed(f"Couldn't find the log-prob {fmt_key(want)} in the input data. ({type(loss).__name__}); {hint}")


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


def recomputes_advantage(loss, batch) -> bool:
    """True when ``loss`` will compute the advantage itself in forward: a loss with an
    advantage key (PPO family, A2C, Reinforce) given a batch without it (torchrl 0.14.1,
    ``ClipPPOLoss.forward``: ``if advantage is None: self.value_estimator(...)``)."""
    key = getattr(loss.tensor_keys, "advantage", None)
    return key is not None and key not in batch.keys(True)


def check_advantage_source(loss, batch, estimator) -> str:
    """Which estimator produces the advantage the loss trains on, and whether it is the user's.

    A PPO/A2C loss given a batch without ``"advantage"`` recomputes it in forward with its
    own ``loss.value_estimator``; one never set by ``make_value_estimator`` is the class
    default (``GAE(gamma=0.99, lmbda=0.95)`` for ClipPPOLoss/A2CLoss/ReinforceLoss on 0.14.1,
    ``MultiAgentGAE`` for MAPPOLoss/IPPOLoss). Fails when the user's standalone estimator
    differs from it (their gamma/lmbda are never used; pytorch/rl#2462 is the confusion
    this causes) or when the batch holds an advantage under another key.
    """
    name = type(loss).__name__
    key = getattr(loss.tensor_keys, "advantage", None)
    if key is None:
        raise sr.CheckSkipped(f"{name} reads no advantage")
    needs_batch(batch)
    sr.evidence(batch.batch_size.numel(), "batch steps")
    if not recomputes_advantage(loss, batch):
        return f"batch holds '{fmt_key(key)}': {name} trains on it and does not recompute it"
    own = loss_estimator_view(loss).label
    origin = "its own" if getattr(loss, "_value_estimator", None) is not None else "its default (make_value_estimator was never called)"
    if estimator is not None and view_of(estimator).label != own:
        raise sr.CheckFailed(
            f"the batch holds no '{fmt_key(key)}', so {name} recomputes it at every forward with {origin} {own}, "
            f"not your {view_of(estimator).label}: your hyperparameters are never used; fix: run your estimator on "
            f"the batch before the loss (estimator(batch) writes '{fmt_key(key)}' and 'value_target' in place; keep that "
            f"batch, not a copy), or give the loss the same one: loss.make_value_estimator(ValueEstimators.GAE, gamma=..., lmbda=...)"
        )
    elsewhere = [fmt_key(k) for k in batch.keys(True, True) if "advantage" in fmt_key(k).rpartition(".")[2]]
    if elsewhere:
        raise sr.CheckFailed(
            f"the batch holds {elsewhere} but {name} reads '{fmt_key(key)}', so it recomputes the advantage with {origin} {own}; "
            f"fix: loss.set_keys(advantage={elsewhere[0]!r})"
        )
    return f"no '{fmt_key(key)}' in the batch: {name} computes it at forward with {origin} {own}"


def estimator_on(loss, batch, estimator) -> EstimatorView | None:
    """The estimator that will run on ``batch``: the user's standalone one, else the loss's
    own when its forward calls it (value-based losses always do; PPO/A2C without "advantage")."""
    if estimator is not None:
        return view_of(estimator)
    if getattr(loss.tensor_keys, "advantage", None) is not None and not recomputes_advantage(loss, batch):
        return None
    return loss_estimator_view(loss) if getattr(loss, "default_value_estimator", None) is not None else None


def check_trajectories(loss, batch, estimator) -> str:
    """A multi-step estimator (GAE, TD(lambda), TD(1), V-trace) must see whole trajectories
    along its time dim (default: the batch's last dim, torchrl/objectives/value/advantages.py
    ``_get_time_dim``). A collector batch [env, time] flattened with ``reshape(-1)`` joins
    each env's last step to the next env's first; a shuffled minibatch joins unrelated steps.
    """
    needs_batch(batch)
    runs = estimator_on(loss, batch, estimator)
    if runs is None:
        raise sr.CheckSkipped("no value estimator runs on this batch (the advantage is already in it)")
    if not runs.multi_step:
        raise sr.CheckSkipped(f"{runs.label} is one-step: the order of the batch does not change its result")
    name = runs.label
    ndim = batch.batch_dims
    if ndim == 0:
        raise sr.CheckFailed(f"{name} needs a time dim, and this batch has batch_size []; fix: keep the collector's [env, time] batch")
    time_dim = ndim - 1 if runs.time_dim is None else runs.time_dim % ndim
    state_keys = list(getattr(runs.network, "in_keys", []) or [])
    done_key = runs.done_key
    breaks, steps, evidence, where, telling = trajectory_breaks(batch, time_dim, done_key, state_keys)
    shape = list(batch.batch_size)
    if not evidence:
        raise sr.CheckSkipped(f"cannot tell: the batch has no ('collector', 'traj_ids') and no (next) copy of the critic's inputs {[fmt_key(k) for k in state_keys]}")
    if breaks:
        raise sr.CheckFailed(
            f"{name} runs along dim {time_dim} of this {shape} batch, but {breaks} of {steps} steps without done are "
            f"followed by a step of another trajectory (by {evidence}; first at flat index {where}): advantages leak across "
            "envs or episodes, because the batch was flattened ([env*time]) or shuffled before the estimator; fix: run the "
            "estimator on the collector's [env, time] batch, then flatten for minibatches: loss.value_estimator(batch); "
            "batch = batch.reshape(-1)"
        )
    sr.evidence(telling, "continuing steps whose state could show a break")
    if telling < max(1, steps // 2):  # a shuffle of steps that leave the state as it was looks continuous
        raise sr.CheckSkipped(
            f"cannot tell: in {steps - telling} of {steps} continuing steps the state did not change ({evidence}), so a "
            "shuffled or flattened batch would look the same; pass a batch whose state moves (collect under "
            "set_exploration_type(ExplorationType.RANDOM), or a collector batch with ('collector', 'traj_ids'))")
    return (f"{name} along dim {time_dim} of {shape}: all {steps} continuing steps stay in their trajectory "
            f"(by {evidence}; the state moved in {telling} of them)")


def check_forward(loss, batch) -> str:
    """A real forward pass: every "loss*" entry finite."""
    import torch

    needs_batch(batch)
    try:
        out = loss(batch.clone())
    except RuntimeError as err:
        if "requires grad." in str(err):
            key = str(err).split("tensordict stored ", 1)[-1].split(" requires grad", 1)[0]
            raise sr.CheckFailed(grad_message(key, type(loss).__name__)) from err
        raise
    losses = {fmt_key(k): out.get(k) for k in out.keys(True, True) if fmt_key(k).startswith("loss")}
    sr.expect(bool(losses), f"forward returned no loss_* entries: {sorted(out.keys())}")
    bad = [k for k, v in losses.items() if not torch.isfinite(v).all()]
    sr.expect(not bad, f"non-finite losses {bad}")
    sr.evidence(batch.batch_size.numel() and len(losses), "finite loss terms over a non-empty batch")
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
    """A standalone value estimator (GAE, TD0Estimator, TD1Estimator, TDLambdaEstimator) must
    find its value key, and the advantage it writes must equal an independent recomputation.

    torchrl 0.14.1 (torchrl/objectives/value/advantages.py, _call_value_nets): when the value
    network does not write ``estimator.tensor_keys.value`` (default "state_value"), GAE fails
    with ``TypeError: 'NoneType' object is not subscriptable``. Then it runs the estimator on
    a copy of the batch and compares every step's advantage with
    ``_estimator_views.reference_advantage`` (a plain loop over time that bootstraps at a
    truncation and not at a termination): ``GAE(shifted=True)`` on a batch with truncations
    inside it, or an estimator reading done as terminated, differs there.
    """
    import torch
    from torchrl_skill.checks.objectives.estimator_views import reference_advantage

    if estimator is None:
        raise sr.CheckSkipped("no standalone value_estimator in the wiring")
    needs_batch(batch)
    net = getattr(estimator, "value_network", None)
    want = estimator.tensor_keys.value
    name = type(estimator).__name__
    if net is not None:
        outs = [fmt_key(k) for k in net.out_keys]
        if fmt_key(want) not in outs:
            raise sr.CheckFailed(
                f"{name} reads value key '{fmt_key(want)}' but its value_network writes {outs}; torchrl fails with "
                f"TypeError: 'NoneType' object is not subscriptable (in _call_value_nets); fix: build the critic with "
                f"out_keys=['{fmt_key(want)}'], or {name.lower()}.set_keys(value={outs[-1]!r})"
            )
    with torch.no_grad():
        out = estimator(batch.clone())
    adv = out.get(estimator.tensor_keys.advantage)
    ref, gamma, lmbda = reference_advantage(estimator, batch)
    got = adv.reshape(*ref.shape, -1)[..., 0].double()
    diff = (got - ref).abs().nan_to_num(float("inf"))
    bad = diff > 1e-4 + 1e-4 * ref.abs()
    steps = sr.evidence(ref.numel(), "steps compared with the reference")
    if bad.any():
        first = bad.reshape(-1).nonzero()[0].item()
        raise sr.CheckFailed(
            f"{name}'s advantage differs from the reference recomputation (gamma={gamma:g}, lmbda={lmbda:g}) at "
            f"{int(bad.sum())} of {steps} steps, max |diff| {float(diff.max()):.3g} (first at flat index {first}); "
            f"{_estimator_cause(estimator, batch)}"
        )
    return (f"{name} reads value key '{fmt_key(want)}'; its advantage {list(adv.shape)} equals the reference "
            f"recomputation at all {steps} steps (max |diff| {float(diff.max()):.2g})")


def _estimator_cause(estimator, batch) -> str:
    """The likely cause of an estimator/reference mismatch, with its fix."""
    keys = estimator.tensor_keys
    terminated_key = getattr(keys, "terminated", None)
    if terminated_key is not None and fmt_key(terminated_key) == fmt_key(keys.done) and ("next", "terminated") in batch.keys(True):
        return (f"it reads {fmt_key(keys.done)!r} as terminated, so a truncation (time limit) is not bootstrapped; "
                f"fix: {type(estimator).__name__.lower()}.set_keys(terminated='terminated')")
    if getattr(estimator, "shifted", False):
        return ("shifted=True reads V(s'_t) as V(s_{t+1}), which is another episode's first state after a truncation "
                "inside the batch; fix: build it with shifted=False (the default)")
    return ("the estimator read other keys than the batch's ('next', 'reward'/'done'/'terminated'), or the value network "
            "is not deterministic; fix: set_keys(...) to the batch's keys, and run it under set_exploration_type(DETERMINISTIC)")


def check_module_sync(loss, name: str, module) -> str:
    """``module`` (the user's network) must hold the weights of ``loss.<name>_params`` (copy 0 if stacked).

    SACLoss / REDQLoss / IQLLoss / DiscreteIQLLoss / TD3Loss / CQLLoss keep their Q-network
    parameters as an expanded copy ([num_qvalue_nets, ...]) that does not share memory with
    the module passed in; the optimizer trains the copy and the module never changes.
    """
    from tensordict import TensorDict

    params = getattr(loss, f"{name}_params", None)
    if params is None:
        raise sr.CheckFailed(
            f'"modules" key {name!r}: {type(loss).__name__} has no {name}_params; use one of {network_names(loss)}'
        )
    stacked = params.batch_dims > 0
    ref = params[0] if stacked else params
    mine = TensorDict.from_module(module)
    pairs = list(zip(ref.values(True, True), mine.values(True, True)))
    shared = any(a.data_ptr() == b.data_ptr() for a, b in pairs)
    sr.evidence(len(pairs), "parameter tensors compared")
    diff = max((float((a - b).abs().max()) for a, b in pairs), default=0.0)
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


BUILD = [sr.Check("wiring:build", check_build, gives="wirings", proves="TARGET builds at least one loss wiring")]


def wiring_checks(wiring) -> list:
    """The checks of one wiring, named ``<wiring name>:<check>``."""
    checks = [
        sr.Check(f"{wiring.name}:value-key", check_value_key, proves="the critic writes the value key the loss reads"),
        sr.Check(f"{wiring.name}:log-prob-key", check_log_prob_key, proves="the batch holds the stored log-prob the loss reads, without grad"),
        sr.Check(f"{wiring.name}:advantage-source", check_advantage_source,
                 proves="the advantage the loss trains on comes from the estimator the wiring configures"),
        sr.Check(f"{wiring.name}:trajectories", check_trajectories,
                 proves="every continuing step along the estimator's time dim is followed by a step of its own trajectory"),
        sr.Check(f"{wiring.name}:forward", check_forward, proves="a forward pass on the batch gives finite loss terms"),
        sr.Check(f"{wiring.name}:value-estimator", check_estimator,
                 proves="the estimator's advantage equals an independent recomputation at every step"),
    ]
    for name, module in wiring.modules.items():
        checks.append(sr.Check(f"{wiring.name}:sync:{name}", functools.partial(check_module_sync, name=name, module=module),
                               proves=f"the user's {name} holds the weights the loss trains"))
    return checks


def run_checks(args, report: sr.Report) -> None:
    import warnings

    target = resolve_target(args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # target-updater and deprecation warnings are not wiring faults
        built = sr.run_declared(BUILD, report, target=target)
        for wiring in built.get("wirings", []):
            sr.run_declared(wiring_checks(wiring), report, loss=wiring.loss, batch=wiring.batch, estimator=wiring.value_estimator)


def main(argv=None) -> int:
    return sr.standard_main(__file__, build_parser, run_checks, argv)
