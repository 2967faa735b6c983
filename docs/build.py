"""Build the documentation site: ``python -m docs`` (from the repository root).

1. copy the pages (``docs/*.md``, ``docs/tutorials/``) and ``conf.py`` into a staging folder;
2. write the API reference pages there (``docs/reference.py``);
3. run every tutorial there with ``corvid.notebook`` (one process each, several at once), so the
   site shows outputs and figures that this build produced; a failing cell fails the build;
4. check the links between pages (relative links must name an existing page or file of the
   site; a link out of the site must be a public ``http(s)`` address);
5. run Sphinx (HTML, warnings as errors: a broken cross-reference, a docstring Sphinx cannot parse).

Needs the ``[docs]`` extra (``pip install -e ".[docs]"``: Sphinx and MyST). The site lands in
``docs/_build/html`` (``--out`` changes it); open ``index.html``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

DOCS = pathlib.Path(__file__).resolve().parent
ROOT = DOCS.parent
PAGES_GLOB = ("*.md", "tutorials/*.md")
EXAMPLE_FILES = ("mnist.md", "mnist.py", "frame.md")


class BuildError(RuntimeError):
    """The site did not build: what failed, and where."""


def stage(dest: pathlib.Path) -> list[pathlib.Path]:
    """Copy the sources into ``dest`` (emptied first); the markdown pages copied."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    shutil.copy(DOCS / "conf.py", dest / "conf.py")
    shutil.copytree(DOCS / "_static", dest / "_static")
    pages = []
    for pattern in PAGES_GLOB:
        for src in sorted(DOCS.glob(pattern)):
            out = dest / src.relative_to(DOCS)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, out)
            pages.append(out)
    # the end-to-end example: the MNIST notebook as its last run left it (training it takes
    # minutes, so the build shows those outputs rather than running it), with its script
    examples = dest / "examples"
    examples.mkdir()
    for name in EXAMPLE_FILES:
        shutil.copy(ROOT / "examples" / name, examples / name)
        if name.endswith(".md"):
            figures = ROOT / "examples" / f"{name[:-3]}_files"
            if figures.is_dir():
                shutil.copytree(figures, examples / figures.name)
            pages.append(examples / name)
    return pages


def tutorials(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted((folder / "tutorials").glob("*.md"))


def run_tutorials(paths: list[pathlib.Path], jobs: int = 2, echo=print) -> dict[str, float]:
    """Run each notebook in its own process; {name: seconds}. BuildError naming the failing cells."""
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))

    def one(path: pathlib.Path) -> tuple[pathlib.Path, float, subprocess.CompletedProcess]:
        t = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "corvid.notebook", "run", str(path)], env=env,
                              capture_output=True, text=True, timeout=900)
        return path, time.perf_counter() - t, done

    times, failed = {}, []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for path, seconds, done in pool.map(one, paths):
            times[path.name] = seconds
            echo(f"  {path.name}: {seconds:.1f} s" + ("" if done.returncode == 0 else "  FAILED"))
            if done.returncode != 0:
                failed.append(f"{path.name}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    if failed:
        raise BuildError("tutorials failed:\n" + "\n".join(failed))
    return times


_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~)")


def _links(text: str) -> list[tuple[int, str]]:
    """(line, target) of every markdown link and image outside code blocks and inline code."""
    out, in_code = [], False
    for i, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line.lstrip()):
            in_code = not in_code
            continue
        if in_code:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        for m in _LINK.finditer(line):
            out.append((i, m.group(1) or m.group(2)))
    return out


def _anchors(text: str) -> set[str]:
    """The heading anchors MyST makes (``myst_heading_anchors``): lowercase, punctuation dropped,
    spaces to dashes."""
    out = set()
    for line in text.splitlines():
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


def check_links(folder: pathlib.Path) -> list[str]:
    """Problems with the links of the site's markdown pages under ``folder`` (empty: none)."""
    problems = []
    for page in sorted(folder.rglob("*.md")):
        if "_build" in page.relative_to(folder).parts:
            continue
        text = page.read_text()
        for line, target in _links(text):
            where = f"{page.relative_to(folder)}:{line}: {target}"
            if re.match(r"^https?://", target):
                if re.match(r"^https?://(localhost|127\.|0\.0\.0\.0|\[::1\])", target):
                    problems.append(f"{where}: a link to this machine")
                continue
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                problems.append(f"{where}: not a public http(s) address")
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            try:
                dest.relative_to(folder.resolve())
            except ValueError:
                problems.append(f"{where}: leaves the site")
                continue
            if not dest.exists():
                problems.append(f"{where}: no such page or file")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text()):
                problems.append(f"{where}: no heading with the anchor #{anchor}")
    return problems


def sphinx(src: pathlib.Path, out: pathlib.Path, strict: bool = True) -> None:
    try:
        from sphinx.cmd.build import build_main
    except ImportError:
        raise BuildError('building the site needs Sphinx and MyST: pip install -e ".[docs]"') from None
    args = ["-b", "html", "-q", "-j", "1", str(src), str(out)]
    if strict:
        args[:0] = ["-W", "--keep-going"]
    code = build_main(args)
    if code != 0:
        raise BuildError(f"Sphinx failed (exit {code}); its warnings are above")


def build(out: pathlib.Path | None = None, run: bool = True, strict: bool = True, jobs: int = 2,
          echo=print) -> pathlib.Path:
    """Build the site into ``out`` (default ``docs/_build/html``); returns the path of its index page."""
    from . import reference

    out = out or DOCS / "_build" / "html"
    src = out.parent / "src"
    t = time.perf_counter()
    stage(src)
    reference.write_pages(src / "api")
    echo(f"staged the pages and wrote {len(reference.PAGES)} API pages in {time.perf_counter() - t:.1f} s")
    if run:
        notebooks = tutorials(src)
        pages = set(src.rglob("*.md"))
        echo(f"running {len(notebooks)} tutorials")
        run_tutorials(notebooks, jobs=jobs, echo=echo)
        for made in set(src.rglob("*.md")) - pages:  # files a tutorial wrote (its demo notebooks): not pages
            made.unlink()
    problems = check_links(src)
    if problems:
        raise BuildError("broken links:\n  " + "\n  ".join(problems))
    if (out / ".buildinfo").is_file():  # a site this builder made: start afresh (no stale pages)
        shutil.rmtree(out)
    t = time.perf_counter()
    sphinx(src, out, strict=strict)
    echo(f"Sphinx: {time.perf_counter() - t:.1f} s")
    return out / "index.html"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m docs", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=pathlib.Path, help="where the HTML goes (default docs/_build/html)")
    p.add_argument("--no-run", action="store_true", help="do not run the tutorials (their code shows without outputs)")
    p.add_argument("--no-strict", action="store_true", help="warnings do not fail the build")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="tutorials run at once")
    a = p.parse_args(argv)
    try:
        index = build(a.out, run=not a.no_run, strict=not a.no_strict, jobs=a.jobs)
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"the site: {index}")
    return 0
