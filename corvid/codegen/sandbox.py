"""Beam-search candidates run in a child process (issue 5: "in a process pool, with a time limit
per candidate"): a candidate kernel that crashes (a segfault from a bad index) or hangs takes
down the child, not the search, and one that runs past a hard time limit is killed.

The child (:func:`serve`) is started once per process as a new Python running this module
(``python -c ...``, talking over two pipes), and reused by every search. Not multiprocessing's
``spawn``: that re-imports the parent's main script in the child, so a script without an
``if __name__ == "__main__":`` guard ran its own code again there and the search died with
"An attempt has been made to start a new process before the current process has finished its
bootstrapping phase". The child imports only corvid, from the folder the parent's corvid came from.
Each search it holds one kernel's random inputs at a time and, for each candidate, loads the
compiled library (a path in the kernel cache, verified as in :func:`corvid.runtime.compiler.load_cached`;
one that does not verify is answered None), runs the function on those inputs ``runs`` times
and answers with the outputs' bytes (a kernel of several outputs: each) and the best time, or None when the first run took longer than
the candidate's soft limit (``CUTOFF`` x the fastest so far, as in-process). The parent waits at
most :data:`HARD_LIMIT_S` plus ``HARD_FACTOR`` times the soft limit per run; past that, or when
the child dies, it is killed and restarted and the candidate is dropped.

Only the CPU device has libraries to hand over; other devices time candidates in-process.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from ..runtime.compiler import load_cached

HARD_LIMIT_S = 10.0  # seconds a candidate may take beyond HARD_FACTOR x its soft limit per run
HARD_FACTOR = 4.0
REFERENCE_LIMIT_S = 600.0  # the unoptimized reference run has no soft limit; this is its hard one


def serve(conn: Any) -> None:
    """The child's loop: ``("inputs", [bytes...], [out_nbytes...])`` sets the inputs and the
    outputs' sizes (a kernel of several outputs: its first params); ``("run", path, name,
    n_params, runs, limit)`` times one function and answers each output's bytes; EOF ends it."""
    inputs: list[np.ndarray] = []
    out_sizes: list[int] = [0]
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] == "inputs":
            inputs = [np.frombuffer(b, np.uint8).copy() for b in msg[1]]
            out_sizes = [int(n) for n in msg[2]]
            conn.send(True)
            continue
        _, path, name, n_params, runs, limit = msg
        # verified as the parent's loads are (its own user's file, the sidecar bound to the key),
        # and held only for this candidate: each is run once, and a search tries hundreds
        try:
            fn = load_cached(path).function(name, [ctypes.c_void_p] * n_params)
        except (OSError, AttributeError):
            conn.send(None)
            continue
        outs = [np.zeros(max(n, 1), np.uint8) for n in out_sizes]
        ptrs = [o.ctypes.data for o in outs] + [a.ctypes.data for a in inputs]
        best = float("inf")
        answer: Any = None
        for i in range(runs):
            t0 = time.perf_counter()
            fn(*ptrs)
            best = min(best, time.perf_counter() - t0)
            if i == 0 and limit is not None and best > limit:
                break
        else:
            answer = ([o[:n].tobytes() for o, n in zip(outs, out_sizes)], best)
        conn.send(answer)


class ChildRunner:
    """Times compiled CPU candidates of one kernel in the shared child (see the module docstring);
    the same interface as the in-process runner of :mod:`corvid.codegen.search`."""

    _proc: Any = None
    _conn: Any = None

    def __init__(self, outputs: list[tuple[np.dtype, int]], n_params: int, inputs: list[np.ndarray]):
        """``outputs``: (dtype, element count) of each output, in param order (the first params)."""
        self.outputs, self.n_params = [(np.dtype(d), int(n)) for d, n in outputs], n_params
        self.inputs = [np.ascontiguousarray(a).view(np.uint8).reshape(-1).tobytes() for a in inputs]
        self._send_inputs()

    @classmethod
    def _ensure(cls) -> None:
        if cls._proc is not None and cls._proc.poll() is None:
            return
        to_child_r, to_child_w = os.pipe()
        to_parent_r, to_parent_w = os.pipe()
        home = str(pathlib.Path(__file__).resolve().parents[2])  # the folder holding this corvid
        code = (f"import sys; sys.path.insert(0, {home!r}); from corvid.codegen.sandbox import _child_main; "
                f"_child_main({to_child_r}, {to_parent_w})")
        try:
            proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=(to_child_r, to_parent_w),
                                    stdin=subprocess.DEVNULL, close_fds=True)
        finally:
            os.close(to_child_r)
            os.close(to_parent_w)
        cls._proc, cls._conn = proc, _Duplex(to_parent_r, to_child_w)

    @classmethod
    def _kill(cls) -> None:
        if cls._proc is not None:
            cls._proc.kill()
            cls._proc.wait(5)
        if cls._conn is not None:
            cls._conn.close()
        cls._proc = cls._conn = None

    def _send_inputs(self) -> None:
        self._ensure()
        self._conn.send(("inputs", self.inputs, [n * d.itemsize for d, n in self.outputs]))
        if not self._conn.poll(REFERENCE_LIMIT_S):
            self._kill()
            raise RuntimeError("beam search: the timing process did not start")
        self._conn.recv()

    def run(self, program: Any, limit: float | None, runs: int = 5) -> tuple[np.ndarray, float] | None:
        """(output, best time of ``runs`` runs), or None when the first run exceeds ``limit``
        seconds, the candidate crashed the child, or it ran past the hard limit (killed)."""
        path, name = getattr(program, "lib_path", None), getattr(program, "fname", None)
        if path is None or name is None:
            raise TypeError("ChildRunner needs a CPU program (a compiled library path and function name)")
        self._ensure()
        hard = REFERENCE_LIMIT_S if limit is None else HARD_LIMIT_S + HARD_FACTOR * limit * runs
        try:
            self._conn.send(("run", str(path), name, self.n_params, runs, limit))
            if not self._conn.poll(hard):
                raise TimeoutError
            got = self._conn.recv()
        except (EOFError, OSError, TimeoutError):  # crashed or hung: a new child, the same inputs
            self._kill()
            self._send_inputs()
            return None
        if got is None:
            return None
        outs = [np.frombuffer(b, dtype=d, count=n).copy() for b, (d, n) in zip(got[0], self.outputs)]
        if len(outs) == 1:
            return outs[0], got[1]
        # (several outputs: one after the other, flattened, as the in-process runner gives them)
        wide = np.complex128 if any(o.dtype.kind == "c" for o in outs) else np.float64
        return np.concatenate([o.astype(wide) for o in outs]), got[1]


class _Duplex:
    """A two-way connection over two one-way pipes (multiprocessing's Connection on each end)."""

    def __init__(self, read_fd: int, write_fd: int):
        self._r, self._w = Connection(read_fd, writable=False), Connection(write_fd, readable=False)

    def send(self, obj: Any) -> None:
        self._w.send(obj)

    def recv(self) -> Any:
        return self._r.recv()

    def poll(self, timeout: float) -> bool:
        return self._r.poll(timeout)

    def close(self) -> None:
        self._r.close()
        self._w.close()


def _child_main(read_fd: int, write_fd: int) -> None:
    """The child process's entry (see :meth:`ChildRunner._ensure`)."""
    serve(_Duplex(read_fd, write_fd))
