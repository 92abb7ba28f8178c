"""rlrender --format mp4 on a state-only env (PendulumEnv writes no "pixels")."""


def trigger():
    from _render import rlrender_error

    return rlrender_error("mp4", pixels=False)
