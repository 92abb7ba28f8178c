"""rlrender --format mp4 on a pixel env where torchcodec is not installed (the verified stack)."""


def trigger():
    from _render import rlrender_error

    return rlrender_error("mp4", pixels=True)
