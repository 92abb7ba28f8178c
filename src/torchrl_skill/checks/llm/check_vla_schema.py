"""Check VLA batches against TorchRL's canonical schema; action tokenizers; TinyVLA.

Validates a synthetic batch (or, with --file, a TensorDict you saved with
``TensorDict.save``/``memmap``) with ``torchrl.data.vla.validate_vla_tensordict`` plus the
shape rules it does not enforce, naming each missing or mis-shaped key and the fix;
round-trips actions through ``UniformActionTokenizer`` and ``VocabTailActionTokenizer``
(error at most half a bin); runs ``TinyVLA`` forward and backward on CPU. A --file that
does not exist or does not load as a TensorDict exits 2.
"""

from __future__ import annotations

from pathlib import Path

from torchrl_skill.report import skill_report as sr  # noqa: E402

EXAMPLE = "python $SKILL_DIR/sub-skills/llm-vla-and-services/scripts/check_vla_schema.py --file ./my_batch --json"
BATCH, CHANNELS, HEIGHT, WIDTH, STATE_DIM, ACTION_DIM, CHUNK = 2, 3, 32, 32, 8, 7, 4


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("--file", help="folder of a TensorDict saved with TensorDict.save / memmap (default: synthetic batch)")
    parser.add_argument("--action-dim", type=sr.int_at_least(1), default=None, help="expected action size (last dim of 'action')")
    return parser


def make_vla_batch(batch: int = BATCH, seed: int = 0):
    """A canonical VLA batch: ``language_instruction`` (list of str), ``observation.image``
    ``[B, 3, 32, 32]`` float in [0, 1], ``observation.state`` ``[B, 8]``, ``action`` ``[B, 7]``
    in [-1, 1]. Keys from torchrl/data/vla/schema.py (0.14.1)."""
    import torch
    from tensordict import TensorDict

    g = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            "observation": {
                "image": torch.rand(batch, CHANNELS, HEIGHT, WIDTH, generator=g),
                "state": torch.randn(batch, STATE_DIM, generator=g),
            },
            "language_instruction": [f"pick block {i}" for i in range(batch)],
            "action": torch.rand(batch, ACTION_DIM, generator=g) * 2 - 1,
        },
        batch_size=[batch],
    )


def vla_problems(td, action_dim: int | None = None) -> list[str]:
    """Every problem of ``td`` as the canonical VLA schema sees it, each naming key and fix.

    First the messages of ``validate_vla_tensordict(td, raise_on_error=False)`` (missing
    instruction/action/perception, non-finite values), then shape rules that validator
    does not check on 0.14.1: image ``[*B, C, H, W]`` with C in (1, 3, 4) (or channels
    last), state ``[*B, S]``, action ``[*B, A]`` or a chunk ``[*B, T, A]``, float dtypes.
    Returns an empty list for a valid batch.
    """
    import torch
    from torchrl.data.vla import validate_vla_tensordict

    out = [
        f"{m} (fix: add or rename the key; canonical keys are in torchrl.data.vla, e.g. ACTION_KEY, IMAGE_KEY)"
        for m in validate_vla_tensordict(td, raise_on_error=False)
    ]
    nb = td.batch_dims
    keys = td.keys(True, True)
    img = td.get(("observation", "image"), None) if ("observation", "image") in keys else None
    if isinstance(img, torch.Tensor):
        chan_ok = img.ndim == nb + 3 and (img.shape[nb] in (1, 3, 4) or img.shape[-1] in (1, 3, 4))
        if not chan_ok:
            out.append(
                f"mis-shaped ('observation', 'image'): {tuple(img.shape)} with batch dims {nb}; expected "
                f"[*batch, C, H, W] (C in 1/3/4) (fix: add the channel dim, e.g. img.unsqueeze({nb}))"
            )
        elif not img.is_floating_point():
            out.append(f"('observation', 'image') is {img.dtype}; TinyVLA expects float in [0, 1] (fix: img.float() / 255)")
    state = td.get(("observation", "state"), None) if ("observation", "state") in keys else None
    if isinstance(state, torch.Tensor) and state.ndim != nb + 1:
        out.append(f"mis-shaped ('observation', 'state'): {tuple(state.shape)}; expected [*batch, state_dim] (fix: flatten(start_dim={nb}))")
    act = td.get("action", None) if "action" in keys else None
    if isinstance(act, torch.Tensor):
        if act.ndim not in (nb + 1, nb + 2):
            out.append(f"mis-shaped 'action': {tuple(act.shape)}; expected [*batch, action_dim] or [*batch, chunk, action_dim]")
        elif action_dim is not None and act.shape[-1] != action_dim:
            out.append(f"mis-shaped 'action': last dim {act.shape[-1]} != action_dim {action_dim}")
        if not act.is_floating_point():
            out.append(f"'action' is {act.dtype}; continuous actions must be float (tokens belong in ('vla_action', 'tokens'))")
    return out


