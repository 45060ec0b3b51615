"""Differentiable PyTorch functions backed by spatialgrad's CPU kernels.

Importing this module needs PyTorch; ``import spatialgrad`` does not. Signatures and defaults follow the
PyTorch/torchvision/mmcv functions they replace:

========================  ======================================================================
``roi_align``             ``torchvision.ops.roi_align``
``upsample_bilinear2d``   ``torch.nn.functional.interpolate(..., mode="bilinear")``
``avg_pool2d``            ``torch.nn.functional.avg_pool2d``
``grid_sample``           ``torch.nn.functional.grid_sample``
``ms_deform_attn``        mmcv ``MultiScaleDeformableAttnFunction.apply`` (``im2col_step`` is ignored)
========================  ======================================================================

When the native operators are built (``native`` is True: ``libspatialgrad_torch``, ``torch.ops.spatialgrad.*``),
the adapters call them: C++ kernels and C++ autograd on PyTorch's thread pool (``torch.set_num_threads``).
Otherwise (and for arguments those do not take) a Python ``autograd.Function`` over the NumPy API computes
the same bits. Either way CPU tensors are shared with the kernels without copies (inputs are viewed through
their strides); float16, bfloat16, float32 and float64 tensors are supported. Gradients are computed only for inputs that require them.
Backward passes are differentiable (``create_graph=True``): avg_pool2d, upsample_bilinear2d and roi_align to
any order, grid_sample and ms_deform_attn to second order; a third derivative of those two raises a
RuntimeError naming the operator.

``patch()`` routes existing ``torch.nn.functional`` and ``torchvision.ops`` calls to these functions;
``OPERATORS`` is the tuple of the operator names it accepts. ``spatialgrad.torch.nn`` has modules built on them.
"""
import functools
import inspect
import math
import os
import warnings
from typing import Callable, List, Optional, Sequence, Union

import numpy as np
import torch
from torch import Tensor

from .. import _core, _registry
from .._registry import OPS, OpSpec, as_tuple, gather_grads, pullback_call
from ..bfloat16 import bfloat16_bits, is_bfloat16
from ..functional import _strict
from ..functional._args import GRID_INTERPOLATION, GRID_PADDING

# One adapter per operator of the table, named after its forward.
__all__ = [*(operator.name for operator in _registry.OPERATORS), "ms_deform_attn_reference", "patch", "OPERATORS",
           "nn"]


class _BroadcastingList2:
    """``BroadcastingList2[int]`` in an adapter's signature: TorchScript, which reads the source, takes it by
    this name as "an int or a list of two, passed on as a list" (as for ``F.avg_pool2d``'s ``kernel_size``);
    Python sees ``Union[int, List[int]]`` (torch's own ``BroadcastingList2[int]`` is None at run time), which
    the adapter's TorchScript fallback (``_script_fallback``) declares to TorchScript."""

    def __getitem__(self, item_type):
        return Union[item_type, List[item_type]]


BroadcastingList2 = _BroadcastingList2()


def _to_numpy(t: Optional[torch.Tensor], op: str, name: str) -> Optional[np.ndarray]:
    """A NumPy view of a CPU tensor (no copy); bfloat16 as marked bit patterns (spatialgrad.bfloat16)."""
    if t is None:  # an absent cotangent
        return None
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"spatialgrad.torch.{op}(): expected {name} to be a torch.Tensor, but got {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(f"spatialgrad.torch.{op}(): expected {name} to be a CPU tensor, but got device {t.device}")
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return bfloat16_bits(t.view(torch.int16).numpy())
    return t.numpy()


def _to_torch(a: Optional[np.ndarray]) -> Optional[torch.Tensor]:
    if a is None:
        return None
    if is_bfloat16(a):
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


