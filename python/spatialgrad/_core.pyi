"""Type stubs for the C++ extension. Call the wrappers in spatialgrad instead of these directly."""
import numpy as np

def set_num_threads(n: int) -> None: ...
def get_num_threads() -> int: ...
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
