"""A standalone GAE whose critic writes state_action_value instead of state_value."""


def trigger():
    import torch
    from _tiny import TinyEnv, actor, critic
    from torchrl.objectives.value import GAE

    with torch.no_grad():
        batch = TinyEnv().rollout(4, actor())
    GAE(gamma=0.99, lmbda=0.95, value_network=critic(out_key="state_action_value"))(batch)
