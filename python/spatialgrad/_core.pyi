"""Type stubs for the C++ extension. Call the wrappers in spatialgrad instead of these directly."""
import numpy as np

__version__: str

def set_num_threads(n: int) -> None: ...
def get_num_threads() -> int: ...
def simd_level() -> str: ...
def set_default_num_threads(n: int) -> None: ...
def clear_memory_cache() -> None: ...
def avg_pool2d(
    input: np.ndarray,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int,
) -> np.ndarray: ...
def avg_pool2d_backward(
    grad_output: np.ndarray,
    input: np.ndarray,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int,
) -> np.ndarray: ...
def upsample_bilinear2d(
    input: np.ndarray,
    output_size: list[int] | None,
    align_corners: bool,
    scales_h: float,
    scales_w: float,
    layout: str,
) -> np.ndarray: ...
def upsample_bilinear2d_backward(
    grad_output: np.ndarray,
    output_size: list[int],
    input_size: list[int],
    align_corners: bool,
    scales_h: float,
    scales_w: float,
    layout: str,
) -> np.ndarray: ...
def grid_sampler_2d(
    input: np.ndarray,
    grid: np.ndarray,
    interpolation_mode: int,
    padding_mode: int,
    align_corners: bool,
) -> np.ndarray: ...
def grid_sampler_2d_backward(
    grad_output: np.ndarray,
    input: np.ndarray,
    grid: np.ndarray,
    interpolation_mode: int,
    padding_mode: int,
    align_corners: bool,
    output_mask: list[bool],
) -> tuple[np.ndarray | None, np.ndarray | None]: ...
def grid_sampler_2d_double_backward(
    grad_grad_input: np.ndarray | None,
    grad_grad_grid: np.ndarray | None,
    grad_output: np.ndarray,
    input: np.ndarray,
    grid: np.ndarray,
    interpolation_mode: int,
    padding_mode: int,
    align_corners: bool,
    output_mask: list[bool],
) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]: ...
def roi_align(
    input: np.ndarray,
    boxes: np.ndarray,
    output_size: list[int],
    spatial_scale: float,
    sampling_ratio: int,
    aligned: bool,
) -> np.ndarray: ...
def roi_align_backward(
    grad_output: np.ndarray,
    boxes: np.ndarray,
    input_shape: list[int],
    pooled_height: int,
    pooled_width: int,
    spatial_scale: float,
    sampling_ratio: int,
    aligned: bool,
) -> np.ndarray: ...
def ms_deform_attn(
    value: np.ndarray,
    spatial_shapes: np.ndarray,
    level_start_index: np.ndarray,
    sampling_locations: np.ndarray,
    attention_weights: np.ndarray,
) -> np.ndarray: ...
def ms_deform_attn_backward(
    value: np.ndarray,
    spatial_shapes: np.ndarray,
    level_start_index: np.ndarray,
    sampling_locations: np.ndarray,
    attention_weights: np.ndarray,
    grad_output: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...
def ms_deform_attn_double_backward(
    value: np.ndarray,
    spatial_shapes: np.ndarray,
    level_start_index: np.ndarray,
    sampling_locations: np.ndarray,
    attention_weights: np.ndarray,
    grad_output: np.ndarray,
    grad_grad_value: np.ndarray | None,
    grad_grad_sampling_locations: np.ndarray | None,
    grad_grad_attention_weights: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...

# The Ascend rule table (spatialgrad/ascend.h), for spatialgrad.ascend.
_AscendRule = tuple[str, str, str, str, bool]  # (op, argument, rule, source, rejects)
def ascend_chips() -> list[str]: ...
def ascend_validate_chip(name: str) -> None: ...
def ascend_check(op: str, chip: str, facts: dict[str, float | str]) -> list[tuple[_AscendRule, float, str]]: ...
def ascend_rules() -> list[tuple[_AscendRule, list[str]]]: ...
