"""The one error the reference raises for malformed checkpoints and problems."""


class CheckpointError(ValueError):
    """A checkpoint tensor (or attribute) is not what its format says it must be.

    The message always names the tensor, what was expected and what was found, e.g.
    ``w13_qweight: expected dtype torch.int32, found torch.float16``.
    """

    def __init__(self, tensor: str, expected: str, found: str):
        self.tensor, self.expected, self.found = tensor, expected, found
        super().__init__(f"{tensor}: expected {expected}, found {found}")
