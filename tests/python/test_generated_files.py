"""The operator table, operators.toml, and what is made from it: the generated files are fresh (never edited by
hand), and the table agrees with the code of every layer."""
import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import spatialgrad as sg
from spatialgrad import _core

ROOT = Path(__file__).resolve().parents[2]
TABLE = tomllib.loads((ROOT / "operators.toml").read_text(encoding="utf-8"))
OPERATORS = TABLE["operators"]


def generator():
    spec = importlib.util.spec_from_file_location("generate_operators", ROOT / "scripts" / "generate_operators.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_files_are_fresh():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "generate_operators.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("path", sorted(generator().GENERATED))
def test_a_generated_file_says_so_in_its_first_line(path):
    first = (ROOT / path).read_text(encoding="utf-8").splitlines()[0]
    comment = "//" if path.endswith((".h", ".cpp")) else "#"
    assert first == f"{comment} {generator().HEADER}"


def test_the_table_is_the_numpy_layers_list_in_its_order():
    assert list(OPERATORS) == list(sg.functional.OPERATOR_MODULES)
    for operator, module in zip(OPERATORS.values(), sg.functional.OPERATORS):
        assert operator["functional"] == [spec.name for spec in module.functions]


def test_every_core_function_of_the_table_is_bound():
    for name, operator in OPERATORS.items():
        for signature in operator["core"]:
            function = signature.split("(", 1)[0]
            assert callable(getattr(_core, function, None)), f"{name}: _core has no {function}"
            # The stub's arguments are the binding's (pybind11 writes them in the docstring's first line).
            stub_arguments = [a.split(":")[0].strip() for a in generator().split_arguments(signature.split("(", 1)[1]
                                                                                                 .rsplit(") -> ", 1)[0])]
            bound = re.findall(r"(\w+): ", getattr(_core, function).__doc__.splitlines()[0].split("(", 1)[1])
            assert bound == stub_arguments, function


def test_each_operator_has_its_file_in_every_layer_and_its_ascend_declaration():
    headers = "".join(p.read_text() for p in (ROOT / "csrc" / "aclnn" / "include" / "aclnnop").glob("*.h"))
    for name, operator in OPERATORS.items():
        for path in (f"csrc/include/spatialgrad/{name}.h", f"csrc/src/{name}.cpp", f"csrc/python/{name}.cpp",
                     f"python/spatialgrad/functional/{name}.py", f"python/spatialgrad/torch/_{name}.py",
                     f"tests/cpp/test_{name}.cpp", f"tests/python/test_{name}.py"):
            assert (ROOT / path).is_file(), path
        # Every operator of this library has the C API and a native PyTorch operator (both optional in the table).
        assert "ascend" in operator and "native" in operator, name
        assert (ROOT / f"csrc/aclnn/{name}.cpp").is_file() and (ROOT / f"tests/cpp/test_aclnn_{name}.cpp").is_file()
        assert (ROOT / f"csrc/torch/{name}.cpp").is_file(), name
        assert f"aclnnStatus {operator['ascend']['name']}GetWorkspaceSize(" in headers, operator["ascend"]["name"]


def test_the_tables_torch_functions_are_the_adapters_modules_public_ones():
    pytest.importorskip("torch")
    from spatialgrad.torch import _operators

    assert [m.__name__ for m in _operators.MODULES] == [f"spatialgrad.torch._{name}" for name in OPERATORS]
    for operator, module in zip(OPERATORS.values(), _operators.MODULES):
        assert operator["torch"] == [function.__name__ for function in module.PUBLIC]


def test_the_native_operators_are_registered_with_the_tables_schemas():
    torch = pytest.importorskip("torch")
    import spatialgrad.torch as sgt

    if not sgt.native:
        pytest.skip("the native operators are not built here")
    for name, operator in OPERATORS.items():
        registered = str(getattr(torch.ops.spatialgrad, name).default._schema)
        assert registered == f"spatialgrad::{operator['native']}", name