class _SpatialgradFunction(torch.autograd.Function):
    """One autograd Function for every registry entry (forwards, backwards, second-order kernels).

    Its backward applies the entry's pullback call (``_registry``) as another _SpatialgradFunction, so with
    ``create_graph=True`` the backward is itself recorded and differentiable: the linear operators to any
    order, grid_sample and ms_deform_attn to second order (a third derivative raises a clear error).
    """

    @staticmethod
    def forward(ctx, spec: OpSpec, options: dict, *tensors: Optional[torch.Tensor]):
        arrays = {name: _to_numpy(t, spec.name, name) for name, t in zip(spec.arrays, tensors)}
        options = spec.bind((), dict(arrays, **options))[1]  # defaults filled in: the pullbacks read them
        out = spec.forward(**arrays, **options)
        ctx.spec, ctx.options = spec, options
        ctx.save_for_backward(*tensors)
        ctx.set_materialize_grads(False)  # a None cotangent stays None (zeros) down to the kernels
        if spec.outputs == 1:
            return _to_torch(out)
        return tuple(_to_torch(o) for o in out)

    @staticmethod
    def backward(ctx, *grads: Optional[torch.Tensor]):
        spec: OpSpec = ctx.spec
        tensors = ctx.saved_tensors
        needs = [bool(n) and d for n, d in zip(ctx.needs_input_grad[2:], spec.differentiable)]
        if not any(needs) or all(g is None for g in grads):
            return (None, None) + (None,) * len(tensors)
        arrays = dict(zip(spec.arrays, tensors))
        try:
            call = pullback_call(spec, grads, arrays, ctx.options, needs)
        except NotImplementedError as e:
            raise RuntimeError(f"spatialgrad.torch: {e}") from None
        target = OPS[call.op]
        outputs = as_tuple(_SpatialgradFunction.apply(target, call.options,
                                                      *(call.arrays[name] for name in target.arrays)))
        return (None, None) + gather_grads(call, outputs, needs)


# Whether this process has looked for a DataLoader worker yet (reset in forked children).
_threads_followed = False


def _forget_threads_followed() -> None:
    global _threads_followed
    _threads_followed = False


os.register_at_fork(after_in_child=_forget_threads_followed)


def _follow_torch_threads_in_workers() -> None:
    """In a DataLoader worker, spatialgrad's default thread count follows torch's (which the DataLoader sets
    to 1 there), so that num_workers processes do not each run a pool of one thread per core. Checked on
    the first call of each process; spatialgrad.set_num_threads still wins (it overrides the default)."""
    global _threads_followed
    if _threads_followed:
        return
    _threads_followed = True
    if torch.utils.data.get_worker_info() is not None:
        _core.set_default_num_threads(torch.get_num_threads())


def _apply(name: str, tensors: Sequence[torch.Tensor], options: dict) -> torch.Tensor:
    _follow_torch_threads_in_workers()
    return _SpatialgradFunction.apply(OPS[name], options, *tensors)


def _load_native() -> bool:
    """Loads libspatialgrad_torch (the operators ``torch.ops.spatialgrad.*``, built beside ``_core`` when libtorch
    was found). ``SPATIALGRAD_TORCH_NATIVE=0`` keeps the Python path (tests and comparisons use it)."""
    if os.environ.get("SPATIALGRAD_TORCH_NATIVE", "1") == "0":
        return False
    library = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "libspatialgrad_torch.so")
    if not os.path.exists(library):
        return False
    try:
        torch.ops.load_library(library)
        from .. import _torch_ops  # noqa: F401  (the adapters' entry, built with the library)
    except (OSError, RuntimeError, ImportError) as error:  # e.g. built against another libtorch than this torch
        warnings.warn(f"spatialgrad.torch: the native operators did not load ({error}); using the Python path")
        return False
    return True


# Whether the adapters call the native operators: C++ kernels and C++ autograd, on PyTorch's thread pool
# (torch.set_num_threads). Otherwise, or when an argument is one the operators' schemas do not take, or while
# spatialgrad.ascend.strict() checks calls, they run the Python path (_SpatialgradFunction over the NumPy API).
native = _load_native()
if native:
    # spatialgrad's NumPy calls in this process run on PyTorch's pool as well: on the threads PyTorch's own calls
    # use, rather than on our pool's beside PyTorch's OpenMP threads, which spin for a while after each of its
    # calls (libgomp's default) and took a core from our worker. A forked child goes back to our pool.
    from .. import _torch_ops
    _core._use_host_executor(_torch_ops.pool_executor())


def _native_operator(name: str):
    """spatialgrad._torch_ops.<name>: torch.ops.spatialgrad.<name> through a typed pybind11 entry (torch.ops'
    generic argument matching cost 2 us of a 5 us call on tiny tensors)."""
    if not native:
        return None
    from .. import _torch_ops
    return getattr(_torch_ops, name)


