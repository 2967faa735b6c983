"""Every public name of corvid has a docstring with an example, and every example runs.

The public names are those of the modules below (their ``__all__``, or what they define without a
leading underscore) and the methods and properties of ``Tensor``. A function or class needs its
own docstring with at least one ``>>>`` example; a ``Tensor`` method may instead be the method
form of a namespace function of the same name that has one (``x.sum()`` and ``cv.sum``).
Values that cannot carry a docstring (dtypes, ``cv.pi``) are described in the API reference
(``docs/reference.py``), whose test checks that.

Examples are run as doctests in the namespace of the module that defines the object, with ``cv``
(corvid) and ``np`` (numpy) added, whitespace-normalized and with ``...`` matching anything.
``+SKIP`` is refused: an example that cannot run here is not an example.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import os
import sys
import types

import numpy as np
import pytest

import corvid as cv

PUBLIC_MODULES = ["corvid", "corvid.linalg", "corvid.fft", "corvid.random", "corvid.amp", "corvid.nn",
                  "corvid.nn.functional", "corvid.nn.init", "corvid.optim", "corvid.optim.lr_scheduler",
                  "corvid.data", "corvid.plot", "corvid.notebook", "corvid.distributed", "corvid.models",
                  "corvid.nn.lora", "corvid.quant"]


def _module_names(mod: types.ModuleType) -> list[str]:
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [n for n in dir(mod) if not n.startswith("_")]
    return [n for n in names if not isinstance(getattr(mod, n), types.ModuleType)]


def public_objects() -> list[tuple[str, object]]:
    """(qualified name, object) of every public function, class, method and property."""
    out = []
    for mname in PUBLIC_MODULES:
        mod = importlib.import_module(mname)
        for n in _module_names(mod):
            obj = getattr(mod, n)
            if callable(obj) and not isinstance(obj, cv.DType):
                out.append((f"{mname}.{n}", obj))
    for n in dir(cv.Tensor):
        if not n.startswith("_"):
            out.append((f"corvid.Tensor.{n}", inspect.getattr_static(cv.Tensor, n)))
    return out


def _doc(obj: object) -> str:
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    return obj.__doc__ or "" if isinstance(obj, property) else inspect.getdoc(obj) or ""


def _own_doc(obj: object) -> str | None:
    """The docstring written for ``obj`` itself (not inherited from a base class)."""
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, types.MemberDescriptorType):  # a __slots__ attribute: its doc is the dict's value
        return inspect.getdoc(obj)
    return obj.__doc__ if isinstance(obj, property) else vars(obj).get("__doc__") if isinstance(obj, type) else obj.__doc__


def _globs(obj: object) -> dict:
    f = obj.fget if isinstance(obj, property) else getattr(obj, "__func__", obj)
    mod = sys.modules.get(getattr(f, "__module__", None) or "", cv)
    g = dict(vars(mod))
    g.update(cv=cv, np=np)
    return g


OBJECTS = public_objects()


def test_every_public_name_has_a_docstring():
    missing = [name for name, obj in OBJECTS if not (_own_doc(obj) or "").strip()]
    assert missing == [], f"{len(missing)} public names have no docstring: {missing}"


def test_every_public_name_has_an_example():
    namespace = {n: o for n, o in OBJECTS if n.count(".") == 1}  # corvid.<name>
    missing = []
    for name, obj in OBJECTS:
        if ">>>" in _doc(obj):
            continue
        if name.startswith("corvid.Tensor.") and ">>>" in _doc(namespace.get("corvid." + name.rsplit(".", 1)[1], None)):
            continue  # the method form of a namespace function that has one
        missing.append(name)
    assert missing == [], f"{len(missing)} public names have no example (a '>>>' line in the docstring): {missing}"


def _collected_by_doctest_modules() -> set[str]:
    """The docstrings ``pytest --doctest-modules`` (this suite's setting) runs already: those
    doctest's finder reaches from the corvid modules themselves."""
    import pkgutil

    texts = set()
    finder = doctest.DocTestFinder()
    for info in pkgutil.walk_packages(cv.__path__, "corvid."):
        try:
            mod = importlib.import_module(info.name)
        except Exception:  # an optional dependency missing: pytest skips that module too
            continue
        for t in finder.find(mod):
            if t.docstring:
                texts.add(t.docstring)
    return texts


def _examples() -> list[tuple[str, object]]:
    """Public examples that --doctest-modules does not reach (a method attached in a loop, a
    docstring set at run time); the others run there, once."""
    collected = _collected_by_doctest_modules()
    seen, out = set(), []
    for name, obj in OBJECTS:
        key = id(obj.fget if isinstance(obj, property) else getattr(obj, "__func__", obj))
        raw = (obj.fget if isinstance(obj, property) else getattr(obj, "__func__", obj)).__doc__ or ""
        if key not in seen and ">>>" in raw and raw not in collected:
            seen.add(key)
            out.append((name, obj))
    return out


EXAMPLES = _examples()


@pytest.mark.parametrize("name,obj", EXAMPLES, ids=[n for n, _ in EXAMPLES])
def test_docstring_example_runs(name, obj, monkeypatch, tmp_path):
    os.environ.setdefault("MPLBACKEND", "Agg")
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    text = _doc(obj)
    parser = doctest.DocTestParser()
    test = parser.get_doctest(text, _globs(obj), name, None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


def test_no_example_is_skipped():
    skipped = [name for name, obj in OBJECTS if "+SKIP" in _doc(obj)]
    assert skipped == [], "an example that cannot run here is not an example"
