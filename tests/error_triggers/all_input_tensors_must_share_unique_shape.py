"""ClipPPOLoss on a VMAS-shaped batch: per-agent reward and value, the team done at the root only."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "objectives"))


def trigger():
    from team_env import rollout
    from torchrl.objectives import ClipPPOLoss

    _, actor, critic, batch = rollout()
    loss = ClipPPOLoss(actor, critic)
    loss.set_keys(reward=("agents", "reward"), value=("agents", "state_value"))
    loss(batch)
