"""Would this call run on an Ascend NPU? The rules of the aclnn operators per chip, checked on the CPU.

spatialgrad accepts more than the NPU does (float64, bicubic grid_sample gradients, float16 RoIAlign, ...).
:func:`check` lists what one call would hit on a chip; :func:`strict` makes every spatialgrad call (NumPy,
``spatialgrad.torch`` and its ``nn`` modules) raise :class:`AscendCompatibilityError` where the NPU rejects the
call and warn :class:`AscendCompatibilityWarning` where it runs but computes differently. The rules live in one
table in the C++ core (``csrc/src/ascend_rules.cpp``), shared with the C API's ``SPATIALGRAD_ASCEND_CHIP``;
``docs/ascend.md`` lists them with their CANN sources. Checking never changes a result.

>>> import spatialgrad.ascend as ascend
>>> [f.rule for f in ascend.check("grid_sampler_2d_backward", g, x, grid, mode="bicubic", chip="910B")]
['interpolationMode 0 (bilinear) or 1 (nearest), not bicubic (2)']
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import math
import operator
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from . import _core
from .bfloat16 import is_bfloat16
from . import _strict
from ._registry import OPS

__all__ = ["check", "strict", "chips", "validated_chip", "rules", "Finding", "AscendCompatibilityError",
           "AscendCompatibilityWarning"]


class AscendCompatibilityError(ValueError):
    """A call the NPU would reject (ACLNN_ERR_PARAM_INVALID); ``findings`` lists every rule it breaks.

    A ``ValueError``, raised by spatialgrad calls inside :func:`strict` before anything is computed.

    Example::

        try:
            with spatialgrad.ascend.strict("910B"):
                spatialgrad.roi_align_backward(np.ones((1, 1, 2, 2)), np.array([[0, 0, 0, 3.0, 3.0]]),
                                               (1, 1, 4, 4), 2, 2, 1.0, 2, True)  # float64: not on the NPU
        except spatialgrad.ascend.AscendCompatibilityError as error:
            print(error.findings[0].rule)  # dtype float32
    """

    def __init__(self, message: str, findings: List["Finding"]):
        super().__init__(message)
        self.findings = findings


class AscendCompatibilityWarning(UserWarning):
    """A call the NPU would run, but computing something other than spatialgrad does.

    A ``UserWarning``, issued by spatialgrad calls inside :func:`strict` (the result here is unchanged).

    Example::

        import warnings
        with warnings.catch_warnings(record=True) as caught, spatialgrad.ascend.strict("910B", rejected="warn"):
            warnings.simplefilter("always")
            spatialgrad.roi_align_backward(np.ones((1, 1, 2, 2)), np.array([[0, 0, 0, 3.0, 3.0]]),
                                           (1, 1, 4, 4), 2, 2, 1.0, 2, True)
        print([str(w.message) for w in caught])  # with rejected="warn", rejections warn too
    """


@dataclass(frozen=True)
class Finding:
    """One rule a call breaks on a chip, as :func:`check` returns it.

    Attributes: ``op`` (the spatialgrad function), ``chip``, ``rule`` (what the NPU requires), ``argument``
    (the aclnn argument tested; ``"chip"`` when the operator does not exist on the chip), ``value`` (its value
    in the call), ``source`` (the CANN source file of the rule), ``rejects`` (True: the NPU refuses the call
    with status 161002; False: it runs but computes differently) and ``message`` (a sentence saying all this).

    Example::

        x, grid = np.random.rand(1, 1, 4, 4), np.zeros((1, 2, 2, 2))
        finding = spatialgrad.ascend.check("grid_sampler_2d_backward", np.ones((1, 1, 2, 2)), x, grid,
                                           mode="bicubic")[0]
        print(finding.argument, finding.value, finding.rejects)  # interpolationMode 2 True
    """

    op: str
    chip: str
    rule: str  # what the NPU requires
    argument: str  # the aclnn argument tested ("chip" when the operator does not exist on the chip)
    value: Any  # its value in this call
    source: str  # the CANN source file of the rule
    rejects: bool  # True: the NPU refuses the call (161002); False: it runs but computes differently
    message: str

    def __str__(self) -> str:
        return self.message


def chips() -> List[str]:
    """The chip names the rules know: '910', '910B', '910_93', '310P', '950'.

    Example::

        assert "910B" in spatialgrad.ascend.chips()
    """
    return list(_core.ascend_chips())


def validated_chip(chip: str) -> str:
    """``chip`` if it is a known chip name; a ValueError listing the known ones otherwise.

    Example::

        spatialgrad.ascend.validated_chip("910B")  # "910B"; "910C" would raise ValueError
    """
    _core.ascend_validate_chip(chip)
    return chip


def rules() -> List[Dict[str, Any]]:
    """Every rule of the table, as dicts with ``op``, ``chips``, ``argument``, ``rule``, ``source`` and ``rejects``.

    Example::

        bicubic = [r for r in spatialgrad.ascend.rules() if r["argument"] == "interpolationMode"]
        print(bicubic[0]["rule"], bicubic[0]["chips"])
    """
    return [dict(op=op, chips=list(on), argument=argument or "chip", rule=text, source=source, rejects=rejects)
            for (op, argument, text, source, rejects), on in _core.ascend_rules()]


# ---- the quantities the rules test, per operator, from the NumPy function's arguments ------------------

def _dtype(array) -> Optional[str]:
    if is_bfloat16(array):
        return "bfloat16"
    name = array.dtype.name
    return name if name in ("float16", "float32", "float64") else None  # the operator reports other dtypes


def _pair(value) -> Tuple[int, int]:
    """An int or a sequence of 1 or 2 ints (NumPy integers too) as (first, last)."""
    try:
        values = [operator.index(value)]
    except TypeError:
        values = [operator.index(v) for v in value]
    return values[0], values[-1]


def _grid_sampler_2d_backward(a: Dict[str, Any]) -> Dict[str, Any]:
    from ._args import GRID_INTERPOLATION
    if not any(bool(m) for m in a["output_mask"]):
        return {}  # the op_api returns before checking anything when no gradient is asked for
    mode = a["mode"]
    return dict(dtype=_dtype(a["input"]), interpolationMode=GRID_INTERPOLATION.get(mode, mode))


def _ms_deform_attn_backward(a: Dict[str, Any]) -> Dict[str, Any]:
    bs, queries, heads, levels, points, _ = a["sampling_locations"].shape
    return dict(dtype=_dtype(a["value"]), channels=a["value"].shape[3], num_heads=heads, num_levels=levels,
                num_queries=queries, num_points=points)


def _roi_align_backward(a: Dict[str, Any]) -> Dict[str, Any]:
    return dict(dtype=_dtype(a["grad_output"]), samplingRatio=int(a["sampling_ratio"]),
                spatialScale=float(a["spatial_scale"]))


def _upsample_bilinear2d_backward(a: Dict[str, Any]) -> Dict[str, Any]:
    h_axis = 1 if str(a["layout"]).upper() == "NHWC" else 2
    out_hw, in_hw = _pair(a["output_size"]), (a["input_size"][h_axis], a["input_size"][h_axis + 1])
    if tuple(a["grad_output"].shape) == tuple(a["input_size"]):
        return {}  # the op_api checks nothing more (not even the dtype) when nothing is resized
    facts = dict(dtype=_dtype(a["grad_output"]))
    scales = (a["scales_h"] or 0.0, a["scales_w"] or 0.0)
    if max(abs(s) for s in scales) > 1e-9:  # a scale given: both axes are compared (a zero scale fails)
        for axis, name in enumerate(("inputH*scalesH", "inputW*scalesW")):
            facts[f"outputSize[{axis}]"] = out_hw[axis]
            facts[f"floor({name})"] = math.floor(in_hw[axis] * scales[axis])
    return facts


def _avg_pool2d_backward(a: Dict[str, Any]) -> Dict[str, Any]:
    kernel, padding = _pair(a["kernel_size"]), _pair(a["padding"])
    facts = {"dtype": _dtype(a["input"]), "kernelSize[0]": kernel[0], "kernelSize[1]": kernel[1],
             "padding[0]": padding[0], "padding[1]": padding[1]}
    if a["divisor_override"]:
        facts["divisorOverride"] = int(a["divisor_override"])
    return facts


# The operators with rules: each backward is an aclnn operator. The forwards and second-order kernels
# have none here (their NPU counterparts are other operators, not in the table).
_FACTS: Dict[str, Callable[[Dict[str, Any]], Dict[str, Any]]] = {
    "grid_sampler_2d_backward": _grid_sampler_2d_backward,
    "ms_deform_attn_backward": _ms_deform_attn_backward,
    "roi_align_backward": _roi_align_backward,
    "upsample_bilinear2d_backward": _upsample_bilinear2d_backward,
    "avg_pool2d_backward": _avg_pool2d_backward,
}


def _findings(op: str, chip: str, arguments: Dict[str, Any]) -> List[Finding]:
    extract = _FACTS.get(op)
    facts = {k: v for k, v in (extract(arguments) if extract else {}).items() if v is not None}
    found = []
    for (_, argument, text, source, rejects), number, message in _core.ascend_check(op, chip, facts):
        value = facts.get(argument, number) if argument else chip
        found.append(Finding(op, chip, text, argument or "chip", value, source, rejects, message))
    return found


@functools.lru_cache(maxsize=None)
def _signature(op: str) -> inspect.Signature:
    if op not in OPS:
        raise ValueError(f"ascend.check(): expected the name of a spatialgrad function "
                         f"({', '.join(OPS)}), but got {op!r}")
    return inspect.signature(OPS[op].forward)


def check(op_name: str, *args, chip: str = "910B", **kwargs) -> List[Finding]:
    """The rules of the Ascend operator behind ``spatialgrad.<op_name>`` that this call breaks on ``chip``.

    Args:
        op_name: a NumPy function of spatialgrad, e.g. ``"grid_sampler_2d_backward"``.
        *args, **kwargs: the arguments that function takes.
        chip: one of :func:`chips`.

    Returns:
        The findings (``rule``, ``argument``, ``value``, ``source``, ``rejects``); empty when the NPU would run
        the call as spatialgrad does. Nothing is computed.

    Raises:
        ValueError: an unknown operator or chip. TypeError: arguments the function does not take.

    Example::

        g, grid = np.ones((1, 12, 2, 2), np.float32), np.zeros((1, 2, 2, 2), np.float32)
        x = np.random.rand(1, 12, 4, 4).astype(np.float32)
        print([f.rule for f in spatialgrad.ascend.check("grid_sampler_2d_backward", g, x, grid, mode="bicubic")])
        assert spatialgrad.ascend.check("grid_sampler_2d_backward", g, x, grid, mode="bilinear") == []
    """
    validated_chip(chip)
    bound = _signature(op_name).bind(*args, **kwargs)
    bound.apply_defaults()
    return _findings(op_name, chip, dict(bound.arguments))


# ---- strict(): every call checked -------------------------------------------------------------------

_lock = threading.Lock()


@dataclass(frozen=True, eq=False)  # eq=False: two contexts with the same chip are two checks
class _Check:
    chip: Optional[str]
    raise_rejected: bool


# Every strict() context active now, in the order entered. The state each NumPy function reads is the latest
# one's, so that contexts left out of order (threads) leave no check behind: restoring what each one found when
# it entered would put back a check whose context has ended.
_active_checks: List[_Check] = []


def _apply_latest_check() -> None:
    latest = _active_checks[-1] if _active_checks else _Check(None, True)
    _strict.chip, _strict.raise_rejected = latest.chip, latest.raise_rejected


def _enforce(op: str, arguments: Dict[str, Any]) -> None:
    """Called by every NumPy function while strict() is active (through _strict.py, which holds it)."""
    chip, raise_rejected = _strict.chip, _strict.raise_rejected
    if chip is None:
        return
    try:
        found = _findings(op, chip, arguments)
    except (TypeError, ValueError, AttributeError, IndexError, KeyError):
        return  # arguments the operator itself rejects: its own error follows
    rejected = [f for f in found if f.rejects]
    if rejected and raise_rejected:
        more = f" (and {len(rejected) - 1} more, listed in .findings)" if len(rejected) > 1 else ""
        raise AscendCompatibilityError(rejected[0].message + more, found)
    for finding in found:
        warnings.warn(AscendCompatibilityWarning(finding.message), stacklevel=4)


_strict.check = _enforce


@contextlib.contextmanager
def strict(chip: str = "910B", rejected: str = "raise") -> Iterator[None]:
    """Checks every spatialgrad call against ``chip``'s rules while active (process-wide, like ``patch()``).

    A call the NPU rejects raises :class:`AscendCompatibilityError` (``rejected="warn"``: warns instead, so
    that one run lists every such call); one it computes differently warns :class:`AscendCompatibilityWarning`.
    Contexts nest, and may be left in any order and from any thread: the check of the latest entered context
    still active applies, and none once every context has been left. Raises ValueError for an unknown chip or
    ``rejected`` value.

    Example::

        with spatialgrad.ascend.strict("910B"):
            image, grid = np.random.rand(1, 1, 4, 4), np.random.rand(1, 2, 2, 2) * 2 - 1
            spatialgrad.grid_sample(image.astype(np.float32), grid.astype(np.float32))  # passes: no rule broken
    """
    validated_chip(chip)
    if rejected not in ("raise", "warn"):
        raise ValueError(f"ascend.strict(): expected rejected to be 'raise' or 'warn', but got {rejected!r}")
    check = _Check(chip, rejected == "raise")
    with _lock:
        _active_checks.append(check)
        _apply_latest_check()
    try:
        yield
    finally:
        with _lock:
            _active_checks.remove(check)  # this one (checks compare by identity), wherever it is
            _apply_latest_check()
