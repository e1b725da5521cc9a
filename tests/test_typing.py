"""The public API is typed: every function and method arrpos exports annotates each parameter and
its return, the annotations resolve, and each ``Literal`` lists exactly the choices the
docstring documents (``layout : {"half", "interleaved"}``) and the validation accepts."""
from __future__ import annotations

import inspect
import re
import typing

import pytest

import arrpos
import arrpos.typing as at


def _public_callables():
    """``(qualified name, function)`` for each function of ``arrpos.__all__`` and, for each
    class, its constructor, ``__call__`` and public methods and properties defined in arrpos
    (inherited ones from an arrpos base class included; ``tuple``'s and ``object``'s not)."""
    found = []
    for name in sorted(arrpos.__all__):
        obj = getattr(arrpos, name)
        if inspect.isfunction(obj):
            found.append((name, obj))
        elif inspect.isclass(obj):
            for attr, value in inspect.getmembers_static(obj):
                if attr.startswith("_") and attr not in ("__init__", "__call__"):
                    continue
                if isinstance(value, (staticmethod, classmethod)):
                    value = value.__func__
                elif isinstance(value, property):
                    value = value.fget
                if inspect.isfunction(value) and value.__module__.startswith("arrpos"):
                    found.append((f"{name}.{attr}", value))
    return found


PUBLIC = _public_callables()


def test_the_walk_finds_the_api():
    names = {q for q, _ in PUBLIC}
    assert {"sinusoidal", "RoPE.__init__", "RoPE.apply", "RoPE.from_hf_config",
            "YarnScaling.frequencies", "YarnScaling.from_config", "PositionScale.__call__",
            "DiffusersPositions.head_dim", "CoordAugmentation.__init__"} <= names
    assert len(PUBLIC) > 100


@pytest.mark.parametrize("qualname, fn", PUBLIC, ids=[q for q, _ in PUBLIC])
def test_public_callable_is_annotated(qualname, fn):
    sig = inspect.signature(fn)
    missing = [p.name for p in sig.parameters.values()
               if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty]
    if sig.return_annotation is inspect.Signature.empty:
        missing.append("return")
    assert not missing, f"{qualname} lacks annotations: {', '.join(missing)}"


@pytest.mark.parametrize("qualname, fn", PUBLIC, ids=[q for q, _ in PUBLIC])
def test_annotations_resolve(qualname, fn):
    """Postponed annotations are strings: each must name something the module imports."""
    hints = typing.get_type_hints(fn)
    assert "return" in hints


def _literal_choices(hint):
    """The strings of the ``Literal`` inside ``hint`` (``Literal[...] | None`` included)."""
    if typing.get_origin(hint) is typing.Literal:
        return {a for a in typing.get_args(hint) if isinstance(a, str)}
    found = set()
    for arg in typing.get_args(hint):
        found |= _literal_choices(arg)
    return found


LITERALS = [(q, fn, p) for q, fn in PUBLIC for p, h in typing.get_type_hints(fn).items()
            if p != "return" and _literal_choices(h)]


def test_literal_parameters_found():
    assert {(q, p) for q, _, p in LITERALS} >= {("apply_rope", "layout"), ("alibi_bias", "mode"),
                                                 ("grid_coords", "mode"), ("sinusoidal", "layout"),
                                                 ("properties", "metric")}


@pytest.mark.parametrize("qualname, fn, param", LITERALS,
                         ids=[f"{q}-{p}" for q, _, p in LITERALS])
def test_literal_matches_the_docstring(qualname, fn, param):
    choices = _literal_choices(typing.get_type_hints(fn)[param])
    doc = inspect.getdoc(fn) or ""
    if qualname.endswith(".__init__"):  # a class documents its constructor
        doc = inspect.getdoc(getattr(arrpos, qualname.split(".")[0])) or ""
    line = re.search(rf"^\s*(?:\w+, )*{param}(?:, \w+)* : \{{(.*?)\}}", doc, re.M)
    assert line, f"{qualname}: no '{param} : {{...}}' line in the docstring"
    documented = set(re.findall(r'"([^"]+)"', line.group(1)))
    assert documented == choices, f"{qualname}({param}): docstring {documented}, type {choices}"


ALIAS_USERS = [
    (at.RopeLayout, "apply_rope", {"layout": "half"}),
    (at.SinusoidLayout, "sinusoidal", {"layout": "split"}),
    (at.GridMode, "grid_coords", {"mode": "index"}),
    (at.AlibiMode, "alibi_bias", {"mode": "causal"}),
]


def _call(name, **kwargs):
    import numpy as np

    calls = {
        "apply_rope": lambda **k: arrpos.apply_rope(np.ones((2, 4)), np.ones((2, 4)),
                                                    np.zeros((2, 4)), **k),
        "sinusoidal": lambda **k: arrpos.sinusoidal(3, 4, **k),
        "grid_coords": lambda **k: arrpos.grid_coords((2, 3), **k),
        "alibi_bias": lambda **k: arrpos.alibi_bias(arrpos.alibi_slopes(2), 3, 3, **k),
    }
    return calls[name](**kwargs)


@pytest.mark.parametrize("alias, name, kwargs", ALIAS_USERS, ids=[u[1] for u in ALIAS_USERS])
def test_alias_choices_are_what_the_function_accepts(alias, name, kwargs):
    """Every value of the alias is accepted and a value outside it is refused by name."""
    (param,) = kwargs
    for choice in typing.get_args(alias):
        _call(name, **{param: choice})
    with pytest.raises(ValueError, match=param):
        _call(name, **{param: "no-such-choice"})


def test_typing_module_exports():
    assert sorted(at.__all__) == sorted(at.__annotations__)  # every alias, nothing else
    assert at.Namespace is type(typing)  # a module, as xp= takes it