def check_synthetic() -> str:
    td = make_vla_batch()
    problems = vla_problems(td, ACTION_DIM)
    sr.expect(not problems, "synthetic batch rejected: " + "; ".join(problems))
    broken = td.clone()
    del broken["language_instruction"]
    broken["observation", "image"] = broken["observation", "image"][:, 0]
    found = vla_problems(broken)
    sr.expect(
        any("language instruction" in p for p in found) and any("image" in p for p in found),
        f"a batch without instruction and with a 3-D image was not flagged: {found}",
    )
    sr.evidence(td.batch_size.numel() + 1, "batches judged (rows of the valid one, plus the broken copy)")
    return f"canonical batch {sorted(map(str, td.keys(True, True)))} valid; broken copy flagged ({len(found)} problems)"


def load_batch(path: str):
    """``TensorDict.load(path)``; exit 2 (one line) when the path is missing or is not a saved TensorDict."""
    p = Path(path)
    if not p.exists():
        sr.cannot_run(f"--file {p} does not exist", "save the batch with td.memmap(path) or td.save(path), then pass that folder")
    from tensordict import TensorDict

    try:
        return TensorDict.load(str(p))
    except Exception as err:  # a folder or file tensordict cannot read: the input, not a schema fault
        sr.cannot_run(f"--file {p} does not load as a TensorDict ({sr.first_line(err, 160)})",
                      "pass the folder written by td.memmap(path) or td.save(path)")


def check_file(args, batch) -> str:
    problems = vla_problems(batch, args.action_dim)
    sr.expect(not problems, f"{args.file}: " + "; ".join(problems))
    sr.evidence(batch.batch_size.numel(), "batch rows checked")
    return f"{args.file}: batch {tuple(batch.batch_size)}, keys {sorted(map(str, batch.keys(True, True)))} follow the VLA schema"


def check_tokenizers() -> str:
    import torch
    from torchrl.data.vla import UniformActionTokenizer, VocabTailActionTokenizer

    act = make_vla_batch()["action"]
    uni = UniformActionTokenizer(256, low=-1.0, high=1.0, action_dim=ACTION_DIM)
    tok = uni.encode(act)
    err_u = float((uni.decode(tok) - act).abs().max())
    sr.expect(tok.dtype == torch.int64 and int(tok.max()) < 256, f"uniform tokens {tok.dtype} max {int(tok.max())}")
    sr.expect(err_u <= 1.0 / 255 + 1e-6, f"UniformActionTokenizer round trip error {err_u:.4f} > half a bin")
    tail = VocabTailActionTokenizer(256, full_vocab_size=32000)
    ttok = tail.encode(act)
    err_t = float((tail.decode(ttok) - act).abs().max())
    sr.expect(int(ttok.min()) >= 32000 - 256, f"VocabTail tokens start at {int(ttok.min())}, not in the last 256 ids")
    sr.expect(err_t <= 1.0 / 255 + 1e-6, f"VocabTailActionTokenizer round trip error {err_t:.4f} > half a bin")
    sr.evidence(act.numel(), "action values round-tripped")
    return f"Uniform (256 bins) max err {err_u:.4f}; VocabTail ids {int(ttok.min())}..{int(ttok.max())} max err {err_t:.4f}"


def check_tinyvla() -> str:
    import torch
    from torchrl.modules.vla import TinyVLA

    torch.manual_seed(0)
    model = TinyVLA(action_dim=ACTION_DIM, chunk_size=CHUNK, hidden_dim=32)
    out = model(make_vla_batch())
    chunk = out["vla_action", "chunk"]
    sr.expect(tuple(chunk.shape) == (BATCH, CHUNK, ACTION_DIM), f"('vla_action', 'chunk') shape {tuple(chunk.shape)}")
    chunk.pow(2).mean().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    sr.expect(grads and any(float(g.abs().sum()) > 0 for g in grads), "TinyVLA backward produced no gradient")
    sr.evidence(len(grads), "parameter tensors reached by backward")
    return f"TinyVLA wrote ('vla_action', 'chunk') {tuple(chunk.shape)}; backward reached {len(grads)} parameter tensors"


CHECKS = [
    sr.Check("vla:schema-synthetic", check_synthetic, proves="the schema check accepts the canonical batch and flags a broken copy"),
    sr.Check("vla:schema-file", check_file, flag="file", proves="every row of the saved batch follows the VLA schema"),
    sr.Check("vla:action-tokenizers", check_tokenizers, proves="both action tokenizers round-trip every action value within half a bin"),
    sr.Check("vla:tinyvla-forward-backward", check_tinyvla, proves="TinyVLA writes its action chunk and backward reaches its parameters"),
]


def run_checks(args, report) -> None:
    batch = load_batch(args.file) if args.file else None
    sr.run_declared(CHECKS, report, args=args, batch=batch)


def main(argv=None):
    return sr.standard_main(__file__, build_parser, run_checks, argv)
