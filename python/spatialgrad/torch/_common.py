"""The machinery every operator module of ``spatialgrad.torch`` shares: tensors as NumPy views, the autograd
Function of the Python path, loading the native operators and calling them, and the TorchScript fallback."""
import functools
import inspect
import os
import sys
import warnings
from typing import TYPE_CHECKING, Callable, List, NamedTuple, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np
import torch
from torch import Tensor

from .. import _core
from .._registry import OPS, OpSpec, as_tuple, gather_grads, pullback_call
from ..bfloat16 import bfloat16_bits, is_bfloat16

# spatialgrad.torch (being imported): the adapters read its `native` at each call, which callers may switch off.
package = sys.modules[__package__]

class _BroadcastingList2:
    """``BroadcastingList2[int]`` in an adapter's signature: TorchScript, which reads the source, takes it by
    this name as "an int or a list of two, passed on as a list" (as for the kernel size of PyTorch's pooling);
    Python sees ``Union[int, List[int]]`` (torch's own ``BroadcastingList2[int]`` is None at run time), which
    the adapter's TorchScript fallback (``script_fallback``) declares to TorchScript."""

    def __getitem__(self, item_type):
        return Union[item_type, List[item_type]]


if TYPE_CHECKING:
    # What type checkers read: an item or a sequence of them (a tuple too, as users write (7, 7)), generic in the
    # item, so that BroadcastingList2[int] in a signature is Union[int, Sequence[int]], not an unknown name.
    _Item = TypeVar("_Item")
    BroadcastingList2 = Union[_Item, Sequence[_Item]]
else:
    BroadcastingList2 = _BroadcastingList2()


def to_numpy(t: Optional[torch.Tensor], op: str, name: str) -> Optional[np.ndarray]:
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


def to_torch(a: Optional[np.ndarray]) -> Optional[torch.Tensor]:
    if a is None:
        return None
    if is_bfloat16(a):
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _run_entry(spec: OpSpec, options: dict, tensors) -> Union[Tensor, Tuple[Optional[Tensor], ...]]:
    """The registry entry's function on NumPy views of ``tensors``, as tensors (the Function's forward)."""
    arrays = {name: to_numpy(t, spec.name, name) for name, t in zip(spec.arrays, tensors)}
    out = spec.forward(**arrays, **options)
    if spec.outputs == 1:
        return to_torch(out)
    return tuple(to_torch(o) for o in out)


def _save_call(ctx, spec: OpSpec, options: dict, tensors) -> None:
    """What the Function's backward reads: the entry, its options with defaults filled in (the pullbacks read
    them) and the tensors."""
    ctx.spec = spec
    ctx.options = spec.bind((), dict(dict.fromkeys(spec.arrays), **options))[1]
    ctx.save_for_backward(*tensors)
    ctx.set_materialize_grads(False)  # a None cotangent stays None (zeros) down to the kernels


# PyTorch 2's functorch transforms (torch.func: grad, vjp, vmap, jacrev) take an autograd.Function whose forward
# has no ctx and whose setup_context saves what backward reads; PyTorch 1.13 knows only forward(ctx, ...).
_FUNCTORCH_READY = hasattr(torch.autograd.Function, "setup_context")


# (Named as before this module existed: users see it in grad_fn, `_SpatialgradFunctionBackward`.)
class _SpatialgradFunction(torch.autograd.Function):
    """One autograd Function for every registry entry (forwards, backwards, second-order kernels).

    Its backward applies the entry's pullback call (``_registry``) as another _SpatialgradFunction, so with
    ``create_graph=True`` the backward is itself recorded and differentiable: the linear operators to any
    order, the operators with second-order kernels to second order (a third derivative raises a clear error).
    Under ``torch.func.vmap`` (PyTorch 2) it calls the entry once per sample.
    """

    if _FUNCTORCH_READY:
        @staticmethod
        def forward(spec: OpSpec, options: dict, *tensors: Optional[torch.Tensor]):
            return _run_entry(spec, options, tensors)

        @staticmethod
        def setup_context(ctx, inputs, output):
            _save_call(ctx, inputs[0], inputs[1], inputs[2:])

        @staticmethod
        def vmap(info, in_dims, spec: OpSpec, options: dict, *tensors: Optional[torch.Tensor]):
            # One call per sample, stacked: the NumPy entries take no batch dimension of their own.
            samples = [_SpatialgradFunction.apply(spec, options, *(
                t if dim is None or t is None else t.select(dim, b) for t, dim in zip(tensors, in_dims[2:])))
                for b in range(info.batch_size)]
            if spec.outputs == 1:
                return torch.stack(samples), 0
            stacked = tuple(None if column[0] is None else torch.stack(column) for column in zip(*samples))
            return stacked, tuple(None if t is None else 0 for t in stacked)
    else:
        @staticmethod
        def forward(ctx, spec: OpSpec, options: dict, *tensors: Optional[torch.Tensor]):
            _save_call(ctx, spec, options, tensors)
            return _run_entry(spec, ctx.options, tensors)

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


def apply(name: str, tensors: Sequence[torch.Tensor], options: dict) -> torch.Tensor:
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


# Whether the native operators loaded (spatialgrad.torch.native starts as this; the adapters read that one).
native = _load_native()
if native:
    # spatialgrad's NumPy calls in this process run on PyTorch's pool as well: on the threads PyTorch's own calls
    # use, rather than on our pool's beside PyTorch's OpenMP threads, which spin for a while after each of its
    # calls (libgomp's default) and took a core from our worker. A forked child goes back to our pool.
    from .. import _torch_ops
    _core._use_host_executor(_torch_ops.pool_executor())


