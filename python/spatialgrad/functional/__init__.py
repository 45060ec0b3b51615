"""NumPy-level forward and backward functions, one module per operator."""
from ._args import explain_argument_errors
from .avg_pool2d import avg_pool2d, avg_pool2d_backward
from .upsample_bilinear2d import upsample_bilinear2d, upsample_bilinear2d_backward
from .grid_sampler_2d import grid_sample, grid_sampler_2d_backward, grid_sampler_2d_double_backward
from .roi_align import roi_align, roi_align_backward
from .ms_deform_attn import ms_deform_attn, ms_deform_attn_backward, ms_deform_attn_double_backward

__all__ = [
    "avg_pool2d",
    "avg_pool2d_backward",
    "upsample_bilinear2d",
    "upsample_bilinear2d_backward",
    "grid_sample",
    "grid_sampler_2d_backward",
    "grid_sampler_2d_double_backward",
    "roi_align",
    "roi_align_backward",
    "ms_deform_attn",
    "ms_deform_attn_backward",
    "ms_deform_attn_double_backward",
]

# Every public function explains a non-array argument in one line (see explain_argument_errors).
for _name in __all__:
    globals()[_name] = explain_argument_errors(globals()[_name])
del _name
