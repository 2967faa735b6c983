"""The documentation site (``python -m docs``): it builds with warnings as errors, its tutorials
run, its links resolve, and its API reference lists every public name of corvid once.

The docstrings themselves (one per public name, each with an example that runs) are checked by
tests/test_docstrings.py."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import pathlib
import re
import subprocess
import sys

import pytest

import corvid as cv

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from docs import build, reference  # noqa: E402
from test_docstrings import PUBLIC_MODULES  # noqa: E402

HAVE_SPHINX = all(importlib.util.find_spec(m) is not None for m in ("sphinx", "myst_parser"))


def test_every_public_module_has_pages():
    covered = {p.module for p in reference.PAGES}
    assert set(PUBLIC_MODULES) | {"corvid.Tensor"} <= covered


@pytest.mark.parametrize("module", sorted({p.module for p in reference.PAGES}))
def test_every_public_name_is_on_one_page(module):
    listed: dict[str, list[str]] = {}
    for page in reference.PAGES:
        if page.module == module:
            for sec in reference.sections(page):
                for name in sec.names:
                    listed.setdefault(name, []).append(f"{page.slug}/{sec.title}")
    public = reference.public_names(module)
    assert sorted(set(public) - set(listed)) == [], f"public names of {module} on no page of docs/reference.py"
    assert sorted(set(listed) - set(public)) == [], f"names on the pages that {module} does not have"
    assert {n: w for n, w in listed.items() if len(w) > 1} == {}, "names listed twice"


def test_values_without_docstrings_are_described():
    """dtypes and constants cannot carry a docstring: the reference describes each."""
    missing = []
    for page in reference.PAGES:
        for sec in reference.sections(page):
            for name in sec.names:
                obj = reference._lookup(page.module, name)
                if reference._is_value(obj) and not reference.VALUES.get(f"{page.module}.{name}"):
                    missing.append(f"{page.module}.{name}")
    assert missing == []


def test_equivalents_are_real_names():
    """Every numpy equivalent the tables give exists; JAX's mirror numpy's; a PyTorch one is
    either in the recorded names or an explicit correction."""
    import numpy as np

    for page in reference.PAGES:
        for sec in reference.sections(page):
            for name in sec.names:
                np_name, torch_name, jax_name = reference.equivalents(page.module, name)
                if np_name:
                    target = np_name.replace("np.", "numpy.", 1).rsplit(".", 1)
                    owner = np.ndarray if target[0] == "numpy.ndarray" else importlib.import_module(target[0])
                    assert hasattr(owner, target[1]), np_name
                if jax_name.startswith("jnp."):
                    assert np_name, f"{page.module}.{name}: a jax.numpy name without the numpy one"


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed (an optional oracle)")
def test_recorded_pytorch_names_match_the_installed_torch():
    from docs import equivalents

    import torch

    if not torch.__version__.startswith("2.13"):
        pytest.skip(f"the names were recorded from torch 2.13, this is {torch.__version__}")
    assert equivalents.found() == equivalents.TORCH


def test_summaries_render_in_a_table():
    """The first sentence of each docstring goes into a markdown table: one line, no raw reST role."""
    for page in reference.PAGES:
        for sec in reference.sections(page):
            for name in sec.names:
                obj = reference._lookup(page.module, name)
                if reference._is_value(obj):
                    continue
                text = reference.summary(obj)
                assert text and "\n" not in text and not re.search(r"(?<![}\w]):\w+:`", text), (page.module, name, text)


def test_the_sources_have_no_broken_links(tmp_path):
    pages = build.stage(tmp_path / "src")
    reference.write_pages(tmp_path / "src" / "api")
    assert len(pages) >= 10
    assert build.check_links(tmp_path / "src") == []


def test_the_link_check_finds_broken_links(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\n## Part two\n\n[ok](b.md) [ok](#part-two) [ok](https://numpy.org)\n"
                                   "[bad](c.md) [bad](b.md#nowhere) [bad](../outside.md) [bad](file:///etc/passwd)\n"
                                   "```python\n[not a link](nowhere.md)\n```\n`[code](nowhere.md)`\n")
    (tmp_path / "b.md").write_text("# B\n")
    problems = build.check_links(tmp_path)
    assert [p.split(": ", 2)[1] for p in problems] == ["c.md", "b.md#nowhere", "../outside.md", "file:///etc/passwd"]


def test_every_tutorial_is_in_the_index():
    index = (ROOT / "docs" / "index.md").read_text()
    tutorials = sorted(p.stem for p in (ROOT / "docs" / "tutorials").glob("*.md"))
    assert len(tutorials) >= 9
    for t in tutorials:
        assert f"tutorials/{t}.md" in index and f"tutorials/{t}\n" in index, t


def test_every_setting_is_on_the_settings_page():
    """One name per setting: every CORVID_* variable the code reads is on docs/environment.md."""
    page = (ROOT / "docs" / "environment.md").read_text()
    read = set()
    for folder in ("corvid", "examples", "benchmarks", "tests"):
        for f in (ROOT / folder).rglob("*.py"):
            read |= set(re.findall(r"environ(?:\.get)?[\(\[]\s*\"(CORVID_\w+)\"", f.read_text()))
    assert read, "no setting found: the pattern is wrong"
    assert sorted(v for v in read if f"`{v}`" not in page) == []


@pytest.mark.skipif(not HAVE_SPHINX, reason='building the site needs Sphinx and MyST: pip install -e ".[docs]"')
def test_the_site_builds_with_warnings_as_errors_and_runs_every_tutorial(tmp_path):
    out = tmp_path / "html"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "docs", "--out", str(out), "-j", "2"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-10000:]
    assert (out / "index.html").is_file()
    # every tutorial ran: its page shows outputs written by this build
    for t in (ROOT / "docs" / "tutorials").glob("*.md"):
        html = (out / "tutorials" / f"{t.stem}.html").read_text()
        assert "highlight-output" in html or "highlight-result" in html, f"{t.name} shows no outputs"
    # every public name has its entry
    for page in reference.PAGES:
        html = (out / "api" / f"{page.slug}.html").read_text()
        for sec in reference.sections(page):
            for name in sec.names:
                if f"{page.module}.{name}" == "corvid.Tensor":  # its entry is on the Tensor page
                    continue
                assert f'id="{page.module}.{name}"' in html, f"{page.module}.{name} has no entry on api/{page.slug}"
    assert 'id="corvid.Tensor"' in (out / "api" / "tensor.html").read_text()


def test_docstring_modules_are_importable():
    for m in PUBLIC_MODULES:
        assert inspect.ismodule(importlib.import_module(m))
    assert cv.Tensor.__doc__