def fake(name: str) -> Callable[[Callable], Callable]:
    """Registers the decorated function as the fake kernel of ``torch.ops.spatialgrad.<name>`` (when the native
    operators loaded): what ``torch.compile``, ``torch.export`` and ``FakeTensor`` run instead of the CPU kernel,
    and what a meta tensor runs. It returns tensors of the sizes, dtype and strides the CPU kernel returns, without
    reading data; its sizes may be symbolic (``torch.compile(dynamic=True)``), so a size is computed with integer
    operations only. The CPU kernel checks the arguments when the call runs; the C++ core's
    ``<op>_output_shape`` computes the same sizes (tests compare them). PyTorch 2.4 and later take it through
    ``torch.library.register_fake``; 1.13 as the Meta kernel."""

    def register(function: Callable) -> Callable:
        qualname = f"spatialgrad::{name}"
        if native and not torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "Meta"):
            if hasattr(torch.library, "register_fake"):
                torch.library.register_fake(qualname, function)
            elif hasattr(torch.library, "impl_abstract"):  # PyTorch 2.1-2.3
                torch.library.impl_abstract(qualname, function)
            else:
                _meta_library().impl(name, function, "Meta")
        return function

    return register


@functools.lru_cache(maxsize=None)
def _meta_library():
    """The Library holding the fake kernels as Meta kernels where torch.library has no register_fake (1.13)."""
    return torch.library.Library("spatialgrad", "IMPL")


def empty_like_kernel(like: Tensor, shape, channels_last: bool = False) -> Tensor:
    """A fake kernel's output: ``like``'s dtype and device, contiguous or channels_last, as the CPU kernels
    allocate them (``new_output`` in csrc/torch/common.cpp)."""
    format = torch.channels_last if channels_last else torch.contiguous_format
    return torch.empty(list(shape), dtype=like.dtype, device=like.device, memory_format=format)


def is_channels_last(t: Tensor) -> bool:
    """Whether the CPU kernels run ``t`` in NHWC: 4-D, channels_last and not also contiguous
    (``is_channels_last`` in csrc/torch/common.cpp)."""
    return t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)


class NativeOperator(NamedTuple):
    """An operator's two ways in: ``entry``, its typed pybind11 entry in ``spatialgrad._torch_ops`` (eager calls:
    torch.ops' generic argument matching cost 2 us of a 5 us call on tiny tensors), and ``op``,
    ``torch.ops.spatialgrad.<name>`` (what torch.compile and torch.export trace: TorchDynamo cannot look into a
    pybind11 function, it would break the graph there; and what torch.fx's Proxy reaches)."""
    entry: Callable
    op: Callable


def native_operator(name: str) -> Optional[NativeOperator]:
    """``name``'s NativeOperator, or None without the native operators."""
    if not native:
        return None
    from .. import _torch_ops
    return NativeOperator(getattr(_torch_ops, name), getattr(torch.ops.spatialgrad, name))


# torch.compiler.is_compiling (PyTorch 2.3 and later): True while TorchDynamo traces (torch.compile, torch.export).
is_compiling: Callable[[], bool] = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


def try_native(operator: NativeOperator, *args) -> Optional[Tensor]:
    """The native operator's result for ``args``, or None where the operator does not take them (types its entry
    does not convert, a tensor not on the CPU) or raises: the Python path then runs and raises today's error, with
    today's exception type (PyTorch has no OverflowError). While TorchDynamo traces, the call of ``torch.ops``,
    which it records (its errors are the operator's). (A function of its own: TorchScript parses the adapters,
    and has no try.)"""
    if is_compiling():
        return operator.op(*args)
    if not _threads_followed:  # spatialgrad.get_num_threads() in a DataLoader worker, as on the Python path
        _follow_torch_threads_in_workers()
    try:
        return operator.entry(*args)
    except TypeError:
        if torch.overrides.has_torch_function(args):  # torch.fx's Proxy, tensor subclasses: torch.ops hands
            return operator.op(*args)  # them to __torch_function__
        return None
    except RuntimeError:
        return None


def ints(value, both: bool = False):
    """A number as a one-entry list (the core's messages then echo what the user passed), or as two entries
    with ``both``; lists and tuples as they are; None as [] (or None with ``both``: "not given")."""
    if value is None:
        return None if both else []
    if isinstance(value, (list, tuple)):
        return value
    return [value, value] if both else [value]


def script_fallback(adapter: Callable[..., Tensor]) -> Callable[..., Tensor]:
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


def script_branch(adapter: Callable[..., Tensor], native_script: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """What a scripted function or module calling ``adapter`` runs: its ``is_scripting()`` branch compiles only
    the call of ``_<name>_from_script``, which is this. With the native operators, ``native_script``: TorchScript
    compiles it into the scripted model, which then calls torch.ops.spatialgrad.* and runs without Python (a
    torch.jit.save file loads wherever libspatialgrad_torch is loaded); its arguments arrive as the adapter's
    annotations say (an int or a pair as a list of two) and the operators check them. Without them, the adapter
    itself, ignored by TorchScript (torch.jit.ignore: TorchScript calls back into Python, where the adapter runs
    in eager mode), so such scripted models work in Python but, saved with torch.jit.save, cannot run these
    calls outside Python."""
    return native_script if native else script_fallback(adapter)


def public(*functions: Callable) -> Tuple[Callable, ...]:
    """An operator module's ``PUBLIC``: the functions spatialgrad.torch exports from it, in order, the adapter
    first. They keep the module users reach them in, ``spatialgrad.torch`` (help(), pickle, and the qualified
    names in TorchScript code: ``__torch__.spatialgrad.torch.<name>``), wherever they are defined."""
    for function in functions:
        function.__module__ = package.__name__
    return functions
