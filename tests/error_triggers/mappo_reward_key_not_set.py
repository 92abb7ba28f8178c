"""MAPPOLoss on a VMAS-shaped batch with reward left at its default key "reward" (the reward is per agent)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "objectives"))


def trigger():
    from team_env import rollout
    from torchrl.objectives import MAPPOLoss

    _, actor, critic, batch = rollout()
    loss = MAPPOLoss(actor, critic)
    loss.set_keys(value=("agents", "state_value"))
    loss(batch)
