"""SliceSampler(pad_output=True) with the default strict_length=True."""


def trigger():
    from torchrl.data import SliceSampler

    SliceSampler(slice_len=10, pad_output=True)
