"""The command line: ``python -m corvid.notebook {run,edit,clean,to-ipynb,from-ipynb,to-html} FILE``.

Exit status: 0 on success; 1 when a cell failed (its outputs and traceback are written to the
file, a report goes to stderr); 2 for a usage error or a missing or malformed file; 3 when the
file changed while it ran (an editor saved it), so nothing was written. ``edit`` serves until
Ctrl-C and returns 0 (2 when its port is taken or its kernel's packages are missing).
"""

from __future__ import annotations

import argparse
import sys

from . import clean, edit, from_ipynb, run, to_html, to_ipynb, watch
from .runner import RunReport, files_dir
from .watch import CHANGED_DURING_RUN


def _report(report: RunReport) -> int:
    name = report.path.name
    if not report.written:
        print(f"{name}: the file changed while its cells ran; outputs not written (run it again)", file=sys.stderr)
        return CHANGED_DURING_RUN
    if report.failed is not None:
        rest = report.cells - report.failed
        print(f"\n{name}: cell {report.failed} (line {report.line}) failed:\n{report.error}\n\n"
              f"{name}: outputs of cells 1-{report.failed} written, with the error under cell {report.failed}"
              + (f"; {'the cell' if rest == 1 else f'the {rest} cells'} after it did not run and show no outputs"
                 if rest else ""),
              file=sys.stderr)
        return 1
    images = f", {report.images} image{'s' * (report.images != 1)} in {files_dir(report.path).name}/" \
        if report.images else ""
    print(f"{name}: {report.cells} cells ran in {report.seconds:.1f} s; outputs written{images}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m corvid.notebook",
                                     description="Run markdown notebooks (```python blocks are cells) and write "
                                                 "their outputs into the file.")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("run", help="run every cell in order; write the outputs under the cells")
    p.add_argument("file")
    p.add_argument("--watch", action="store_true", help="run again each time its cells or text change (Ctrl-C stops)")
    p.add_argument("--interval", type=float, default=0.5, help="with --watch: seconds between checks (0.5)")
    p.add_argument("--max-runs", type=int, default=None, help="with --watch: stop after this many runs")
    p.add_argument("--quiet", action="store_true", help="do not echo the cells' output and progress to the terminal")
    p = commands.add_parser("edit", help="edit and run it in the browser (a local server; Ctrl-C stops it)")
    p.add_argument("file")
    p.add_argument("--port", type=int, default=0, help="the port on 127.0.0.1 (default: a free one)")
    p.add_argument("--no-browser", action="store_true", help="print the address without opening a browser")
    p.add_argument("--autosave", type=float, default=2.0,
                   help="seconds after an edit before the page saves by itself (2; 0: only on Ctrl+S)")
    p.add_argument("--verbose", action="store_true", help="log every request to stderr")
    p = commands.add_parser("clean", help="remove the outputs and the images runs wrote")
    p.add_argument("file")
    for name, what in (("to-ipynb", ".ipynb, for Jupyter"), ("from-ipynb", "a markdown notebook"),
                       ("to-html", "one self-contained HTML page (images inline), to share")):
        p = commands.add_parser(name, help=f"convert to {what}")
        p.add_argument("file")
        p.add_argument("-o", "--output", default=None, help="the file to write (default: the same name, new extension)")
    args = parser.parse_args(argv)

    try:
        if args.command == "run" and args.watch:
            return watch(args.file, interval=args.interval, max_runs=args.max_runs, quiet=args.quiet)
        if args.command == "run":
            return _report(run(args.file, echo=not args.quiet))
        if args.command == "edit":
            return edit(args.file, port=args.port, open_browser=not args.no_browser, autosave=args.autosave,
                        verbose=args.verbose)
        if args.command == "clean":
            count = clean(args.file)
            print(f"{args.file}: outputs of {count} cell{'s' * (count != 1)} removed", file=sys.stderr)
            return 0
        convert = {"to-ipynb": to_ipynb, "from-ipynb": from_ipynb, "to-html": to_html}[args.command]
        print(f"wrote {convert(args.file, args.output)}", file=sys.stderr)
        return 0
    except ValueError as e:  # a malformed notebook
        print(f"corvid.notebook: {args.file}: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ImportError) as e:
        print(f"corvid.notebook: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # edit: the port is taken
        print(f"corvid.notebook: {args.file}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
