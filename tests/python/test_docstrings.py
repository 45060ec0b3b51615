"""Every public name documents itself: a docstring that stands alone, with a runnable example.

Walks ``__all__`` of spatialgrad, spatialgrad.autograd, spatialgrad.torch and spatialgrad.torch.nn (and the
public methods of their classes) and fails on a missing docstring or example, a Sphinx reference (``:func:``,
``:data:``, ...) whose target does not exist, a private module named to the user, or a sentence that defers the
meaning to another library's documentation. The examples are run.
"""
import importlib
import inspect
import re
import textwrap
import types

import numpy as np
import pytest

from helpers import torch

MODULES = ["spatialgrad", "spatialgrad.autograd", "spatialgrad.ascend"] + (["spatialgrad.torch", "spatialgrad.torch.nn"] if torch else [])

# Phrases that send the reader elsewhere instead of explaining ("As mmcv: ...", "see torchvision's docs").
DEFERRALS = [r"\bAs (mmcv|torchvision|PyTorch|torch)\b", r"\bsee (the )?(mmcv|torchvision|pytorch|torch)\b",
             r"\bmodule documentation\b", r"\bsee the documentation\b"]
PRIVATE = r"\bspatialgrad(\.\w+)*\._\w+|\b_(core|registry|patch|args)\b"
REFERENCE = re.compile(r":(?:func|data|class|mod|meth|attr|obj):`~?([\w.]+)`")
EXAMPLE = re.compile(r"Example[^\n]*::\n((?:\n|[ \t]+[^\n]*\n)+)")


def _public_objects():
    """(qualified name, object, module) of every public name and of the public methods of public classes."""
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        yield module_name, module, module
        for name in module.__all__:
            obj = getattr(module, name)
            yield f"{module_name}.{name}", obj, module
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if not attr.startswith("_") and (inspect.isfunction(member) or isinstance(member, property)):
                        yield f"{module_name}.{name}.{attr}", member, module


PUBLIC = list(_public_objects())
DATA = [(q, o, m) for q, o, m in PUBLIC if not callable(o) and not isinstance(o, (types.ModuleType, property))]
DOCUMENTED = [(q, o, m) for q, o, m in PUBLIC if (q, o, m) not in DATA]
WITH_EXAMPLES = [(q, o, m) for q, o, m in DOCUMENTED
                 if (inspect.isclass(o) or callable(o)) and q.count(".") == m.__name__.count(".") + 1]


def _resolve(target: str, module):
    """The object a reference names: a dotted path from the top, or a name in the referring module."""
    for path in (target, f"{module.__name__}.{target}"):
        parts = path.split(".")
        for split in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:split]))
            except ImportError:
                continue
            try:
                for attr in parts[split:]:
                    obj = getattr(obj, attr)
                return obj
            except AttributeError:
                break
    return None


@pytest.mark.parametrize("qualname,obj,module", DOCUMENTED, ids=[q for q, _, _ in DOCUMENTED])
def test_has_a_docstring_that_stands_alone(qualname, obj, module):
    doc = inspect.getdoc(obj) or ""
    assert len(doc) >= 40, f"{qualname}: missing or one-word docstring"
    for reference in REFERENCE.findall(doc):
        assert _resolve(reference, module) is not None, f"{qualname}: dangling reference {reference!r}"
    assert not re.search(PRIVATE, doc), f"{qualname}: names a private module: {re.search(PRIVATE, doc)[0]!r}"
    for pattern in DEFERRALS:
        assert not re.search(pattern, doc, flags=re.I if pattern.startswith(r"\bsee") else 0), \
            f"{qualname}: defers to another documentation: {re.search(pattern, doc, flags=re.I)[0]!r}"


@pytest.mark.parametrize("qualname,obj,module", DATA, ids=[q for q, _, _ in DATA])
def test_data_is_described_by_its_module(qualname, obj, module):
    assert f"``{qualname.rsplit('.', 1)[1]}``" in (module.__doc__ or ""), f"{qualname}: not described"


@pytest.mark.parametrize("qualname,obj,module", WITH_EXAMPLES, ids=[q for q, _, _ in WITH_EXAMPLES])
def test_example_runs(qualname, obj, module):
    match = EXAMPLE.search((inspect.getdoc(obj) or "") + "\n")
    assert match, f"{qualname}: no 'Example::' block"
    namespace = {"np": np, "spatialgrad": importlib.import_module("spatialgrad")}
    if torch is not None:
        importlib.import_module("spatialgrad.torch.nn")  # spatialgrad.torch.nn.<name> in the examples
        namespace["torch"] = torch
    exec(compile(textwrap.dedent(match[1]), f"{qualname} example", "exec"), namespace)


def test_the_walk_finds_the_names_the_issue_lists():
    names = {q for q, _, _ in PUBLIC}
    assert {"spatialgrad.roi_align", "spatialgrad.autograd.vjp"} <= names
    if torch is not None:
        assert {"spatialgrad.torch.patch", "spatialgrad.torch.OPERATORS", "spatialgrad.torch.patch.start",
                "spatialgrad.torch.nn.MultiScaleDeformableAttention.forward"} <= names


def test_the_checks_catch_what_they_are_for():
    """The checks themselves fail on the faults they look for (so a passing run means something)."""
    import spatialgrad.autograd as module
    assert _resolve("spatialgrad.autograd.vjp", module) is not None
    assert _resolve("vjp", module) is not None
    assert _resolve("OPERATORS", module) is None
    assert re.search(PRIVATE, "see spatialgrad.torch._patch") and re.search(PRIVATE, "the _registry table")
    assert re.search(DEFERRALS[0], "As mmcv: query ...") and re.search(DEFERRALS[2], "See the module documentation")
    assert EXAMPLE.search("Example::\n\n    x = 1\n    y = 2\n")[1].strip() == "x = 1\n    y = 2"
