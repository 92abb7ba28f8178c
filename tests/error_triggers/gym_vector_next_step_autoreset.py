"""GymWrapper over a gymnasium vector env in its default NEXT_STEP autoreset mode."""


def trigger():
    import gymnasium as gym
    from torchrl.envs import GymWrapper

    vec = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    try:
        GymWrapper(vec)
    finally:
        vec.close()
