"""NumPy-level forward and backward functions, one module per operator."""
from .avg_pool2d import avg_pool2d, avg_pool2d_backward
from .roi_align import roi_align, roi_align_backward

__all__ = [
    "avg_pool2d",
    "avg_pool2d_backward",
    "roi_align",
    "roi_align_backward",
]
