"""What models call: Linear (dispatch by tensor type), get_rows; norms, rope and activations."""

from .linear import Linear, get_rows

__all__ = ["Linear", "get_rows"]