_native_avg_pool2d = _native_operator("avg_pool2d")
_native_roi_align = _native_operator("roi_align")
_native_grid_sampler_2d = _native_operator("grid_sampler_2d")
_native_ms_deform_attn = _native_operator("ms_deform_attn")
_native_upsample_bilinear2d = _native_operator("upsample_bilinear2d")
_INTERPOLATION = GRID_INTERPOLATION  # aten's integers
_PADDING = GRID_PADDING


def _try_native(operator, *args) -> Optional[Tensor]:
    """operator(*args), or None where the operator does not take the arguments (types its entry does not
    convert, a tensor not on the CPU) or raises: the Python path then runs and raises today's error, with
    today's exception type (PyTorch has no OverflowError). (A function of its own: TorchScript parses the
    adapters, and has no try.)"""
    if not _threads_followed:  # spatialgrad.get_num_threads() in a DataLoader worker, as on the Python path
        _follow_torch_threads_in_workers()
    try:
        return operator(*args)
    except TypeError:
        if torch.overrides.has_torch_function(args):  # torch.fx's Proxy, tensor subclasses: torch.ops hands
            return getattr(torch.ops.spatialgrad, operator.__name__)(*args)  # them to __torch_function__
        return None
    except RuntimeError:
        return None


def _height_width(value) -> Optional[tuple]:
    """(h, w) from an int or one or two entries; None for anything else (the Python path reports it)."""
    if isinstance(value, int):
        return value, value
    if isinstance(value, (list, tuple)) and len(value) in (1, 2):
        return value[0], value[-1]
    return None


def _mode_number(name, numbers: dict) -> Optional[int]:
    return numbers.get(name) if isinstance(name, str) else None


def _ints(value, both: bool = False):
    """A number as a one-entry list (the core's messages then echo what the user passed), or as two entries
    with ``both``; lists and tuples as they are; None as [] (or None with ``both``: "not given")."""
    if value is None:
        return None if both else []
    if isinstance(value, (list, tuple)):
        return value
    return [value, value] if both else [value]


