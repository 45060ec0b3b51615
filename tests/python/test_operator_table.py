"""The table of operators (spatialgrad._registry.OPERATORS) drives every Python layer: one entry per operator."""
import inspect
from typing import List, Union

import pytest

torch = pytest.importorskip("torch")

import spatialgrad as sg  # noqa: E402
import spatialgrad.torch as sgt  # noqa: E402
from spatialgrad._registry import OPERATORS, OPS  # noqa: E402
from spatialgrad.autograd import differentiable_ops  # noqa: E402

NAMES = [operator.name for operator in OPERATORS]


def test_every_function_of_the_table_is_exported_as_registered():
    functions = [spec.name for operator in OPERATORS for spec in operator.functions]
    assert sg.functional.__all__ == functions and set(functions) <= set(sg.__all__)
    for name in functions:
        assert getattr(sg, name) is getattr(sg.functional, name) is OPS[name].forward
    assert set(differentiable_ops()) == {name for name in functions if OPS[name].pullback is not None}


def test_every_operator_has_a_torch_adapter_and_patch_lists_the_patched_ones():
    assert sgt.__all__[:len(NAMES)] == NAMES
    assert all(callable(getattr(sgt, name)) for name in NAMES)
    assert sgt.OPERATORS == tuple(operator.name for operator in OPERATORS if operator.patched)


@pytest.mark.parametrize("name", NAMES)
def test_torchscript_fallback_declares_the_adapters_arguments(name):
    """The fallback is generated from the adapter: same parameters, every one typed, none defaulted."""
    adapter = inspect.signature(getattr(sgt, name))
    fallback = inspect.signature(getattr(sgt, name).__globals__[f"_{name}_from_script"])
    assert list(fallback.parameters) == list(adapter.parameters)
    for parameter in fallback.parameters.values():
        assert parameter.annotation not in (None, type(None), inspect.Parameter.empty), parameter
        assert parameter.default is inspect.Parameter.empty, parameter


def test_broadcast_arguments_are_annotated_as_an_int_or_a_list():
    """torch's BroadcastingList2[int] is None at run time; the adapters' annotations say what they accept."""
    parameters = inspect.signature(sgt.avg_pool2d).parameters
    assert parameters["kernel_size"].annotation == Union[int, List[int]]
    assert inspect.signature(sgt.roi_align).parameters["output_size"].annotation == Union[int, List[int]]


def test_a_scripted_call_passes_every_argument_to_the_adapter():
    @torch.jit.script
    def deform(value, shapes, starts, locations, weights):
        # type: (Tensor, Tensor, Tensor, Tensor, Tensor) -> Tensor
        return sgt.ms_deform_attn(value, shapes, starts, locations, weights, 16)

    args = (torch.rand(1, 12, 2, 4), torch.tensor([[3, 4]]), torch.tensor([0]), torch.rand(1, 5, 2, 1, 2, 2),
            torch.rand(1, 5, 2, 1, 2))
    torch.testing.assert_close(deform(*args), sgt.ms_deform_attn(*args))


def test_type_checkers_see_the_functions_of_the_table():
    """functional/__init__.py names the functions for type checkers, which cannot run the table."""
    import ast

    tree = ast.parse(inspect.getsource(sg.functional))
    block = next(node for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))
    imported = {(node.module, alias.name) for node in block.body if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    assert imported == {(OPS[name].forward.__wrapped__.__module__.rsplit(".", 1)[1], name) for name in OPS}


@pytest.mark.parametrize("module_name", ["spatialgrad.torch", "spatialgrad.torch.nn"])
def test_type_checkers_see_what_the_torch_operator_list_exports(module_name):
    """spatialgrad.torch and its nn build their exports from the list of operator modules at run time; the
    TYPE_CHECKING imports name the same objects, from the modules that define them, for type checkers."""
    import ast
    import importlib

    module = importlib.import_module(module_name)
    # spatialgrad.torch reads its names for type checkers from _operators (generated from operators.toml).
    source = importlib.import_module("spatialgrad.torch._operators") if module_name == "spatialgrad.torch" else module
    tree = ast.parse(inspect.getsource(source))
    block = next(node for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))
    imported = {(node.module, alias.name) for node in block.body if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    exported = [getattr(module, name) for name in module.__all__ if name not in ("patch", "OPERATORS", "nn")]
    # Where each is defined: a function's globals; a class's (its __module__ is the public one), its forward's.
    defined_in = [(obj.forward if isinstance(obj, type) else obj).__globals__["__name__"] for obj in exported]
    assert imported == {(where.rsplit(".", 1)[1], obj.__name__) for where, obj in zip(defined_in, exported)}


def test_each_layer_imports_every_operator_module_in_the_tables_order():
    """functional/__init__.py and torch/_operators.py import each operator's module by name (so that the import
    graph, tests/python/test_import_graph.py, sees them): every operator file of each layer, none forgotten."""
    from pathlib import Path

    from spatialgrad.torch import _operators

    def operator_files(package):
        return {p.stem for p in Path(package.__file__).parent.glob("*.py") if p.stem != "__init__"}

    order = sg.functional.OPERATOR_MODULES
    assert set(order) == {n for n in operator_files(sg.functional) if not n.startswith("_")}
    assert [m.__name__ for m in _operators.MODULES] == [f"spatialgrad.torch._{n}" for n in order]
    assert {f"_{n}" for n in order} <= operator_files(sgt)
