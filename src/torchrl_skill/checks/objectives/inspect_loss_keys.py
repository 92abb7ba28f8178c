"""Print the effective in_keys, out_keys and tensor_keys defaults of torchrl loss classes.

Each loss named is constructed with tiny modules (src/torchrl_skill/checks/objectives/loss_builders.py) on the
installed torchrl, and its keys are read from the live object, not from a docstring;
then a real forward pass on a batch holding ONLY the reported in_keys proves they are
enough, and the reported out_keys are checked against the keys the forward returns.
Losses that need a whole world model or sequence model (Dreamer*, DT, ACT, diffusion BC,
WorldModelLoss) report the tensor_keys defaults of their _AcceptedKeys dataclass and say
that construction is not done here. Default: ClipPPOLoss, SACLoss, DQNLoss.
"""

from __future__ import annotations

import difflib
import functools

from torchrl_skill.report import skill_report as sr  # noqa: E402
from torchrl_skill.checks.objectives.loss_builders import fmt_key  # noqa: E402

EXAMPLE = (
    "python $SKILL_DIR/sub-skills/objectives-and-training/scripts/inspect_loss_keys.py --loss ClipPPOLoss --loss SACLoss --json\n"
    "  python $SKILL_DIR/sub-skills/objectives-and-training/scripts/inspect_loss_keys.py --list\n"
    "  python $SKILL_DIR/sub-skills/objectives-and-training/scripts/inspect_loss_keys.py --loss all"
)
DEFAULT_LOSSES = ["ClipPPOLoss", "SACLoss", "DQNLoss"]


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument(
        "--loss",
        action="append",
        metavar="NAME",
        help="loss class exported by torchrl.objectives (repeatable; 'all' for every one); "
        f"default: {', '.join(DEFAULT_LOSSES)}",
    )
    parser.add_argument("--list", action="store_true", help="list every loss class torchrl.objectives exports, then stop")
    return parser


def sorted_keys(keys) -> list:
    return sorted(fmt_key(k) for k in keys)


def tensor_keys_of(obj) -> dict:
    """``{field: key}`` of a loss instance's ``tensor_keys`` (or of ``cls._AcceptedKeys()``)."""
    import dataclasses

    accepted = obj.tensor_keys if not isinstance(obj, type) else obj._AcceptedKeys()
    return {f.name: fmt_key(getattr(accepted, f.name)) for f in dataclasses.fields(accepted)}


def key_report(loss) -> dict:
    """Live keys of a constructed loss: ``{"in_keys", "out_keys", "tensor_keys"}``.

    ``in_keys``/``out_keys`` are None when the class defines no such attribute
    (e.g. RNDLoss, DistributionalDQNLoss in torchrl 0.14.1).
    """
    ins = getattr(loss, "in_keys", None) if hasattr(type(loss), "in_keys") or hasattr(loss, "_in_keys") else None
    outs = getattr(loss, "out_keys", None) if hasattr(type(loss), "out_keys") or hasattr(loss, "_out_keys") else None
    return {
        "in_keys": sorted_keys(ins) if ins is not None else None,
        "out_keys": [fmt_key(k) for k in outs] if outs is not None else None,
        "tensor_keys": tensor_keys_of(loss),
    }