def avg_pool2d(input: Tensor, kernel_size: BroadcastingList2[int], stride: Optional[BroadcastingList2[int]] = None,
               padding: BroadcastingList2[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: Optional[int] = None) -> Tensor:
    """Average pooling over the last two dimensions, differentiable; the arguments of ``F.avg_pool2d``.

    Args:
        input: ``(N, C, H, W)`` or ``(C, H, W)`` CPU tensor, float16, bfloat16, float32 or float64, any strides.
        kernel_size: ``k`` or ``(kH, kW)``, each > 0.
        stride: ``s`` or ``(sH, sW)``, each > 0; ``None`` (default) means ``kernel_size``.
        padding: ``p`` or ``(pH, pW)`` of implicit zeros, ``0 <= p <= k // 2`` (default 0).
        ceil_mode: round the output size up (default False).
        count_include_pad: divide by the window size including the padding (default True), otherwise by the
            number of input pixels in the window.
        divisor_override: divide every window by this value instead (default ``None``: not set).

    Returns:
        ``(N, C, OH, OW)`` (or ``(C, OH, OW)``) of the input's dtype, ``O = floor((I + 2p - k) / s) + 1``
        (``ceil`` with ``ceil_mode``, dropping a last window that starts in the padding).

    Raises:
        ValueError: bad sizes or parameters, or a non-CPU tensor. TypeError: a dtype other than those listed.

    Example::

        y = spatialgrad.torch.avg_pool2d(torch.rand(2, 3, 8, 8, requires_grad=True), 2)  # (2, 3, 4, 4)
        y.sum().backward()
    """
    if torch.jit.is_scripting():
        return _avg_pool2d_from_script(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                       divisor_override)
    if native and _strict.chip is None:
        out = _try_native(_native_avg_pool2d, input, _ints(kernel_size), _ints(stride), _ints(padding), ceil_mode,
                          count_include_pad, divisor_override)
        if out is not None:
            return out
    return _apply("avg_pool2d", [input], dict(kernel_size=kernel_size, stride=stride, padding=padding,
                                               ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                                               divisor_override=divisor_override))


def upsample_bilinear2d(input: Tensor, size: Optional[BroadcastingList2[int]] = None,
                        scale_factor: Optional[BroadcastingList2[float]] = None, align_corners: Optional[bool] = None,
                        recompute_scale_factor: Optional[bool] = None) -> Tensor:
    """Bilinear upsampling (or downsampling), differentiable; ``F.interpolate(..., mode="bilinear")``'s arguments.

    Args:
        input: ``(N, C, H, W)`` CPU tensor, float16, bfloat16, float32 or float64; a ``channels_last`` input is
            computed in NHWC without copies and gives a ``channels_last`` result.
        size: ``(OH, OW)`` or one int for both; give either ``size`` or ``scale_factor``.
        scale_factor: a float or ``(sh, sw)``, each > 0; the output is ``floor(H * sh)`` by ``floor(W * sw)``.
        align_corners: whether the corner pixels' centres of input and output coincide (``None``, the default,
            means False).
        recompute_scale_factor: with ``scale_factor``, compute the coordinates from the output size instead
            of the given factor.

    Returns:
        ``(N, C, OH, OW)`` of the input's dtype.

    Raises:
        ValueError: not 4-D, both or neither of ``size`` and ``scale_factor``, sizes < 1, a non-CPU tensor.
        TypeError: a dtype other than those listed.

    Example::

        y = spatialgrad.torch.upsample_bilinear2d(torch.rand(1, 3, 4, 4), scale_factor=2, align_corners=False)
        assert y.shape == (1, 3, 8, 8)
    """
    if torch.jit.is_scripting():
        return _upsample_bilinear2d_from_script(input, size, scale_factor, align_corners, recompute_scale_factor)
    if isinstance(input, torch.Tensor) and input.dim() != 4:  # (torch.fx's Proxy: checked when the graph runs)
        raise ValueError(f"spatialgrad.torch.upsample_bilinear2d(): expected a 4-D input, but got {input.dim()}-D")
    if recompute_scale_factor and scale_factor is not None:
        # PyTorch then derives the size and uses the size ratio for the coordinates.
        sh, sw = (scale_factor, scale_factor) if not isinstance(scale_factor, (tuple, list)) else scale_factor
        size = (int(math.floor(input.shape[2] * sh)), int(math.floor(input.shape[3] * sw)))
        scale_factor = None
    if native and _strict.chip is None and (size is not None or scale_factor is not None):
        # The operator computes a channels_last input in NHWC (and returns channels_last), as below.
        out = _try_native(_native_upsample_bilinear2d, input, _ints(size, both=True), bool(align_corners),
                          None if scale_factor is None else _ints(scale_factor))
        if out is not None:
            return out
    options = dict(output_size=size, scale_factor=scale_factor, align_corners=bool(align_corners))
    channels_last = not input.is_contiguous() and input.is_contiguous(memory_format=torch.channels_last)
    if channels_last:
        out = _apply("upsample_bilinear2d", [input.permute(0, 2, 3, 1)], dict(options, layout="NHWC"))
        return out.permute(0, 3, 1, 2)
    return _apply("upsample_bilinear2d", [input], dict(options, layout="NCHW"))


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners: Optional[bool] = None) -> Tensor:
    """Samples ``input`` at the normalised locations of ``grid``, differentiable in both (``F.grid_sample``, 4-D).

    Args:
        input: ``(N, C, H, W)`` CPU tensor, float16, bfloat16, float32 or float64.
        grid: ``(N, Ho, Wo, 2)`` of the input's dtype; ``grid[..., 0]`` is x (along W), ``grid[..., 1]`` is y,
            with -1 and +1 the image edges (the corner pixels' centres with ``align_corners=True``).
        mode: ``"bilinear"`` (default), ``"nearest"`` or ``"bicubic"``.
        padding_mode: what locations outside the image read: ``"zeros"`` (default), ``"border"`` or
            ``"reflection"``.
        align_corners: see ``grid``; ``None`` (the default) means False and warns, as ``F.grid_sample`` does.

    Returns:
        ``(N, C, Ho, Wo)`` of the input's dtype.

    Raises:
        ValueError: bad shapes or modes, a non-CPU tensor. TypeError: unsupported or mismatched dtypes.

    Example::

        grid = torch.rand(1, 5, 5, 2) * 2 - 1
        y = spatialgrad.torch.grid_sample(torch.rand(1, 3, 8, 8), grid, align_corners=False)  # (1, 3, 5, 5)
    """
    if torch.jit.is_scripting():
        return _grid_sample_from_script(input, grid, mode, padding_mode, align_corners)
    if align_corners is None:  # the warning F.grid_sample gives; a patched F.grid_sample gives it from here
        warnings.warn("grid_sample: align_corners=None means False, as in PyTorch (which warns the same); "
                      "pass it explicitly to silence this")
    if native and _strict.chip is None:
        # A mode that is not a name passes None, which the entry rejects: the Python path explains it.
        out = _try_native(_native_grid_sampler_2d, input, grid, _mode_number(mode, _INTERPOLATION),
                          _mode_number(padding_mode, _PADDING), bool(align_corners))
        if out is not None:
            return out
    return _apply("grid_sample", [input, grid], dict(mode=mode, padding_mode=padding_mode,
                                                      align_corners=bool(align_corners)))


