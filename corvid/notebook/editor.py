"""The notebook editor: ``python -m corvid.notebook edit FILE.md`` serves a page that edits and runs
a markdown notebook in the browser.

The page (``static/``: plain JavaScript modules, nothing fetched from elsewhere) edits a list
of blocks: paragraphs of prose, each a part of the file between blank lines, and the cells. This
server is the notebook's other half: it splits the file into those blocks, renders their HTML
(:mod:`corvid.notebook.html`: the same renderer as the export), runs cells in a
:class:`~corvid.notebook.kernel.Kernel`, keeps each cell's outputs as the kernel streams them
(the page long-polls ``/api/poll`` and sees a ``print`` within a fraction of a second), and
saves: the blocks joined back into the file exactly as they were split (a save with no edit
rewrites nothing), the outputs written as ``run`` writes them (:func:`document.render_outputs`,
images as ``<stem>_files/cellN_K.png``), the file replaced atomically. A save is refused (409)
when the file changed on disk since it was read or last saved: the page offers to reload it,
and overwrites only when asked to.

Safe by default, as Jupyter's server: it listens on 127.0.0.1 only; the address it prints
carries a random token, which the first request trades for a cookie (``SameSite=Strict``,
``HttpOnly``); state-changing requests must also carry the token in a header (so no other site
can post to it); a request whose ``Host`` is not this server's (DNS rebinding) or that comes
from another origin is refused; ``/files/`` serves the notebook's folder only (no ``..``, no
hidden files, no link out of it), as downloads that cannot run script in the editor's origin.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import html
import http.cookies
import http.server
import json
import mimetypes
import os
import pathlib
import re
import secrets
import signal
import socket
import sys
import threading
import urllib.parse
import webbrowser
from typing import Any

from .. import _files as files
from .document import _FENCE, Cell, Notebook, Output, _closes, _fence_for, parse
from .html import STATIC, highlight_python, render_markdown, render_outputs
from .kernel import Kernel, KernelError
from .runner import _ANSI, IMAGE_NAME, _outputs, _terminal_text, files_dir, write_atomic

__all__ = ["EditorServer", "edit", "join_blocks", "split_blocks"]

MAX_BODY = 64 * 1024 * 1024  # bytes in one request (a save of a notebook with its sources; images stay here)
MAX_STREAM = 1 << 18  # characters of one stream's text kept before it is cut as run cuts it (MAX_LINES)
POLL_SECONDS = 20.0  # the longest a poll waits for news before answering "nothing new"
DISK_CHECK_SECONDS = 0.5  # how often the file on disk is checked for a change made elsewhere
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SEP = re.compile(r"^[ \t\n]*$")


def _new_id() -> str:
    return secrets.token_hex(6)


def _paragraphs(text: str) -> tuple[str, list[tuple[str, str]]]:
    """Split markdown between two cells into (leading blank lines, [(paragraph, separator)]): a
    paragraph runs to a blank line outside a fenced block or an HTML comment, and its separator
    is the line end and blank lines after it, so ``lead + "".join(p + s)`` is ``text``."""
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    lead, out = "".join(lines[:i]), []
    while i < len(lines):
        start, fence, comment = i, None, False
        while i < len(lines) and (lines[i].strip() or fence or comment):
            line = lines[i].rstrip("\n")
            m = _FENCE.match(line)
            if fence is not None:
                fence = None if _closes(line, fence) else fence
            elif comment:
                comment = "-->" not in line
            elif m:
                fence = m.group(2)
            elif line.lstrip().startswith("<!--"):
                comment = "-->" not in line
            i += 1
        content = "".join(lines[start:i])
        blank = start = i
        while i < len(lines) and not lines[i].strip():
            i += 1
        if content.endswith("\n"):
            out.append((content[:-1], "\n" + "".join(lines[blank:i])))
        else:
            out.append((content, "".join(lines[blank:i])))
    return lead, out


def split_blocks(text: str) -> tuple[str, list[dict[str, Any]]]:
    """A notebook's text as the editor's blocks: ``(lead, blocks)``, ``lead`` the blank lines
    before the first block, each block a dict with ``type`` (``"text"`` or ``"code"``),
    ``source`` (a paragraph's markdown, or a cell's code) and ``sep`` (the whitespace after it);
    a code block also has ``cell``, the parsed :class:`~corvid.notebook.document.Cell`.
    ``join_blocks`` gives the text back. ValueError for a malformed notebook, as ``parse``.

    >>> lead, blocks = split_blocks("# Title\\n\\nIntro.\\n\\n```python\\nx = 1\\n```\\n\\nEnd.\\n")
    >>> [(b["type"], b["source"], b["sep"]) for b in blocks]
    [('text', '# Title', '\\n\\n'), ('text', 'Intro.', '\\n\\n'), ('code', 'x = 1\\n', '\\n'), ('text', 'End.', '\\n')]
    """
    lead, blocks = "", []
    for part in parse(text).parts:
        if isinstance(part, Cell):
            blocks.append({"type": "code", "source": part.source, "sep": "", "cell": part})
            continue
        leading, paragraphs = _paragraphs(part)
        if blocks:
            blocks[-1]["sep"] += leading
        else:
            lead += leading
        blocks += [{"type": "text", "source": source, "sep": sep} for source, sep in paragraphs]
    return lead, blocks


def _close_fences(text: str) -> str:
    """``text`` with a fenced block left open at its end closed, so that a ````` typed in a
    paragraph cannot turn the rest of the file into code."""
    fence = None
    for line in text.split("\n"):
        if fence is not None:
            fence = None if _closes(line, fence) else fence
        elif m := _FENCE.match(line):
            fence = m.group(2)
    return text if fence is None else text + "\n" + fence


def _fence(cell: Cell | None, source: str) -> str:
    """The cell's text in the file: as it was when its code is unchanged, else written anew."""
    if cell is not None and cell.source == source and cell.fence.endswith("\n"):
        return cell.fence
    info = "python"
    if cell is not None and (m := _FENCE.match(cell.fence.split("\n", 1)[0])):
        info = m.group(3).strip() or info
    fence = _fence_for(source)
    return f"{fence}{info}\n{source}{'' if source.endswith(chr(10)) or not source else chr(10)}{fence}\n"


def join_blocks(lead: str, blocks: list[dict[str, Any]]) -> str:
    """The file's text for ``blocks`` (as :func:`split_blocks` makes them; a code block's outputs
    in ``outputs``, a list of :class:`~corvid.notebook.document.Output`, else its ``cell``'s).
    Empty paragraphs are dropped, a fence a paragraph leaves open is closed, and separators are
    mended so that the file reads back as the same blocks: ``split_blocks(join_blocks(...))``.

    >>> text = "# Title\\n\\n```python\\nx = 1\\n```\\n\\nEnd.\\n"
    >>> join_blocks(*split_blocks(text)) == text
    True
    >>> lead, blocks = split_blocks(text)
    >>> blocks[2]["source"] = "End, with a fence:\\n```"
    >>> print(join_blocks(lead, blocks + [{"type": "text", "source": "", "sep": "\\n\\n"}]))
    # Title
    <BLANKLINE>
    ```python
    x = 1
    ```
    <BLANKLINE>
    End, with a fence:
    ```
    ```
    <BLANKLINE>
    """
    kept = [b for b in blocks if b["type"] == "code" or b["source"].strip()]
    parts: list[str | Cell] = []
    text = lead
    for i, block in enumerate(kept):
        following = kept[i + 1] if i + 1 < len(kept) else None
        sep = block["sep"]
        if not _SEP.match(sep):
            raise ValueError(f"a block's separator must be white space, got {sep!r}")
        if block["type"] == "text":
            text += _close_fences(block["source"].rstrip("\n"))
            if following is not None and sep.count("\n") < (2 if following["type"] == "text" else 1):
                sep = "\n\n"
            text += sep
            continue
        if text:
            parts.append(text)
        cell = block.get("cell")
        outputs = block.get("outputs", cell.outputs if cell is not None else [])
        source = block["source"]
        if source and not source.endswith("\n"):
            source += "\n"
        parts.append(Cell(source, _fence(cell, source), 0, list(outputs)))
        text = sep
    if text:
        parts.append(text)
    joined = Notebook(parts).render()
    return joined.rstrip("\n") + "\n" if joined.strip() else ""


@dataclasses.dataclass
class _CellState:
    """What the server knows of one cell: its outputs (images as keys of ``Session.images``), the
    raw events of its current run, its status and execution count, and when that last changed."""

    outputs: list[Output] = dataclasses.field(default_factory=list)
    events: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    status: str = "idle"
    count: int | None = None
    version: int = 0


class Conflict(Exception):
    """The file changed on disk since the editor read or saved it."""


class Session:
    """One open notebook: its blocks as last read, its cells' outputs, its kernel, its disk state."""

    def __init__(self, path: pathlib.Path):
        self.path = path.resolve()
        self.folder = self.path.parent
        self.images: dict[str, bytes] = {}
        self.cells: dict[str, _CellState] = {}
        self.fences: dict[str, Cell] = {}  # the cells as read, by id: their fences are kept when unchanged
        self.version = 0
        self.saved_version = 0
        self.outputs_version = 0  # the version of the last change to any cell's outputs
        self.kernel_state = "starting"
        self.disk_changed = False
        self.changed = threading.Condition()
        self.save_lock = threading.Lock()
        self.document = self.load()
        self.kernel = Kernel(self.path, self.on_event)

    def bump(self) -> int:
        """Note a change (callers hold ``self.changed``) and wake the polls."""
        self.version += 1
        self.changed.notify_all()
        return self.version

    def _disk(self) -> tuple[bytes | None, tuple[int, int] | None]:
        try:
            stat = self.path.stat()
            return self.path.read_bytes(), (stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            return None, None

    def load(self) -> dict[str, Any]:
        """Read the file: its blocks for the page. FileNotFoundError, or ValueError when malformed."""
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: no such notebook file")
        data, stat = self._disk()
        lead, blocks = split_blocks(data.decode("utf-8"))
        with self.changed:
            self.disk_hash, self.disk_stat, self.disk_changed = hashlib.sha256(data).hexdigest(), stat, False
            out = []
            for block in blocks:
                block_id = _new_id()
                if block["type"] == "code":
                    self.fences[block_id] = block["cell"]
                    self.cells[block_id] = _CellState([self._keep_image(o) for o in block["cell"].outputs],
                                                      version=self.bump())
                out.append(self.block_json(block_id, block))
            self.saved_version = self.bump()
        return {"name": self.path.name, "lead": lead, "blocks": out}

    def _keep_image(self, output: Output) -> Output:
        """An image output as read from the file, with its bytes kept under their hash."""
        if output.kind != "image":
            return output
        path = self.folder / urllib.parse.unquote(output.text)
        if not path.is_file():
            return Output("image", "missing:" + output.text)
        data = path.read_bytes()
        key = hashlib.sha256(data).hexdigest()[:32]
        self.images[key] = data
        return Output("image", key)

    def _link(self, url: str, image: bool) -> str:
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:|^[/#]", url):
            return url
        return "files/" + url

    def outputs_html(self, state: _CellState) -> str:
        def image_src(key: str) -> str:
            return self._link(key.removeprefix("missing:"), True) if key.startswith("missing:") else f"api/image/{key}"
        return render_outputs(state.outputs, image_src)

    def block_json(self, block_id: str, block: dict[str, Any]) -> dict[str, Any]:
        """A block as the page gets it: its source and separator, and its HTML."""
        out = {"id": block_id, "type": block["type"], "source": block["source"], "sep": block["sep"]}
        if block["type"] == "text":
            out["html"] = render_markdown(block["source"], self._link)
        else:
            out["html"] = highlight_python(block["source"])
        return out

    def cell_json(self, cell_id: str) -> dict[str, Any]:
        state = self.cells[cell_id]
        return {"status": state.status, "count": state.count, "outputs": self.outputs_html(state)}

    def on_event(self, cell_id: str | None, kind: str, payload: Any) -> None:
        """The kernel's events (see :class:`~corvid.notebook.kernel.Kernel`), folded into the cells' states."""
        with self.changed:
            if cell_id is None:
                self.kernel_state = payload
                self.bump()
                return
            state = self.cells.setdefault(cell_id, _CellState())
            if kind == "status":
                state.status = payload
                if payload == "running":
                    state.events, state.count = [], None
            elif kind == "count":
                state.count = payload
            elif kind == "clear":
                state.events = []
            elif kind == "image":
                key = hashlib.sha256(payload).hexdigest()[:32]
                self.images[key] = payload
                state.events.append(("image", key))
            elif kind == "error":
                state.events.append(("error", _terminal_text(payload)))
            elif kind in ("output", "stderr") and state.events and state.events[-1][0] == kind:
                text = state.events[-1][1] + payload  # one event per stream run: each update stays linear
                if len(text) > MAX_STREAM:  # a cell printing without end: keep what the file would keep
                    text = _terminal_text(text) + "\n"
                state.events[-1] = (kind, text)
            else:
                state.events.append((kind, _ANSI.sub("", payload) if kind == "result" else payload))
            state.version = self.bump()
            if kind != "status" or payload == "running":
                state.outputs = _outputs(state.events)
                self.outputs_version = state.version

    def run(self, cells: list[tuple[str, str]]) -> None:
        with self.changed:
            for cell_id, _ in cells:
                self.cells.setdefault(cell_id, _CellState())
        self.kernel.run(cells)

    def poll(self, since: int, timeout: float) -> dict[str, Any]:
        """What changed after version ``since``, waiting up to ``timeout`` seconds for a change."""
        with self.changed:
            self.changed.wait_for(lambda: self.version > since, timeout)
            cells = {cell_id: self.cell_json(cell_id) for cell_id, s in self.cells.items() if s.version > since}
            return {"version": self.version, "kernel": self.kernel_state, "cells": cells,
                    "disk_changed": self.disk_changed, "unsaved_outputs": self.outputs_version > self.saved_version}

    def check_disk(self) -> None:
        """Note a change of the file made by another program (its bytes differ from what was read or saved)."""
        if not self.save_lock.acquire(blocking=False):
            return  # a save is writing the file: its own write is no change made elsewhere
        try:
            self._check_disk()
        finally:
            self.save_lock.release()

    def _check_disk(self) -> None:
        try:
            st = self.path.stat()
            stat = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stat = None
        with self.changed:
            if stat == self.disk_stat or self.disk_changed:
                return
        data, stat = self._disk()
        with self.changed:
            self.disk_stat = stat
            if data is None or hashlib.sha256(data).hexdigest() != self.disk_hash:
                self.disk_changed = True
                self.bump()

    def save(self, lead: str, blocks: list[dict[str, Any]], force: bool = False) -> dict[str, Any]:
        """Write the blocks, with the cells' outputs, to the file and their images to ``<stem>_files/``.
        Conflict when the file changed on disk since it was read or saved (unless ``force``)."""
        with self.save_lock:
            data, _ = self._disk()
            with self.changed:
                if not force and (data is None or hashlib.sha256(data).hexdigest() != self.disk_hash):
                    raise Conflict(f"{self.path.name} changed on disk since the editor read it")
                version = self.version
                images, number, ready = {}, 0, []
                folder = files_dir(self.path)
                for block in blocks:
                    block = dict(block)
                    if block["type"] == "code":
                        number += 1
                        block["cell"] = self.fences.get(block["id"])
                        state = self.cells.get(block["id"], _CellState())
                        block["outputs"] = []
                        for o in state.outputs:
                            if o.kind == "image" and o.text.startswith("missing:"):
                                block["outputs"].append(Output("image", o.text.removeprefix("missing:")))
                            elif o.kind == "image":
                                name = f"cell{number}_{sum(x.kind == 'image' for x in block['outputs']) + 1}.png"
                                images[name] = self.images[o.text]
                                block["outputs"].append(Output("image", urllib.parse.quote(f"{folder.name}/{name}")))
                            else:
                                block["outputs"].append(o)
                    ready.append(block)
            text = join_blocks(lead, ready)
            if images:
                folder.mkdir(exist_ok=True)
            for name, image in images.items():
                target = folder / name
                if not target.is_file() or target.read_bytes() != image:
                    files.write_atomic(target, lambda f, image=image: f.write(image))
            write_atomic(self.path, text)
            if folder.is_dir():
                for f in folder.iterdir():
                    if IMAGE_NAME.match(f.name) and f.name not in images:
                        f.unlink()
                if not any(folder.iterdir()):
                    folder.rmdir()
            data, stat = self._disk()
            with self.changed:
                self.disk_hash, self.disk_stat, self.disk_changed = hashlib.sha256(data).hexdigest(), stat, False
                self.saved_version = version
                self.document = {"name": self.path.name, "lead": lead,
                                 "blocks": [self.block_json(b["id"], b) for b in ready]}
                for block in ready:  # the cells as now written: their fences are kept by the next save
                    if block["type"] == "code":
                        self.fences[block["id"]] = Cell(block["source"], _fence(block["cell"], block["source"]), 0)
                self.bump()
            return {"saved": True, "images": len(images), "bytes": len(data)}

    def render(self, kind: str, source: str) -> dict[str, Any]:
        """The HTML of an edited block; a paragraph is split again (a ```python block typed in it becomes a cell)."""
        if kind == "code":
            return {"html": highlight_python(source)}
        _, blocks = split_blocks(_close_fences(source.rstrip("\n")) + "\n")
        out = []
        for block in blocks:
            block_id = _new_id()
            if block["type"] == "code":
                with self.changed:
                    self.cells[block_id] = _CellState(version=self.bump())
            out.append(self.block_json(block_id, block))
        return {"blocks": out}


class _Handler(http.server.BaseHTTPRequestHandler):
    server: EditorServer
    timeout = 60  # seconds to send a request: a client that stalls cannot hold a thread for ever
    error_content_type = "text/plain; charset=utf-8"
    error_message_format = "%(code)d %(message)s: %(explain)s\n"

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def _send(self, status: int, body: bytes, kind: str, headers: dict[str, str] | None = None) -> None:
        headers = {"Cache-Control": "no-store", **(headers or {})}
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, value: Any) -> None:
        self._send(status, json.dumps(value).encode(), "application/json")

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": message})

    def _token_ok(self, query: dict[str, list[str]], header_only: bool = False) -> bool:
        token = self.server.token
        given = [self.headers.get("X-Corvid-Token", "")]
        if not header_only:
            cookie = http.cookies.SimpleCookie()
            try:
                cookie.load(self.headers.get("Cookie", ""))
            except http.cookies.CookieError:
                pass
            given += [cookie[self.server.cookie].value if self.server.cookie in cookie else "",
                      query.get("token", [""])[0]]
        return any(hmac.compare_digest(g.encode(), token.encode()) for g in given if g)

    def _refused(self, navigation: bool) -> str | None:
        """Why the request is refused (Host, Origin, cross-site), or None."""
        if self.headers.get("Host", "") not in self.server.hosts:
            return f"this server answers requests for {self.server.hosts[0]} only (Host header)"
        origin = self.headers.get("Origin")
        if origin is not None and origin not in self.server.origins:
            return f"requests from other origins ({origin}) are refused"
        site = self.headers.get("Sec-Fetch-Site")
        if site not in (None, "same-origin", "none") and not navigation:
            return "cross-site requests are refused"
        return None

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        route = url.path
        why = self._refused(navigation=method == "GET" and route == "/")
        if why is not None:
            return self._error(403, why)
        if method == "GET" and route == "/":
            return self._index(query)
        if not self._token_ok(query, header_only=method == "POST"):
            return self._error(403, "missing or wrong token: open the address `python -m corvid.notebook edit` "
                                    "printed (it carries the token)")
        try:
            if method == "GET":
                self._get(route, query)
            else:
                self._post(route)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the page went away
        except Exception as e:  # noqa: BLE001  (one bad request must not stop the server)
            self._error(500, f"{type(e).__name__}: {e}")

    def _index(self, query: dict[str, list[str]]) -> None:
        if "token" in query and self._token_ok(query):
            cookie = f"{self.server.cookie}={self.server.token}; Path=/; HttpOnly; SameSite=Strict"
            return self._send(303, b"", "text/plain", {"Location": "/", "Set-Cookie": cookie})
        if not self._token_ok({}):
            return self._send(403, b"<!DOCTYPE html><title>corvid notebook</title><p>This page needs its token: "
                                   b"open the address that <code>python -m corvid.notebook edit</code> printed.</p>",
                              "text/html; charset=utf-8")
        page = (STATIC / "editor.html").read_text(encoding="utf-8")
        page = page.replace("{{token}}", html.escape(self.server.token)).replace(
            "{{name}}", html.escape(self.server.session.path.name)).replace(
            "{{autosave}}", str(self.server.autosave))
        csp = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
               "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
        self._send(200, page.encode(), "text/html; charset=utf-8", {"Content-Security-Policy": csp})

    def _get(self, route: str, query: dict[str, list[str]]) -> None:
        session = self.server.session
        if route == "/api/notebook":
            return self._json(200, {**session.document, **self._states()})
        if route == "/api/poll":
            try:
                since = int(query.get("since", ["0"])[0])
                timeout = float(query.get("timeout", [POLL_SECONDS])[0])
            except ValueError:
                return self._error(400, "since: expected a whole number; timeout: a number of seconds")
            if not 0 <= timeout <= 60:
                return self._error(400, f"timeout: expected 0 to 60 seconds, got {timeout}")
            return self._json(200, session.poll(since, timeout))
        if route.startswith("/api/image/"):
            data = session.images.get(route.removeprefix("/api/image/"))
            if data is None:
                return self._error(404, "no such image")
            # named by their hash: the page's rebuilds reuse them instead of fetching them again
            return self._send(200, data, "image/png", {"Cache-Control": "private, max-age=86400, immutable"})
        if route.startswith("/static/"):
            return self._file(STATIC, route.removeprefix("/static/"), trusted=True)
        if route.startswith("/files/"):
            return self._file(session.folder, urllib.parse.unquote(route.removeprefix("/files/")), trusted=False)
        self._error(404, f"no such page: {route}")

    def _states(self) -> dict[str, Any]:
        session = self.server.session
        with session.changed:
            return {"version": session.version, "kernel": session.kernel_state,
                    "cells": {i: session.cell_json(i) for i in session.cells}, "disk_changed": session.disk_changed}

    def _file(self, root: pathlib.Path, relative: str, trusted: bool) -> None:
        parts = pathlib.PurePosixPath(relative).parts
        if not parts or any(p.startswith(".") or p in ("..", "/") or "\\" in p for p in parts):
            return self._error(404, "no such file (hidden files and paths out of the folder are not served)")
        root = root.resolve()
        path = (root / relative).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            return self._error(404, f"no such file in {root.name}/: {relative}")
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind in ("application/javascript", "application/json"):
            kind += "; charset=utf-8"
        headers = {}
        if not trusted:  # the folder's own files: never HTML or script in the editor's origin
            if any(t in kind for t in ("html", "xml", "javascript", "svg")):
                kind = "text/plain; charset=utf-8"
            headers["Content-Security-Policy"] = "sandbox; default-src 'none'; img-src 'self' data:"
        self._send(200, path.read_bytes(), kind, headers)

    def _body(self) -> dict[str, Any]:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise _BadRequest(411, "a POST needs a Content-Length") from None
        if length > MAX_BODY:
            raise _BadRequest(413, f"a request may carry at most {MAX_BODY} bytes, this one has {length}")
        try:
            value = json.loads(self.rfile.read(length) or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise _BadRequest(400, f"the body is not JSON: {e}") from None
        if not isinstance(value, dict):
            raise _BadRequest(400, "the body must be a JSON object")
        return value

    def _post(self, route: str) -> None:
        session = self.server.session
        try:
            body = self._body()
            if route == "/api/run":
                cells = [(_cell_id(c), _string(c, "source")) for c in _list(body, "cells")]
                session.run(cells)
                return self._json(200, {"queued": len(cells)})
            if route == "/api/interrupt":
                session.kernel.interrupt()
                return self._json(200, {"interrupted": True})
            if route == "/api/restart":
                session.kernel.restart()
                return self._json(200, {"restarted": True})
            if route == "/api/render":
                kind = body.get("type")
                if kind not in ("text", "code"):
                    raise _BadRequest(400, 'type: expected "text" or "code"')
                return self._json(200, session.render(kind, _string(body, "source")))
            if route == "/api/save":
                blocks = [_block(b) for b in _list(body, "blocks")]
                return self._json(200, session.save(_string(body, "lead"), blocks, force=body.get("force") is True))
            if route == "/api/reload":
                session.document = session.load()
                return self._json(200, {**session.document, **self._states()})
        except _BadRequest as e:
            return self._error(e.status, str(e))
        except Conflict as e:
            return self._json(409, {"error": str(e), "conflict": True})
        except (ValueError, FileNotFoundError, KernelError) as e:
            return self._error(400 if isinstance(e, ValueError) else 409 if isinstance(e, FileNotFoundError) else 503,
                               str(e))
        self._error(404, f"no such action: {route}")


class _BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _string(value: dict[str, Any], key: str) -> str:
    if not isinstance(value.get(key), str):
        raise _BadRequest(400, f"{key}: expected a string, got {type(value.get(key)).__name__}")
    return value[key]


def _list(value: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = value.get(key)
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise _BadRequest(400, f"{key}: expected a list of objects")
    return items


def _cell_id(value: dict[str, Any]) -> str:
    cell_id = _string(value, "id")
    if not _ID.match(cell_id):
        raise _BadRequest(400, f"id: expected 1 to 64 letters, digits, - or _, got {cell_id[:80]!r}")
    return cell_id


def _block(value: dict[str, Any]) -> dict[str, Any]:
    if value.get("type") not in ("text", "code"):
        raise _BadRequest(400, 'a block\'s type: expected "text" or "code"')
    sep = _string(value, "sep")
    if not _SEP.match(sep):
        raise _BadRequest(400, f"a block's sep must be white space, got {sep[:40]!r}")
    return {"id": _cell_id(value), "type": value["type"], "source": _string(value, "source"), "sep": sep}


class EditorServer(http.server.ThreadingHTTPServer):
    """The editor for the notebook at ``path``, listening on 127.0.0.1:``port`` (0: a free port).
    ``url`` is the address to open (it carries the token); ``start()`` serves in a thread and
    starts the kernel, ``close()`` stops both. ``autosave``: seconds after an edit before the page
    saves by itself (0: only on Ctrl+S). FileNotFoundError or ValueError (a malformed notebook)
    at once; OSError when the port is taken.

    >>> import pathlib, urllib.request
    >>> _ = pathlib.Path("nb.md").write_text("# Hi\\n")
    >>> server = EditorServer("nb.md")
    >>> server.url.startswith("http://127.0.0.1:"), "?token=" in server.url
    (True, True)
    >>> server.start()
    >>> browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    >>> browser.open(server.url).status   # the token is traded for a cookie, then the page
    200
    >>> server.close()
    """

    daemon_threads = True
    block_on_close = False

    def __init__(self, path: str | os.PathLike, *, port: int = 0, autosave: float = 2.0, verbose: bool = False):
        self.session = Session(pathlib.Path(path))
        self.token = secrets.token_urlsafe(32)
        self.autosave = autosave
        self.verbose = verbose
        super().__init__(("127.0.0.1", port), _Handler)
        port = self.server_address[1]
        self.hosts = [f"127.0.0.1:{port}", f"localhost:{port}"]
        self.origins = [f"http://{h}" for h in self.hosts]
        self.cookie = f"corvid-notebook-{port}"  # cookies ignore ports: one name per server
        self.url = f"http://127.0.0.1:{port}/?token={self.token}"
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        super().server_bind()

    def _watch_disk(self) -> None:
        while not self._stop.wait(DISK_CHECK_SECONDS):
            self.session.check_disk()

    def start(self) -> None:
        self.session.kernel.start()
        for target in (self.serve_forever, self._watch_disk):
            thread = threading.Thread(target=target, daemon=True, name=f"corvid-editor-{target.__name__}")
            thread.start()
            self._workers.append(thread)

    def close(self) -> None:
        self._stop.set()
        self.shutdown()
        self.server_close()
        self.session.kernel.shutdown()


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _can_open_browser() -> bool:
    """Whether a graphical browser can open (a console one would take over the terminal)."""
    return sys.platform in ("darwin", "win32") or bool(
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or os.environ.get("BROWSER"))


def edit(path: str | os.PathLike, *, port: int = 0, open_browser: bool = True, autosave: float = 2.0,
         verbose: bool = False) -> int:
    """Serve the editor for the notebook at ``path`` until Ctrl-C; print its address (and open it
    in the browser when ``open_browser`` and there is a graphical one). Returns 0.
    FileNotFoundError, ValueError (a malformed notebook) or OSError (the port is taken) at once,
    before anything is served:

    >>> cv.notebook.edit("no-such-notebook.md")
    Traceback (most recent call last):
    FileNotFoundError: .../no-such-notebook.md: no such notebook file
    """
    server = EditorServer(path, port=port, autosave=autosave, verbose=verbose)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops the kernel too, as Ctrl-C does
    server.start()
    print(f"corvid notebook editor for {server.session.path.name}: {server.url}\n(Ctrl-C stops it)", flush=True)
    if open_browser and _can_open_browser():
        threading.Thread(target=webbrowser.open, args=(server.url,), daemon=True).start()
    try:
        server._stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0