def verify_forward(name: str) -> dict:
    """Build ``name``, run it on a batch restricted to its reported in_keys.

    Returns ``{"report", "produced"}``; raises CheckFailed when the forward pass needs a
    key outside in_keys, returns a non-finite loss, or omits a reported out_key.
    """
    import torch

    from torchrl_skill.checks.objectives import loss_builders as builders

    loss, kind, actor = builders.build(name)
    rep = key_report(loss)
    if kind is None:
        raise sr.CheckSkipped(f"{name}: no tiny forward batch here (needs task-specific inputs)")
    batch = builders.forward_batch(kind, actor)
    if rep["in_keys"] is not None:
        batch = batch.select(*loss.in_keys, strict=False)
    try:
        out = loss(batch)
    except KeyError as err:
        raise sr.CheckFailed(f"{name}: forward on a batch holding only in_keys {rep['in_keys']} raised KeyError: {err}")
    produced = sorted(fmt_key(k) for k in out.keys(True, True))
    for key in out.keys(True, True):
        if fmt_key(key).startswith("loss"):
            sr.expect(bool(torch.isfinite(out.get(key)).all()), f"{name}: {fmt_key(key)} is not finite")
    if rep["out_keys"] is not None:
        missing = [k for k in rep["out_keys"] if k not in produced]
        sr.expect(not missing, f"{name}: reported out_keys {missing} absent from forward output {produced}")
    return {"report": rep, "produced": produced}


def describe(name: str) -> str:
    """One-line key report for ``name``; construction-free classes report _AcceptedKeys."""
    import torchrl.objectives

    from torchrl_skill.checks.objectives import loss_builders as builders

    if not builders.has_builder(name):
        cls = getattr(torchrl.objectives, name)
        sr.evidence(len(tensor_keys_of(cls)), "tensor_keys read from the live class")
        return (
            f"{name}: not constructed here (needs a world model / sequence model); "
            f"tensor_keys defaults from {name}._AcceptedKeys(): {tensor_keys_of(cls)}"
        )
    try:
        result = verify_forward(name)
        rep, tail = result["report"], f"; forward output {result['produced']}"
    except sr.CheckSkipped:
        loss, _, _ = builders.build(name)
        rep, tail = key_report(loss), "; forward not run (needs task-specific inputs)"
    sr.evidence(len(rep["tensor_keys"]) + len(rep["in_keys"] or ()), "keys read from the live loss")
    ins = rep["in_keys"] if rep["in_keys"] is not None else "(no in_keys attribute)"
    outs = rep["out_keys"] if rep["out_keys"] is not None else "(no out_keys attribute)"
    return f"{name}: in_keys={ins}; out_keys={outs}; tensor_keys={rep['tensor_keys']}{tail}"


def resolve_names(requested, exported) -> list:
    """Map requested names to exported loss names; unknown -> cannot_run (exit 2) with suggestions."""
    if not requested:
        return list(DEFAULT_LOSSES)
    out = []
    for name in requested:
        if name == "all":
            out.extend(exported)
            continue
        if name not in exported:
            close = difflib.get_close_matches(name, exported, n=3, cutoff=0.4)
            hint = f"closest: {', '.join(close)}" if close else "see --list"
            sr.cannot_run(f"unknown loss '{name}' (not exported by torchrl.objectives)", hint)
        out.append(name)
    return list(dict.fromkeys(out))


def list_losses(exported) -> str:
    from torchrl_skill.checks.objectives import loss_builders as builders

    built = [n for n in exported if builders.has_builder(n)]
    sr.evidence(len(exported), "loss classes listed")
    return f"{len(exported)} loss classes: {', '.join(exported)}; constructed here: {len(built)}"


def declared_checks(args, exported) -> list:
    """``losses:list`` with --list, else one ``keys:NAME`` check per requested loss."""
    if args.list:
        return [sr.Check("losses:list", list_losses, proves="every loss class torchrl.objectives exports is listed")]
    return [sr.Check(f"keys:{name}", functools.partial(describe, name),
                     proves=f"{name}'s keys as the live loss reports them, and a forward on its in_keys alone gives its out_keys")
            for name in resolve_names(args.loss, exported)]


def run_checks(args, report: sr.Report) -> None:
    import warnings

    from torchrl_skill.checks.objectives import loss_builders as builders

    exported = builders.exported_loss_names()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # target-updater warnings are irrelevant to key reports
        sr.run_declared(declared_checks(args, exported), report, exported=exported)


def main(argv=None) -> int:
    return sr.standard_main(__file__, build_parser, run_checks, argv)