def _boxes_k5(boxes: Union[torch.Tensor, List[torch.Tensor]], dtype: torch.dtype) -> torch.Tensor:
    """torchvision's box formats: a (K, 5) tensor, or a list of (L_i, 4) tensors, one per image."""
    if isinstance(boxes, (list, tuple)):
        _check_boxes_per_image(boxes)
        parts = [torch.cat([torch.full((b.shape[0], 1), i, dtype=b.dtype), b], dim=1) for i, b in enumerate(boxes)]
        boxes = torch.cat(parts, dim=0) if parts else torch.zeros((0, 5), dtype=dtype)
    return boxes.detach()


def _check_boxes_per_image(boxes: Sequence[torch.Tensor]) -> None:
    """The list format is checked here: joined into (K, 5), a (L, 5) entry would be reported as (K, 6)."""
    for i, b in enumerate(boxes):
        if not isinstance(b, torch.Tensor) or b.dim() != 2 or b.shape[1] != 4:
            got = f"shape {tuple(b.shape)}" if isinstance(b, torch.Tensor) else type(b).__name__
            raise ValueError(f"spatialgrad.torch.roi_align(): expected boxes as a list of (L, 4) tensors (x1, y1, "
                             f"x2, y2), one per image, but got boxes[{i}] of {got} (pass (K, 5) rows with the batch "
                             f"index as one tensor, not in a list)")


def roi_align(input: Tensor, boxes: Union[Tensor, List[Tensor]], output_size: BroadcastingList2[int],
              spatial_scale: float = 1.0, sampling_ratio: int = -1, aligned: bool = False) -> Tensor:
    """Average of bilinear samples over each bin of each box, differentiable in ``input`` (torchvision's
    ``roi_align`` arguments and defaults).

    Args:
        input: ``(B, C, H, W)`` CPU tensor, float16, bfloat16, float32 or float64.
        boxes: a ``(K, 5)`` tensor of rows ``(batch_index, x1, y1, x2, y2)``, or a list of ``B`` tensors of
            shape ``(L_i, 4)`` (rows ``(x1, y1, x2, y2)`` of image i); the input's dtype, in image coordinates.
        output_size: ``P`` or ``(PH, PW)``, the bins per box.
        spatial_scale: multiplies the box coordinates (feature size / image size; default 1.0).
        sampling_ratio: samples per bin along each axis; ``<= 0`` (the default -1) is adaptive,
            ``ceil(box size / P)`` (the same meaning as :func:`spatialgrad.roi_align`).
        aligned: shift the boxes by -0.5 pixel (default False: unshifted, boxes at least 1 pixel).

    Returns:
        ``(K, C, PH, PW)`` of the input's dtype; no gradient flows to ``boxes``.

    Raises:
        ValueError: bad shapes (e.g. a ``(L, 5)`` tensor in the list format), parameters, a non-CPU tensor.
        IndexError: a batch index outside ``[0, B)``. TypeError: boxes of another dtype than ``input``.

    Example::

        boxes = torch.tensor([[0, 1.0, 1.0, 6.0, 5.0]])
        y = spatialgrad.torch.roi_align(torch.rand(1, 3, 8, 8), boxes, 2, aligned=True)  # (1, 3, 2, 2)
    """
    if torch.jit.is_scripting():
        return _roi_align_from_script(input, boxes, output_size, spatial_scale, sampling_ratio, aligned)
    size = _height_width(output_size) if native and _strict.chip is None else None
    if size is not None:
        rois = boxes if isinstance(boxes, Tensor) else _boxes_k5(boxes, input.dtype)
        out = _try_native(_native_roi_align, input, rois, spatial_scale, size[0], size[1], sampling_ratio, aligned)
        if out is not None:
            return out
    return _apply("roi_align", [input, _boxes_k5(boxes, input.dtype)],
                  dict(output_size=output_size, spatial_scale=float(spatial_scale),
                       sampling_ratio=int(sampling_ratio), aligned=bool(aligned)))


