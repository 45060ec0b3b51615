"""NumPy-level forward and backward functions, one module per operator."""
from .avg_pool2d import avg_pool2d, avg_pool2d_backward
from .ms_deform_attn import ms_deform_attn, ms_deform_attn_backward

__all__ = [
    "avg_pool2d",
    "avg_pool2d_backward",
    "ms_deform_attn",
    "ms_deform_attn_backward",
]
