"""The editor's Python process: one IPython kernel per open notebook, through ``jupyter_client``
and ``ipykernel`` (the ``[notebook]`` extra), so variables live from cell to cell and a cell's
output arrives while it runs.

:class:`Kernel` owns the process and one worker thread that talks to it: cells queue up and run
in order, each message the kernel publishes becomes an event for the editor as it arrives (a
training loop's ``print`` appears within ipykernel's flush interval, 0.2 s), and a failing cell
cancels the cells queued behind it, as ``run`` stops at the first failure. Interrupt sends
SIGINT (KeyboardInterrupt in the cell); restart starts a fresh process and drops the queue.

The kernel starts in the notebook's folder (first on ``sys.path``, as ``run`` has it) with
matplotlib on its inline backend (``MPLBACKEND=module://matplotlib_inline.backend_inline``):
figures come back as PNG data when a cell ends or calls ``plt.show()``, and no window ever
opens. Tracebacks are IPython's plain ones, the closest to ``run``'s; a value that is a
matplotlib object (an Axes a plot call returns) is not shown, since its picture is, as in
``run``. The kernel talks to this process over Unix sockets in a private temporary folder on
POSIX (no TCP port for another local user to reach), over 127.0.0.1 elsewhere.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import pathlib
import queue
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from .runner import _ANSI

__all__ = ["Kernel", "KernelError"]

INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
POLL_SECONDS = 0.2  # how often a running cell checks that its kernel is alive and not being restarted

# Run (silently) in every fresh kernel: the folder, the traceback style, and matplotlib values hidden.
_SETUP = """
def _corvid_setup(folder, notebook):
    import os, sys
    ip = get_ipython()
    ip.run_line_magic("xmode", "Plain")
    os.chdir(folder)
    sys.path.insert(0, folder)
    sys.argv = [notebook]

    class DisplayHook(type(ip.displayhook)):
        def __call__(self, result=None):
            from corvid.notebook.runner import _is_matplotlib
            if result is None or not _is_matplotlib(result):
                return super().__call__(result)

    ip.displayhook.__class__ = DisplayHook

    def show_figures():
        # every figure left open, as `run` saves them: the inline backend's own hook shows only
        # figures drawn while matplotlib is interactive, which a plotting library's rc_context
        # can switch off
        pyplot = sys.modules.get("matplotlib.pyplot")
        inline = sys.modules.get("matplotlib_inline.backend_inline")
        if pyplot is not None and inline is not None and pyplot.get_fignums() \
                and pyplot.get_backend() == {backend!r}:
            inline.show(close=True)

    ip.events.register("post_execute", show_figures)