def ms_deform_attn(value: Tensor, spatial_shapes: Tensor, level_start_index: Tensor, sampling_locations: Tensor,
                   attention_weights: Tensor, im2col_step: int = 64) -> Tensor:
    """Multi-scale deformable attention (Deformable DETR), differentiable in value, locations and weights.

    For each query and head, the sum over levels l and points p of ``attention_weights[..., l, p]`` times a
    bilinear sample of level l of ``value`` at ``sampling_locations[..., l, p, :]``.

    Args:
        value: ``(bs, S, nH, C)`` CPU tensor, float16, bfloat16, float32 or float64: the levels' pixels
            stacked along ``S`` (row-major per level).
        spatial_shapes: ``(L, 2)`` int64 (or int32) tensor, ``(H, W)`` of each level, ``sum(H * W) == S``.
        level_start_index: ``(L,)`` int tensor, where each level starts in ``S`` (the exclusive prefix sum of
            ``H * W``).
        sampling_locations: ``(bs, Q, nH, L, P, 2)``, ``(x, y)`` with ``[0, 1]`` spanning the level; points
            outside read zeros.
        attention_weights: ``(bs, Q, nH, L, P)``.
        im2col_step: accepted for the same call as mmcv's function and ignored (the CPU kernel does not
            batch columns).

    ``sampling_locations`` and ``attention_weights`` are cast to ``value``'s dtype (mixed precision); each
    gradient comes back in its input's own dtype.

    Returns:
        ``(bs, Q, nH * C)`` of value's dtype.

    Raises:
        ValueError: inconsistent shapes, ``S`` or ``level_start_index`` not matching ``spatial_shapes``, a
        non-CPU tensor. TypeError: a dtype other than those listed.

    Example::

        shapes, starts = torch.tensor([[4, 4], [2, 2]]), torch.tensor([0, 16])
        out = spatialgrad.torch.ms_deform_attn(torch.rand(1, 20, 2, 8), shapes, starts, torch.rand(1, 3, 2, 2, 4, 2),
                                               torch.rand(1, 3, 2, 2, 4))  # (1, 3, 16)
    """
    if torch.jit.is_scripting():
        return _ms_deform_attn_from_script(value, spatial_shapes, level_start_index, sampling_locations,
                                           attention_weights, im2col_step)
    # mmcv casts the points to value's dtype (AMP: float16 value, float32 locations); the casts are part of
    # the graph, so each input's gradient comes back in its own dtype.
    sampling_locations = sampling_locations.to(value.dtype)
    attention_weights = attention_weights.to(value.dtype)
    if native and _strict.chip is None:
        out = _try_native(_native_ms_deform_attn, value, spatial_shapes, level_start_index, sampling_locations,
                          attention_weights, im2col_step)
        if out is not None:
            return out
    return _apply("ms_deform_attn", [value, spatial_shapes, level_start_index, sampling_locations,
                                     attention_weights], {})


