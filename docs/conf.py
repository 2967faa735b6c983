"""Sphinx configuration of corvid's documentation site; build it with ``python -m docs``.

The builder (``docs/build.py``) copies these pages to a staging folder, writes the API reference
pages there from ``docs/reference.py`` and runs the tutorials (markdown notebooks) in it; this file
configures Sphinx for that folder."""

import os
import sys

project = "corvid"
author = "the corvid authors"
copyright = "the corvid authors"  # noqa: A001  (Sphinx's name)
try:
    from importlib.metadata import version as _version

    release = _version("corvid")
except Exception:  # a checkout that is not installed
    release = "dev"

extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # links to a section: [text](page.md#a-heading)
exclude_patterns = ["_build", "**/_build"]

# every cross-reference must resolve (-W turns a broken one into an error); names that appear in
# signatures but are not corvid's public API are listed here instead
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(typing|collections\.abc|types|numpy|np|os|pathlib|io|contextlib|dataclasses|enum)\..*"),
    (r"py:.*", r"(Any|Callable|Sequence|Iterable|Iterator|Mapping|Optional|Union|Literal|TypeVar|Self|T|K|V)"),
    (r"py:.*", r"(int|float|complex|bool|str|bytes|None|object|type|tuple|list|dict|set|slice|Ellipsis|ellipsis)"),
    (r"py:.*", r"(np\.ndarray|ndarray|Path|PathLike|TextIO|BinaryIO|Generator|Number|SupportsIndex)"),
    (r"py:.*", r"(DTypeLike|ShapeLike|Scalar|Device|DeviceLike|Axis|Shape|Key|PyTree|Params|Node)"),
    (r"py:.*", r"corvid\..*\._.*"),  # private helpers named in a signature's type
    (r"py:.*", r"matplotlib\..*|.*Axes|.*Figure"),
]
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
add_module_names = False
python_use_unqualified_type_names = True

html_theme = "alabaster"
html_title = f"corvid {release}"
html_theme_options = {"description": "arrays, autodiff and deep learning, compiled into fused kernels",
                      "fixed_sidebar": True, "page_width": "1180px", "sidebar_width": "240px"}
html_sidebars = {"**": ["about.html", "navigation.html", "relations.html", "searchbox.html"]}
html_static_path = ["_static"]
html_css_files = ["corvid.css"]
html_show_sourcelink = False



# --- references written in docstrings ---------------------------------------------------------------------
# A docstring names things as its module sees them (``:func:`conv``` in corvid/ops/conv.py,
# ``:func:`corvid.nn.losses.mse_loss```): a reference Sphinx cannot find as written is looked up
# as Python would, from the module the docstring was written in, then corvid's public modules. When
# the object is on a page of the API reference, the reference links there; when it is corvid's but
# internal (not on any page), it shows as code without a link; when no such object exists, the
# warning stands, and ``-W`` fails the build.

_public_index: dict[int, str] | None = None


def _documented() -> dict[int, str]:
    """id(object) -> the name the API reference documents it under (the first page wins)."""
    global _public_index
    if _public_index is None:
        from docs.reference import PAGES, _lookup, sections

        _public_index = {}
        for page in PAGES:
            for sec in sections(page):
                for name in sec.names:
                    obj = _lookup(page.module, name)
                    if isinstance(obj, property):
                        obj = obj.fget
                    if not isinstance(obj, (int, float, str, bool, type(None))):
                        _public_index.setdefault(id(obj), f"{page.module}.{name}")
    return _public_index


def _find(dotted: str):
    """The object ``dotted`` names (a module, then attributes), or None."""
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:
            continue
        try:
            for p in parts[cut:]:
                obj = getattr(obj, p)
        except AttributeError:
            return None
        return obj
    return None


def _resolve(app, env, node, contnode):
    import re
    import sys as _sys

    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.")
    written_in = []
    m = re.search(r"docstring of ([\w.]+)", node.source or "")
    if m:
        owner = m.group(1).split(".")
        written_in = [".".join(owner[:i]) for i in range(len(owner) - 1, 0, -1)]
    context = [c for c in (node.get("py:module"), node.get("py:class") and f"{node.get('py:module')}.{node.get('py:class')}") if c]
    candidates = [target] + [f"{c}.{target}" for c in written_in + context] + [f"corvid.{target}", f"corvid.Tensor.{target}"]
    head = target.split(".")[0]
    candidates += [f"{name}.{target}" for name, mod in sorted(_sys.modules.items())
                   if name.startswith("corvid") and mod is not None and hasattr(mod, head)]
    py = env.get_domain("py")

    def link(name):
        for role in ("obj", "func", "class", "meth", "attr", "data", "exc"):
            found = py.resolve_xref(env, node["refdoc"], app.builder, role, name, node, contnode)
            if found is not None:
                return found
        return None

    for dotted in candidates:
        if not dotted.startswith("corvid"):
            continue
        obj = _find(dotted)
        if obj is None:
            continue
        documented = _documented().get(id(obj.fget if isinstance(obj, property) else obj))
        found = link(documented) if documented else None
        if found is None and "." in target:  # a method of a documented class (autoclass :members:)
            owner = _documented().get(id(_find(dotted.rsplit(".", 1)[0])))
            found = link(f"{owner}.{dotted.rsplit('.', 1)[1]}") if owner else None
        return found if found is not None else contnode  # corvid's own, but internal: code, no link
    return None


def setup(app):
    from pygments.lexers.special import TextLexer

    for kind in ("output", "stderr", "result", "error"):  # corvid.notebook's output blocks
        app.add_lexer(kind, TextLexer)
    app.connect("missing-reference", _resolve)