_corvid_setup({folder!r}, {notebook!r})
del _corvid_setup
"""

Event = Callable[[str | None, str, Any], None]


class KernelError(RuntimeError):
    """The kernel could not be started or restarted: what failed and what to do."""


def _jupyter_client() -> Any:
    try:
        import jupyter_client
        import jupyter_client.kernelspec
    except ImportError as e:
        raise KernelError('the notebook editor runs cells in a Jupyter kernel: pip install "corvid[notebook]" '
                          "(or pip install jupyter_client ipykernel)") from e
    return jupyter_client


class Kernel:
    """A persistent Python process for the notebook at ``notebook`` (its folder is the working
    directory). ``on_event(cell_id, kind, payload)`` receives, from the worker thread:

    * ``(None, "kernel", state)``: ``starting``, ``idle``, ``busy``, ``restarting`` or ``dead``;
    * ``(cell_id, "status", s)``: ``queued``, ``running``, ``ok``, ``error`` or ``cancelled``;
    * ``(cell_id, "count", n)``: the execution count (``In [n]``);
    * ``(cell_id, kind, text)`` for kind ``output`` (stdout), ``stderr``, ``result`` (the last
      expression's value) and ``error`` (a traceback, without colour codes); ``(cell_id, "image", png_bytes)``;
      ``(cell_id, "clear", None)`` when the cell clears its output.

    ``start()`` starts the process in the background; :meth:`run` queues cells; :meth:`shutdown`
    ends it. KernelError (through ``on_event(None, "kernel", "dead")`` and each queued cell's
    error) when jupyter_client or ipykernel is missing or the process does not start.

    >>> events = []
    >>> kernel = Kernel("nb.md", lambda cell, kind, payload: events.append((cell, kind, payload)))
    >>> kernel.start()
    >>> kernel.run([("a", "x = 6 * 7"), ("b", "print(x)")])
    >>> kernel.wait_idle(60)
    True
    >>> [(c, k, p) for c, k, p in events if k in ("output", "status") and c == "b"]
    [('b', 'status', 'queued'), ('b', 'status', 'running'), ('b', 'output', '42\\n'), ('b', 'status', 'ok')]
    >>> kernel.shutdown()
    """

    def __init__(self, notebook: str | os.PathLike, on_event: Event, *, startup_seconds: float = 60.0):
        self.notebook = pathlib.Path(notebook).resolve()
        self.folder = self.notebook.parent
        self.on_event = on_event
        self.startup_seconds = startup_seconds
        self.state = "starting"
        self._jobs: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._pending: list[str] = []  # queued cell ids, in order
        self._generation = 0  # bumped to cancel what is queued
        self._running: str | None = None
        # whether the kernel has begun the running cell (its execute_input came), and an interrupt
        # asked for before that: a SIGINT that reaches the kernel before it runs the cell's code
        # is lost (ipykernel ignores it between requests) and the cell then ran on regardless
        self._begun = False
        self._interrupt_asked = False
        self._interrupt_sent = False  # a SIGINT went to the kernel while this cell ran
        self._restarting = threading.Event()
        self._idle = threading.Event()
        self._manager: Any = None
        self._client: Any = None
        self._temp = tempfile.TemporaryDirectory(prefix="corvid-kernel-")
        self._log = pathlib.Path(self._temp.name) / "kernel.log"
        self._thread = threading.Thread(target=self._work, name=f"corvid-kernel-{self.notebook.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def run(self, cells: list[tuple[str, str]]) -> None:
        """Queue ``cells``, a list of ``(cell_id, source)``, to run in order after what is queued."""
        with self._lock:
            self._idle.clear()
            for cell_id, source in cells:
                self._pending.append(cell_id)
                self.on_event(cell_id, "status", "queued")
                self._jobs.put(("run", cell_id, source, self._generation))

    def interrupt(self) -> None:
        """Cancel the queued cells and raise KeyboardInterrupt in the running one."""
        self._cancel()
        with self._lock:
            if self._running is None or self._manager is None:
                return
            if not self._begun:  # (delivered when the kernel begins the cell: see _execute)
                self._interrupt_asked = True
                return
            self._interrupt_sent = True
        self._manager.interrupt_kernel()

    def restart(self, timeout: float = 60.0) -> None:
        """Cancel the queue, end the process (a running cell is stopped) and start a fresh one;
        returns when it is ready. KernelError when it does not start within ``timeout`` seconds."""
        self._cancel()
        done = threading.Event()
        self._restarting.set()
        self._jobs.put(("restart", done))
        if not done.wait(timeout):
            raise KernelError(f"the kernel did not restart within {timeout:.0f} s")
        if self.state == "dead":
            raise KernelError(f"the kernel did not restart: {self._log_tail()}")

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no cell runs or waits; False when ``timeout`` seconds passed first."""
        return self._idle.wait(timeout)

    def shutdown(self) -> None:
        """Cancel the queue and end the process and the worker thread."""
        self._cancel()
        self._jobs.put(("stop",))
        if self._running is not None and self._manager is not None:
            self._manager.interrupt_kernel()
        if self._thread.is_alive():
            self._thread.join(10)
        self._stop_process()
        self._temp.cleanup()

    def _cancel(self) -> None:
        with self._lock:
            self._generation += 1
            pending, self._pending = self._pending, []
            if self._running is None:
                self._idle.set()
        for cell_id in pending:
            self.on_event(cell_id, "status", "cancelled")

    def _set_state(self, state: str) -> None:
        self.state = state
        self.on_event(None, "kernel", state)

    def _log_tail(self, lines: int = 15) -> str:
        try:
            text = self._log.read_text(errors="replace").strip()
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(the kernel wrote nothing)"

    def _start_process(self) -> None:
        jupyter_client = _jupyter_client()
        temp = pathlib.Path(self._temp.name)
        spec = temp / "kernels" / "corvid"
        spec.mkdir(parents=True, exist_ok=True)
        # this interpreter, whatever "python3" kernel the user has installed elsewhere; no history
        # database (the notebook is the history, and kernels side by side would share its lock)
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}",
                     "--HistoryManager.enabled=False"],
            "display_name": "corvid", "language": "python"}))
        specs = jupyter_client.kernelspec.KernelSpecManager(kernel_dirs=[str(temp / "kernels")])
        ipc = os.name == "posix"
        manager = jupyter_client.KernelManager(kernel_name="corvid", kernel_spec_manager=specs,
                                               connection_file=str(temp / "connection.json"),
                                               transport="ipc" if ipc else "tcp",
                                               ip=str(temp / "socket") if ipc else "127.0.0.1")
        root = str(pathlib.Path(__file__).resolve().parents[2])  # the folder holding the corvid package
        env = {**os.environ, "MPLBACKEND": INLINE_BACKEND,
               "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        log = open(self._log, "ab")  # noqa: SIM115  (the kernel process writes to it as long as it lives)
        try:
            manager.start_kernel(cwd=str(self.folder), env=env, stdout=log, stderr=log)
        finally:
            log.close()
        client = manager.client()
        client.start_channels()
        self._manager, self._client = manager, client
        try:
            client.wait_for_ready(timeout=self.startup_seconds)
        except RuntimeError as e:
            raise KernelError(f"the kernel did not start: {e}\n{self._log_tail()}") from e
        setup = _SETUP.format(folder=str(self.folder), notebook=str(self.notebook), backend=INLINE_BACKEND)
        reply = client.execute(setup, silent=True,
                               store_history=False, reply=True, timeout=self.startup_seconds)
        if reply["content"]["status"] != "ok":
            raise KernelError(f"the kernel's setup failed: {reply['content'].get('evalue')}")

    def _stop_process(self) -> None:
        client, manager, self._client, self._manager = self._client, self._manager, None, None
        if client is not None:
            client.stop_channels()
        if manager is not None:
            with contextlib.suppress(Exception):  # already gone: nothing left to stop
                manager.shutdown_kernel(now=True)
            manager.cleanup_resources()

    def _ensure_process(self, restarting: bool = False) -> bool:
        """Start the process when there is none (or restart it); whether it is ready."""
        if self._manager is not None and self._manager.is_alive() and not restarting:
            return True
        self._set_state("restarting" if restarting or self._manager is not None else "starting")
        self._stop_process()
        try:
            self._start_process()
        except (KernelError, RuntimeError, OSError) as e:
            self._stop_process()
            self._startup_error = str(e)
            self._set_state("dead")
            return False
        self._set_state("idle")
        return True

    def _work(self) -> None:
        self._startup_error = ""
        self._ensure_process()
        if self.state != "dead":
            with self._lock:
                if not self._pending:
                    self._idle.set()
        while True:
            job = self._jobs.get()
            if job[0] == "stop":
                return
            if job[0] == "restart":
                self._ensure_process(restarting=True)
                self._restarting.clear()
                job[1].set()
                continue
            _, cell_id, source, generation = job
            with self._lock:
                if generation != self._generation:
                    continue
                self._pending.remove(cell_id)
                self._running = cell_id
            try:
                if self._ensure_process():
                    self._execute(cell_id, source)
                else:
                    self.on_event(cell_id, "error", f"the kernel could not start: {self._startup_error}")
                    self.on_event(cell_id, "status", "error")
                    self._cancel()
            finally:
                with self._lock:
                    self._running = None
                    if not self._pending:
                        self._idle.set()
                if self.state == "busy":
                    self._set_state("idle")

    @staticmethod
    def _replied_ok(client: Any, msg_id: str, timeout: float = 2.0) -> bool:
        """Whether the kernel's execute_reply to ``msg_id`` says ok (replies to earlier requests,
        never read, are skipped); False when none comes within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = client.get_shell_msg(timeout=left)
            except queue.Empty:
                return False
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg["content"].get("status") == "ok"
        return False

    def _execute(self, cell_id: str, source: str) -> None:
        client = self._client
        self._set_state("busy")
        with self._lock:
            self._begun, self._interrupt_asked, self._interrupt_sent = False, False, False
        self.on_event(cell_id, "status", "running")
        msg_id = client.execute(source, store_history=True, allow_stdin=False, stop_on_error=False)
        failed = False
        while True:
            try:
                msg = client.get_iopub_msg(timeout=POLL_SECONDS)
            except queue.Empty:
                if self._restarting.is_set():
                    self.on_event(cell_id, "error", "KeyboardInterrupt: the kernel was restarted while this cell ran")
                    failed = True
                    break
                if not self._manager.is_alive():
                    self.on_event(cell_id, "error", "the kernel died while this cell ran (its variables are lost; "
                                                    f"it starts again with the next cell):\n{self._log_tail()}")
                    self._set_state("dead")
                    failed = True
                    break
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content["execution_state"] == "idle":
                break
            if kind == "execute_input":
                self.on_event(cell_id, "count", content["execution_count"])
                with self._lock:
                    self._begun = True
                    asked, self._interrupt_asked = self._interrupt_asked, False
                    self._interrupt_sent |= asked
                if asked:  # (an interrupt that came before the kernel began the cell)
                    self._manager.interrupt_kernel()
            elif kind == "stream":
                self.on_event(cell_id, "output" if content["name"] == "stdout" else "stderr", content["text"])
            elif kind in ("execute_result", "display_data"):
                data = content["data"]
                if "image/png" in data:
                    self.on_event(cell_id, "image", base64.b64decode(data["image/png"]))
                elif "text/plain" in data:
                    self.on_event(cell_id, "result" if kind == "execute_result" else "output", data["text/plain"])
            elif kind == "error":
                traceback = "\n".join(line.rstrip("\n") for line in content["traceback"])
                self.on_event(cell_id, "error", _ANSI.sub("", traceback))
                failed = True
            elif kind == "clear_output":
                self.on_event(cell_id, "clear", None)
        with self._lock:
            sent = self._interrupt_sent
        if sent and not failed and not self._replied_ok(client, msg_id):
            # the SIGINT came after the kernel took the request but before the cell's code ran (or
            # after it ended): ipykernel then logs the KeyboardInterrupt, sends no error and no
            # reply, and the cell would read as a success
            self.on_event(cell_id, "error", "KeyboardInterrupt: the cell was interrupted as it began or ended")
            failed = True
        self.on_event(cell_id, "status", "error" if failed else "ok")
        if failed:
            self._cancel()