def ms_deform_attn_reference(value: torch.Tensor, spatial_shapes: torch.Tensor, sampling_locations: torch.Tensor,
                             attention_weights: torch.Tensor, *extra) -> torch.Tensor:
    """Multi-scale deformable attention composed of PyTorch ops: the reference :func:`ms_deform_attn` is
    compared against (in tests, benchmarks and examples), differentiable by PyTorch's autograd.

    It takes no ``level_start_index`` (unlike :func:`ms_deform_attn`; the order of mmcv's pure-PyTorch
    fallback): the levels are split by ``spatial_shapes`` alone. Each level is sampled with ``F.grid_sample``
    (bilinear, zeros padding, ``align_corners=False``) at ``2 * location - 1`` and the samples are summed with
    the attention weights, through temporaries of ``bs * nH * C * Q * L * P`` elements.

    Args:
        value: ``(bs, S, nH, C)`` floating tensor, the levels' pixels stacked along ``S``.
        spatial_shapes: ``(L, 2)`` ``(H, W)`` per level (a tensor, an array or a list of pairs), ``sum(H * W) == S``.
        sampling_locations: ``(bs, Q, nH, L, P, 2)``, ``(x, y)`` with ``[0, 1]`` spanning the level.
        attention_weights: ``(bs, Q, nH, L, P)``.

    Returns:
        ``(bs, Q, nH * C)``.

    Raises:
        TypeError: more than four arguments (a ``level_start_index`` passed as with :func:`ms_deform_attn`).

    Example::

        value, locations, weights = torch.rand(1, 20, 2, 8), torch.rand(1, 3, 2, 2, 4, 2), torch.rand(1, 3, 2, 2, 4)
        out = spatialgrad.torch.ms_deform_attn_reference(value, [(4, 4), (2, 2)], locations, weights)  # (1, 3, 16)
    """
    if extra:
        raise TypeError(f"ms_deform_attn_reference(): expected 4 arguments (value, spatial_shapes, sampling_locations, "
                        f"attention_weights; no level_start_index, unlike ms_deform_attn), but got {4 + len(extra)}")
    bs, _, heads, channels = value.shape
    _, queries, _, levels, points, _ = sampling_locations.shape
    sizes = [(int(h), int(w)) for h, w in spatial_shapes]  # a tensor, an array or a list of pairs
    grids = 2 * sampling_locations - 1
    sampled = []
    for level, (value_level, (h, w)) in enumerate(zip(value.split([h * w for h, w in sizes], dim=1), sizes)):
        # (bs, H*W, nH, C) -> (bs*nH, C, H, W)
        image = value_level.flatten(2).transpose(1, 2).reshape(bs * heads, channels, h, w)
        # (bs, Q, nH, P, 2) -> (bs*nH, Q, P, 2)
        grid = grids[:, :, :, level].transpose(1, 2).flatten(0, 1)
        sampled.append(torch.nn.functional.grid_sample(image, grid, mode="bilinear", padding_mode="zeros",
                                                       align_corners=False))
    # (bs, Q, nH, L, P) -> (bs*nH, 1, Q, L*P)
    weights = attention_weights.transpose(1, 2).reshape(bs * heads, 1, queries, levels * points)
    out = (torch.stack(sampled, dim=-2).flatten(-2) * weights).sum(-1)
    return out.view(bs, heads * channels, queries).transpose(1, 2).contiguous()


# torch.fx: with the native operators, symbolic tracing goes through the adapters and records their
# torch.ops.spatialgrad.* calls. Without them it records each adapter as one leaf call (as torchvision does for
# roi_align) instead of tracing into it, where NumPy cannot take Proxy arguments.
if not native:
    for _operator in _registry.OPERATORS:
        torch.fx.wrap(_operator.name)

from . import nn  # noqa: E402  (modules built on the functions above)
from ._patch import OPERATORS, patch  # noqa: E402


