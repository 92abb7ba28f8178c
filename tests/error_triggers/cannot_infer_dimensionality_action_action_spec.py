"""SACLoss with target_entropy="auto" and no action spec on the actor or the loss."""


def trigger():
    import torch
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
    from torchrl.objectives import SACLoss

    class QNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def forward(self, observation, action):
            return self.linear(torch.cat([observation, action], -1))

    head = TensorDictModule(torch.nn.Sequential(torch.nn.Linear(3, 2), NormalParamExtractor()), ["observation"], ["loc", "scale"])
    actor = ProbabilisticActor(head, in_keys=["loc", "scale"], distribution_class=TanhNormal, return_log_prob=True)
    loss = SACLoss(actor, ValueOperator(QNet(), in_keys=["observation", "action"]))
    loss.target_entropy  # computed from the action spec on first use