def _script_fallback(adapter: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """What ``adapter``'s ``is_scripting()`` branch calls: the adapter itself, ignored by TorchScript, which
    types the call from ``__signature__``: the adapter's annotations (its ``BroadcastingList2`` arguments
    arrive as lists) without defaults (the branch passes every argument)."""

    @torch.jit.ignore
    @functools.wraps(adapter)
    def from_script(*args):
        return adapter(*args)

    signature = inspect.signature(adapter)
    from_script.__signature__ = signature.replace(
        parameters=[p.replace(default=inspect.Parameter.empty) for p in signature.parameters.values()])
    return from_script


# ---- what the adapters' `is_scripting()` branches call with the native operators: TorchScript compiles these
# functions into the scripted model, which then calls torch.ops.spatialgrad.* and runs without Python (a
# torch.jit.save file loads wherever libspatialgrad_torch is loaded). Their arguments arrive as the adapters'
# annotations say (an int or a pair as a list of two); the operators check them.

def _avg_pool2d_native_script(input: Tensor, kernel_size: List[int], stride: Optional[List[int]],
                              padding: List[int], ceil_mode: bool, count_include_pad: bool,
                              divisor_override: Optional[int]) -> Tensor:
    no_stride: List[int] = []  # (the operator's default: the kernel size)
    return torch.ops.spatialgrad.avg_pool2d(input, kernel_size, no_stride if stride is None else stride, padding,
                                            ceil_mode, count_include_pad, divisor_override)


def _upsample_bilinear2d_native_script(input: Tensor, size: Optional[List[int]], scale_factor: Optional[List[float]],
                                       align_corners: Optional[bool],
                                       recompute_scale_factor: Optional[bool]) -> Tensor:
    if recompute_scale_factor is not None and recompute_scale_factor and scale_factor is not None:
        # PyTorch then derives the size and uses the size ratio for the coordinates (as the adapter does).
        size = [int(math.floor(input.size(2) * scale_factor[0])), int(math.floor(input.size(3) * scale_factor[1]))]
        scale_factor = None
    return torch.ops.spatialgrad.upsample_bilinear2d(input, size, align_corners is not None and align_corners,
                                                     scale_factor)


def _mode_index(names: List[str], name: str, argument: str) -> int:
    """aten's integer of a mode: its index in `names`."""
    for index, known in enumerate(names):
        if known == name:
            return index
    expected = ", ".join([f"'{known}' ({index})" for index, known in enumerate(names)])
    raise ValueError(f"grid_sample(): expected {argument} to be one of {expected}, but got '{name}'")


def _grid_sample_native_script(input: Tensor, grid: Tensor, mode: str, padding_mode: str,
                               align_corners: Optional[bool]) -> Tensor:
    interpolation = _mode_index(["bilinear", "nearest", "bicubic"], mode, "mode")
    padding = _mode_index(["zeros", "border", "reflection"], padding_mode, "padding_mode")
    return torch.ops.spatialgrad.grid_sampler_2d(input, grid, interpolation, padding,
                                                 align_corners is not None and align_corners)


def _roi_align_native_script(input: Tensor, boxes: Union[Tensor, List[Tensor]], output_size: List[int],
                             spatial_scale: float, sampling_ratio: int, aligned: bool) -> Tensor:
    if isinstance(boxes, Tensor):
        rois = boxes
    else:  # torchvision's list of (L_i, 4) tensors, one per image: (K, 5) rows with the image index first
        rows = [torch.cat([torch.full([b.size(0), 1], float(i), dtype=b.dtype), b], dim=1)
                for i, b in enumerate(boxes)]
        rois = torch.cat(rows, dim=0) if len(rows) > 0 else torch.zeros([0, 5], dtype=input.dtype)
    return torch.ops.spatialgrad.roi_align(input, rois, spatial_scale, output_size[0], output_size[1], sampling_ratio,
                                           aligned)


def _ms_deform_attn_native_script(value: Tensor, spatial_shapes: Tensor, level_start_index: Tensor,
                                  sampling_locations: Tensor, attention_weights: Tensor, im2col_step: int) -> Tensor:
    return torch.ops.spatialgrad.ms_deform_attn(value, spatial_shapes, level_start_index,
                                                sampling_locations.to(value.dtype), attention_weights.to(value.dtype),
                                                im2col_step)


# TorchScript: a scripted function or module calling an adapter compiles only its `is_scripting()` branch,
# which calls `_<name>_from_script`: with the native operators, the function above; without them the adapter
# itself, ignored by TorchScript (torch.jit.ignore: TorchScript calls back into Python, where the adapter runs in
# eager mode), so such scripted models work in Python but, saved with torch.jit.save, cannot run these calls
# outside Python.
for _operator in _registry.OPERATORS:
    globals()[f"_{_operator.name}_from_script"] = (globals()[f"_{_operator.name}_native_script"] if native
                                                   else _script_fallback(globals()[_operator.name]))
del _operator
