"""The kernel cache and the beam-search cache under hostile or broken files, many threads and many
shapes (issue 23): whose files are trusted, what is loaded, what falls back, what stays loaded."""

import ctypes
import functools
import gc
import hashlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings

import numpy as np
import pytest

import corvid as cv
from corvid.codegen import search
from corvid.codegen.ir import Opt
from corvid.codegen.lower import lower_unmerged, merge_loops
from corvid.runtime import compiler, cuda, peak
from tests.test_cuda_runtime import FakeDriver, FakeNVRTC

ARGS = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
OTHER_UID = 65534  # "nobody": a user that is not us

needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="giving a file to another user (chown) needs root")
needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc/self/maps")


def adder(c: float, fname: str = "k") -> str:
    """A kernel ``fname`` computing ``out = x + c``: sources that differ only in ``c`` export the
    same function, so loading the wrong library gives a wrong number, not a missing symbol."""
    return (f"void {fname}(float* out, const float* x, long n) {{\n"
            f"    for (long i = 0; i < n; ++i) out[i] = x[i] + {c!r}f;\n}}\n")


def run(lib, fname: str = "k") -> np.ndarray:
    x = np.arange(257, dtype=np.float32)
    out = np.empty_like(x)
    lib.function(fname, ARGS)(out.ctypes.data, x.ctypes.data, x.size)
    return out - x


def assert_adds(lib, c: float) -> None:
    np.testing.assert_array_equal(run(lib), np.full(257, c, np.float32))


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("CORVID_CACHE_DIR", str(root))
    monkeypatch.delenv("CORVID_NO_DISK_CACHE", raising=False)
    monkeypatch.delenv("CORVID_MAX_LOADED_KERNELS", raising=False)
    compiler.find_toolchain()  # (probed before any test counts compiler runs)
    compiler._clear_memory_cache()
    yield root
    compiler._clear_memory_cache()


@pytest.fixture
def compiler_runs(monkeypatch):
    """The kernel compiles run from now on (each a list of arguments)."""
    runs = []
    real = subprocess.run

    def counting(cmd, *args, **kwargs):
        runs.append(cmd)
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", counting)
    return runs


@pytest.fixture
def slow_compiler_runs(compiler_runs, monkeypatch):
    """``compiler_runs``, each compile 0.3 s slower: threads started together all ask for a kernel
    while its first compile runs."""
    counting = subprocess.run

    def slow(cmd, *args, **kwargs):
        time.sleep(0.3)
        return counting(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", slow)
    return compiler_runs


def entry(root, source):
    """(.so, .sha256) of ``source``'s cache entry."""
    key = hashlib.sha256((source + compiler.find_toolchain().key()).encode()).hexdigest()
    folder = root / "kernels" / key[:2]
    return folder / f"{key}.so", folder / f"{key}.sha256"


def fallback_warning(record) -> str:
    messages = [str(w.message) for w in record if "not using the cache directory" in str(w.message)]
    assert len(messages) == 1, messages
    assert "CORVID_CACHE_DIR" in messages[0]  # how to fix it
    return messages[0]


# --- who owns the cache ---------------------------------------------------------------------------------
@needs_root
def test_a_cache_root_owned_by_another_user_is_not_used(isolated_cache):
    isolated_cache.mkdir(mode=0o700)
    os.chown(isolated_cache, OTHER_UID, OTHER_UID)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        lib = compiler.compile_kernel(adder(1.0), "k")
        compiler.compile_kernel(adder(2.0), "k")  # one warning per process, not per kernel
    assert f"owned by uid {OTHER_UID}" in fallback_warning(record)
    assert_adds(lib, 1.0)
    assert lib.path.is_relative_to(compiler._temporary_cache())
    assert stat.S_IMODE(compiler._temporary_cache().stat().st_mode) == 0o700
    assert os.listdir(isolated_cache) == []  # nothing read from or written into it
    assert isolated_cache.stat().st_uid == OTHER_UID


@needs_root
def test_a_kernels_folder_owned_by_another_user_is_not_used(isolated_cache):
    (isolated_cache / "kernels").mkdir(parents=True, mode=0o700)
    os.chown(isolated_cache / "kernels", OTHER_UID, OTHER_UID)
    with pytest.warns(UserWarning, match=f"its folder kernels: it is owned by uid {OTHER_UID}"):
        lib = compiler.compile_kernel(adder(1.0), "k")
    assert_adds(lib, 1.0)
    assert os.listdir(isolated_cache / "kernels") == []


@pytest.mark.parametrize("mode, why", [(0o500, "read-only"), (0o770, "group or others may write"),
                                       (0o703, "group or others may write")], ids=["500", "770", "703"])
def test_a_read_only_or_shared_cache_root_is_left_as_it_is(isolated_cache, mode, why):
    isolated_cache.mkdir()
    isolated_cache.chmod(mode)
    try:
        with pytest.warns(UserWarning, match=why):
            lib = compiler.compile_kernel(adder(1.0), "k")
        assert_adds(lib, 1.0)
        assert stat.S_IMODE(isolated_cache.stat().st_mode) == mode  # never chmod-ed back
        assert os.listdir(isolated_cache) == []
    finally:
        isolated_cache.chmod(0o700)


@needs_root
def test_a_user_whose_cache_is_another_users_gets_a_fallback_not_an_error():
    """As a non-root user (a forked child that became 'nobody'), a cache directory owned by root:
    used to raise a bare PermissionError (from chmod)."""
    top = tempfile.mkdtemp()
    os.chmod(top, 0o755)
    cache = os.path.join(top, "cache")
    os.mkdir(cache, 0o755)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report as JSON through the pipe, never return into pytest
        result = {}
        try:
            os.setgroups([])
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            os.environ["CORVID_CACHE_DIR"] = cache
            compiler._temporary = None  # (the parent's is root's)
            with warnings.catch_warnings(record=True) as record:
                warnings.simplefilter("always")
                lib = compiler.compile_kernel(adder(7.0, "nobody_k"), "nobody_k")
            x, out = (ctypes.c_float * 4)(1, 2, 3, 4), (ctypes.c_float * 4)()
            lib.function("nobody_k", ARGS)(ctypes.addressof(out), ctypes.addressof(x), 4)
            result = {"out": list(out), "warnings": [str(w.message) for w in record], "path": str(lib.path)}
        except BaseException as exc:  # noqa: BLE001 -- reported to the parent
            result = {"error": repr(exc)}
        finally:
            os.write(write, json.dumps(result).encode())
            os._exit(0)
    os.close(write)
    try:
        with os.fdopen(read) as f:
            result = json.loads(f.read())
        os.waitpid(pid, 0)
    finally:
        shutil.rmtree(top)
    assert "error" not in result, result
    assert result["out"] == [8.0, 9.0, 10.0, 11.0]
    assert any("owned by uid 0" in w for w in result["warnings"])
    assert not result["path"].startswith(cache)


# --- which entries are trusted -------------------------------------------------------------------------
@needs_root
@pytest.mark.parametrize("which", ["so", "sha256"])
def test_an_entry_file_owned_by_another_user_is_rebuilt(isolated_cache, compiler_runs, which):
    compiler.compile_kernel(adder(1.0), "k")
    so, sidecar = entry(isolated_cache, adder(1.0))
    os.chown(so if which == "so" else sidecar, OTHER_UID, OTHER_UID)
    compiler._clear_memory_cache()
    compiler_runs.clear()
    lib = compiler.compile_kernel(adder(1.0), "k")
    assert len(compiler_runs) == 1  # not loaded: rebuilt
    assert_adds(lib, 1.0)
    assert so.stat().st_uid == sidecar.stat().st_uid == os.geteuid()


def test_an_entry_copied_under_another_key_is_rejected(isolated_cache, compiler_runs):
    """The sidecar binds the library to its key: entry A's .so and sidecar copied over entry B's
    verified before (a plain checksum of the bytes), and B ran A's code."""
    compiler.compile_kernel(adder(1.0), "k")
    compiler.compile_kernel(adder(2.0), "k")
    a, b = entry(isolated_cache, adder(1.0)), entry(isolated_cache, adder(2.0))
    for src, dst in zip(a, b):
        dst.unlink()  # (never rewrite a loaded library in place)
        shutil.copy2(src, dst)
    compiler._clear_memory_cache()
    compiler_runs.clear()
    lib = compiler.compile_kernel(adder(2.0), "k")
    assert len(compiler_runs) == 1
    assert_adds(lib, 2.0)


@pytest.mark.parametrize("proc_fd", [True, False], ids=["proc-self-fd", "private-copy"])
def test_a_library_swapped_after_verification_is_not_the_one_loaded(isolated_cache, monkeypatch, proc_fd):
    """Between the checksum check and dlopen, the entry's path is pointed at other code (as a
    rename would): the loaded library is still the verified one, read through its descriptor."""
    if proc_fd and not compiler._PROC_FD:
        pytest.skip("no /proc/self/fd here")
    monkeypatch.setattr(compiler, "_PROC_FD", proc_fd)
    compiler.compile_kernel(adder(1.0), "k")
    compiler.compile_kernel(adder(2.0), "k")
    so, _ = entry(isolated_cache, adder(1.0))
    other, _ = entry(isolated_cache, adder(2.0))
    compiler._clear_memory_cache()
    real_load = compiler.load_library
    swapped = []

    def swap_then_load(path):
        if not swapped:
            decoy = so.with_name(".decoy.so")
            shutil.copy2(other, decoy)
            os.replace(decoy, so)
            swapped.append(path)
        return real_load(path)

    monkeypatch.setattr(compiler, "load_library", swap_then_load)
    lib = compiler.compile_kernel(adder(1.0), "k")
    assert swapped and so.read_bytes() == other.read_bytes()  # the swap did happen
    assert_adds(lib, 1.0)
    assert not [p for p in so.parent.iterdir() if p.name.startswith(".load")]  # no copies left behind


def test_max_loaded_kernels_is_validated(monkeypatch):
    assert compiler.max_loaded_kernels() == 1024
    monkeypatch.setenv("CORVID_MAX_LOADED_KERNELS", "12")
    assert compiler.max_loaded_kernels() == 12
    for bad in ("0", "-3", "many"):
        monkeypatch.setenv("CORVID_MAX_LOADED_KERNELS", bad)
        with pytest.raises(ValueError, match="CORVID_MAX_LOADED_KERNELS must be an integer of at least 1"):
            compiler.compile_kernel(adder(1.0), "k")


# --- how many libraries stay loaded -----------------------------------------------------------------------
def mapped_libraries(root) -> set[str]:
    """The files under ``root`` mapped into this process (loaded libraries)."""
    with open("/proc/self/maps") as f:
        fields = [line.split(maxsplit=5) for line in f]
    return {f[5].strip() for f in fields if len(f) == 6 and f[5].startswith(str(root))}


def compile_and_check(c: float) -> None:
    assert_adds(compiler.compile_kernel(adder(c), "k"), c)


@needs_proc
def test_loaded_libraries_are_bounded_and_unloaded_when_unused(isolated_cache, monkeypatch):
    monkeypatch.setenv("CORVID_MAX_LOADED_KERNELS", "3")
    held = compiler.compile_kernel(adder(100.0), "k").function("k", ARGS)  # a program's function
    for c in range(12):
        compile_and_check(float(c))
    gc.collect()
    assert len(compiler._loaded) == 3
    mapped = mapped_libraries(isolated_cache)
    assert len(mapped) == 3 + 1  # the 3 most recent, and the one still held
    x = np.arange(8, dtype=np.float32)
    out = np.empty_like(x)
    held(out.ctypes.data, x.ctypes.data, x.size)  # evicted from the cache, still loaded and callable
    np.testing.assert_array_equal(out, x + 100)
    del held
    gc.collect()
    assert len(mapped_libraries(isolated_cache)) == 3
    compiler._clear_memory_cache()
    gc.collect()
    assert mapped_libraries(isolated_cache) == set()


@needs_proc
def test_evicted_libraries_reload_from_disk_with_the_right_code(isolated_cache, monkeypatch, compiler_runs):
    monkeypatch.setenv("CORVID_MAX_LOADED_KERNELS", "2")
    for c in range(6):
        compile_and_check(float(c))
    compiled = len(compiler_runs)
    for c in reversed(range(6)):  # each reloaded (loaded libraries' names are never reused)
        compile_and_check(float(c))
    assert len(compiler_runs) == compiled == 6


# --- threads ---------------------------------------------------------------------------------------------
def in_threads(n: int, fn) -> list:
    """``fn(i)`` for i < n, started together in n threads; their results, or the first error."""
    barrier = threading.Barrier(n)
    results: list = [None] * n
    errors: list = []

    def work(i):
        barrier.wait()
        try:
            results[i] = fn(i)
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the caller
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def test_eight_threads_compile_each_kernel_once(monkeypatch, slow_compiler_runs):
    libs = in_threads(8, lambda i: compiler.compile_kernel(adder(float(i % 3)), "k"))
    assert len(slow_compiler_runs) == 3
    for i, lib in enumerate(libs):
        assert lib is libs[i % 3]
        assert_adds(lib, float(i % 3))
    # ... and load each from disk once
    compiler._clear_memory_cache()
    loads = []
    real_load = compiler.load_cached

    def slow_load(path):
        loads.append(path)
        time.sleep(0.1)
        return real_load(path)

    monkeypatch.setattr(compiler, "load_cached", slow_load)
    libs = in_threads(8, lambda i: compiler.compile_kernel(adder(float(i % 3)), "k"))
    assert len(slow_compiler_runs) == 3 and len(loads) == 3
    for i, lib in enumerate(libs):
        assert_adds(lib, float(i % 3))


def test_threads_share_a_compile_error(slow_compiler_runs):
    def compile_broken(i):
        with pytest.raises(compiler.CompileError, match="broken_k"):
            compiler.compile_kernel("void broken_k(float* out) { out[0] = ; }\n", "broken_k")

    in_threads(4, compile_broken)
    assert len(slow_compiler_runs) == 1


def test_threads_compiling_past_the_cache_limit_get_right_results(monkeypatch):
    monkeypatch.setenv("CORVID_MAX_LOADED_KERNELS", "2")
    in_threads(8, lambda i: [compile_and_check(float(i * 10 + j)) for j in range(3)])
    assert len(compiler._loaded) == 2


# --- the beam-search cache ---------------------------------------------------------------------------------
@functools.cache
def small_kernel():
    t = cv.Tensor(np.ones((8, 16), np.float32)).realize() * 2
    sk = t.schedule()[-1]
    return merge_loops(lower_unmerged("k", sk.output, sk.inputs)[0])


def test_a_database_locked_by_another_process_is_skipped_not_moved(tmp_path, monkeypatch):
    db = tmp_path / "s.sqlite"
    search.SearchCache(db).put("kept", (Opt("upcast", 0, 2),), 1e-3)
    monkeypatch.setattr(search, "LOCK_TIMEOUT_S", 0.3)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys, time\n"
         "con = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
         "con.execute('BEGIN EXCLUSIVE')\nprint('locked', flush=True)\ntime.sleep(120)\n", str(db)],
        stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"locked\n"
        cache = search.SearchCache(db)
        t0 = time.perf_counter()
        with pytest.warns(UserWarning, match="kept it locked"):
            assert cache.get("kept") is None
        assert time.perf_counter() - t0 < 5  # a bounded wait
        t0 = time.perf_counter()
        cache.put("new", (), 1e-3)  # not used again by this process: no second wait, no warning
        assert cache.get("kept") is None
        assert time.perf_counter() - t0 < 0.2
    finally:
        holder.kill()
        holder.wait()
    assert not (tmp_path / "s.sqlite.corrupt").exists()
    rows = sqlite3.connect(db).execute("SELECT key FROM best").fetchall()
    assert rows == [("kept",)]  # the results other processes saved are all there


def test_a_read_only_database_is_read_but_not_written(tmp_path):
    db = tmp_path / "s.sqlite"
    search.SearchCache(db).put("kept", (Opt("upcast", 0, 2),), 1e-3)
    db.chmod(0o444)
    before = db.read_bytes()
    cache = search.SearchCache(db)
    assert cache.get("kept") == (Opt("upcast", 0, 2),)
    with pytest.warns(UserWarning, match="read-only"):
        cache.put("new", (), 1e-3)
    cache.put("newer", (), 1e-3)  # (warned once)
    assert cache.get("kept") == (Opt("upcast", 0, 2),) and cache.get("new") is None
    assert db.read_bytes() == before and stat.S_IMODE(db.stat().st_mode) == 0o444
    assert not (tmp_path / "s.sqlite.corrupt").exists()


def test_only_a_corrupt_database_is_moved_aside(tmp_path):
    other = tmp_path / "other.sqlite"  # a database of another schema: sqlite finds nothing wrong with it
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE best (key TEXT, value TEXT)")
    with pytest.warns(UserWarning, match="sqlite reports"):
        assert search.SearchCache(other).get("k") is None
    assert other.exists() and not (tmp_path / "other.sqlite.corrupt").exists()
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not a database" * 100)
    cache = search.SearchCache(garbage)
    assert cache.get("k") is None
    assert (tmp_path / "garbage.sqlite.corrupt").exists()
    cache.put("k", (), 1e-3)
    assert cache.get("k") == ()


MALFORMED = [
    5, 2.5, b"\x00\xff", None, "{not json", '"text"', '{"op": "upcast"}', "NaN", "[" * 100_000 + "]" * 100_000,
    "[5]", '[["nosuch", 0, 2]]', '[["upcast", 0]]', '[["upcast", 0, 2, 1]]', '[[1, 0, 2]]', '[["upcast", "0", 2]]',
    '[["upcast", true, 2]]', '[["upcast", 0, "2"]]', '[["upcast", 0, 2.5]]', '[["upcast", 0, {"a": 1}]]',
    '[["permute", 0, [1, [0]]]]', '[["upcast", 0, -2]]', '[["upcast", 0, 1e400]]', '[["upcast", 0, ' + "9" * 40 + "]]",
    json.dumps([["upcast", 0, 2]] * 100),
]


@pytest.mark.parametrize("opts", MALFORMED, ids=[f"row{i}" for i in range(len(MALFORMED))])
def test_malformed_rows_are_ignored(isolated_cache, monkeypatch, opts):
    """A row that is not what the cache writes is a miss: the kernel is searched again."""
    isolated_cache.mkdir()
    with sqlite3.connect(isolated_cache / "search.sqlite") as con:
        con.execute("CREATE TABLE best (key TEXT PRIMARY KEY, opts, seconds REAL)")  # (no type, no NOT NULL)
        con.execute("INSERT INTO best VALUES ('k', ?, 1.0)", (opts,))
    monkeypatch.setattr(search, "search_key", lambda k, device: "k")
    searched = []
    kernel = small_kernel()

    def fake_search(k, device, width):
        searched.append(k)
        return search.SearchResult((Opt("upcast", 0, 4),), 1e-3, 1e-3, 1)

    monkeypatch.setattr(search, "beam_search", fake_search)
    monkeypatch.setenv("CORVID_BEAM", "1")
    assert search.optimize(kernel, "CPU").opts == (Opt("upcast", 0, 4),)
    assert len(searched) == 1


def test_eight_threads_search_each_kernel_once(isolated_cache, monkeypatch):
    monkeypatch.setattr(search, "search_key", lambda k, device: "k")
    monkeypatch.setenv("CORVID_BEAM", "1")
    searched = []

    def slow_search(k, device, width):
        searched.append(k)
        time.sleep(0.3)
        return search.SearchResult((Opt("upcast", 0, 4),), 1e-3, 1e-3, 1)

    monkeypatch.setattr(search, "beam_search", slow_search)
    kernel = small_kernel()
    assert in_threads(8, lambda i: search.optimize(kernel, "CPU").opts) == [(Opt("upcast", 0, 4),)] * 8
    assert len(searched) == 1


def test_threads_share_one_search_cache(tmp_path):
    cache = search.SearchCache(tmp_path / "s.sqlite")
    in_threads(8, lambda i: [cache.put(f"{i}-{j}", (Opt("upcast", 0, j + 1),), 1e-3) for j in range(5)])
    got = in_threads(8, lambda i: [cache.get(f"{i}-{j}") for j in range(5)])
    assert got == [[(Opt("upcast", 0, j + 1),) for j in range(5)]] * 8


# --- the CUDA device's cubin cache (corvid/runtime/cuda.py; no GPU needed) ------------------------------
CUBIN_A, CUBIN_B = b"\x7fELF fake cubin A", b"\x7fELF fake cubin B"


def cubin_key(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def cubin_entry(root, key):
    """(.cubin, .sha256) of the disk entry ``key`` under the cache root ``root``."""
    folder = root / "cuda" / key[:2]
    return folder / f"{key}.cubin", folder / f"{key}.sha256"


def test_a_cubin_entry_is_private_and_bound_to_its_key(isolated_cache):
    key = cubin_key("private")
    cuda._store_cubin(key, CUBIN_A)
    cubin, sidecar = cubin_entry(isolated_cache, key)
    assert cubin.read_bytes() == CUBIN_A
    assert sidecar.read_text() == compiler._entry_digest(key, CUBIN_A) != hashlib.sha256(CUBIN_A).hexdigest()
    assert [stat.S_IMODE(p.stat().st_mode) for p in (cubin, sidecar)] == [0o600, 0o600]
    assert [stat.S_IMODE(p.stat().st_mode) for p in (cubin.parent, cubin.parent.parent)] == [0o700, 0o700]
    assert cuda._load_cubin(key) == CUBIN_A


def test_a_cubin_entry_copied_under_another_key_is_rejected_and_removed(isolated_cache):
    a, b = cubin_key("copied a"), cubin_key("copied b")
    cuda._store_cubin(a, CUBIN_A)
    cuda._store_cubin(b, CUBIN_B)
    for src, dst in zip(cubin_entry(isolated_cache, a), cubin_entry(isolated_cache, b)):
        shutil.copy2(src, dst)
    assert cuda._load_cubin(b) is None  # (a plain checksum of the bytes verified here)
    assert not any(p.exists() for p in cubin_entry(isolated_cache, b))
    assert cuda._load_cubin(a) == CUBIN_A


def tamper_with(path, how: str, tmp_path) -> None:
    """Make ``path`` (a private file) untrustworthy in the way ``how`` says, its bytes unchanged
    unless ``how`` is "bytes"."""
    data = path.read_bytes()
    if how == "bytes":
        path.write_bytes(data[:-1] + b"X")
    elif how == "group-writable":
        path.chmod(0o620)
    elif how == "link":  # to a private file with the very same bytes: only the link is wrong
        target = tmp_path / "elsewhere"
        target.write_bytes(data)
        target.chmod(0o600)
        path.unlink()
        path.symlink_to(target)
    elif how == "fifo":  # (opened for reading, a FIFO would wait for a writer forever)
        path.unlink()
        os.mkfifo(path, 0o600)
    elif how == "foreign":
        os.chown(path, OTHER_UID, OTHER_UID)
    else:
        raise ValueError(how)


TAMPERING = ["bytes", "group-writable", "link", "fifo", pytest.param("foreign", marks=needs_root)]


@pytest.mark.parametrize("which", ["cubin", "sha256"])
@pytest.mark.parametrize("how", TAMPERING)
def test_a_tampered_cubin_entry_is_rejected_and_removed(isolated_cache, tmp_path, which, how):
    key = cubin_key(f"tampered {which} {how}")
    cuda._store_cubin(key, CUBIN_A)
    cubin, sidecar = cubin_entry(isolated_cache, key)
    tamper_with(cubin if which == "cubin" else sidecar, how, tmp_path)
    assert cuda._load_cubin(key) is None
    assert not cubin.exists() and not cubin.is_symlink() and not sidecar.exists()
    cuda._store_cubin(key, CUBIN_A)  # built again
    assert cuda._load_cubin(key) == CUBIN_A


@pytest.mark.parametrize("owner", [pytest.param("foreign", marks=needs_root), "shared"])
def test_a_cuda_folder_not_ours_alone_is_not_used(isolated_cache, owner):
    folder = isolated_cache / "cuda"
    folder.mkdir(parents=True, mode=0o700)
    if owner == "foreign":
        os.chown(folder, OTHER_UID, OTHER_UID)
    else:
        folder.chmod(0o770)
    key = cubin_key(f"folder {owner}")
    with pytest.warns(UserWarning, match="its folder cuda: "):
        cuda._store_cubin(key, CUBIN_A)
    assert os.listdir(folder) == []
    assert stat.S_IMODE(folder.stat().st_mode) == (0o700 if owner == "foreign" else 0o770)  # never chmod-ed
    assert cubin_entry(compiler._temporary_cache(), key)[0].read_bytes() == CUBIN_A
    assert cuda._load_cubin(key) == CUBIN_A  # from this process's private temporary cache


def test_no_disk_cache_keeps_cubins_in_memory_only(isolated_cache, monkeypatch):
    monkeypatch.setenv("CORVID_NO_DISK_CACHE", "1")
    key = cubin_key("no disk")
    cuda._store_cubin(key, CUBIN_A)
    assert cuda._load_cubin(key) is None
    assert not isolated_cache.exists()


class ModuleLoadingDriver(FakeDriver):
    """:class:`FakeDriver` that also takes modules: ``images`` are the cubins handed to
    cuModuleLoadData."""

    def __init__(self):
        super().__init__()
        self.images: list[bytes] = []

    def cuModuleLoadData(self, image):
        self.images.append(bytes(image))
        return (0, f"module{len(self.images)}")

    def cuModuleGetFunction(self, module, name):
        return (0, (module, name))


def test_the_cuda_device_loads_only_verified_cubins(isolated_cache, monkeypatch):
    """A process that finds a forged entry (other bytes, a plain sha256 beside them: what the
    old sidecar was) builds the kernel again; one that finds a sound entry loads its bytes."""
    built = []

    def build(self, source, arch, name="kernel"):
        built.append(name)
        return CUBIN_A + source.encode()

    monkeypatch.setattr(cuda.NVRTCCompiler, "build", build)
    kernel = small_kernel()

    def compile_in_new_process() -> bytes:
        device = cuda.CUDADevice(bindings=(ModuleLoadingDriver(), FakeNVRTC()))
        device.compile(kernel, source)
        (image,) = device.cu.images
        return image

    source = cuda.CUDADevice(bindings=(ModuleLoadingDriver(), FakeNVRTC())).renderer.render(kernel)
    good = compile_in_new_process()
    assert good == CUBIN_A + source.encode() and len(built) == 1
    (cubin,) = (isolated_cache / "cuda").glob("*/*.cubin")
    cubin.write_bytes(CUBIN_B)
    cubin.with_suffix(".sha256").write_text(hashlib.sha256(CUBIN_B).hexdigest())
    assert compile_in_new_process() == good and len(built) == 2
    assert compile_in_new_process() == good and len(built) == 2  # from the disk, as verified
    assert cubin.read_bytes() == good


# --- the roofline's peak.json (corvid/runtime/peak.py) ----------------------------------------------------
MEASURED = peak.Peak(123.0, 45.0)


@pytest.fixture
def measurements(monkeypatch):
    """The measurements cpu_peak makes from now on (each gives ``MEASURED``)."""
    monkeypatch.delenv("CORVID_PEAK", raising=False)
    made = []

    def measure():
        made.append(MEASURED)
        return MEASURED

    monkeypatch.setattr(peak, "_measure", measure)
    peak.cpu_peak.cache_clear()
    yield made
    peak.cpu_peak.cache_clear()


def write_peak_json(root, text: str):
    """``root/peak.json`` holding ``text`` with KEY replaced by this machine's entry, as corvid
    writes it (mode 0o600 in a 0o700 root)."""
    root.mkdir(mode=0o700, exist_ok=True)
    path = root / "peak.json"
    path.write_text(text.replace("KEY", peak._table_key()))
    path.chmod(0o600)
    return path


def test_a_private_peak_json_is_read(isolated_cache, measurements):
    write_peak_json(isolated_cache, '{"KEY": [7.5, 8]}')
    assert peak.cpu_peak() == peak.Peak(7.5, 8.0)
    assert measurements == []


@pytest.mark.parametrize("how", TAMPERING[1:])
def test_a_peak_json_not_ours_alone_is_ignored_and_replaced(isolated_cache, tmp_path, measurements, how):
    path = write_peak_json(isolated_cache, '{"KEY": [7.5, 8]}')
    tamper_with(path, how, tmp_path)
    assert peak.cpu_peak() == MEASURED and len(measurements) == 1
    assert not path.is_symlink() and compiler._file_problem(path.stat()) is None
    assert json.loads(path.read_text()) == {peak._table_key(): [123.0, 45.0]}  # nothing kept from it
    if how == "link":
        assert json.loads((tmp_path / "elsewhere").read_text()) == {peak._table_key(): [7.5, 8]}  # untouched


MALFORMED_PEAK = [
    "", "{not json", "[7.5, 8]", '"text"', "null", "\xff\x00", "[" * 100_000 + "]" * 100_000,
    '{"KEY": [NaN, 8]}', '{"KEY": [Infinity, 8]}', '{"KEY": [1e400, 8]}', '{"KEY": [-7.5, 8]}', '{"KEY": [0, 8]}',
    '{"KEY": [true, 8]}', '{"KEY": ["7.5", 8]}', '{"KEY": [7.5]}', '{"KEY": [7.5, 8, 9]}', '{"KEY": {"gflops": 7.5}}',
    '{"KEY": [7.5, 8], "pad": "' + "x" * (1 << 20) + '"}',  # (larger than any table corvid writes)
]


@pytest.mark.parametrize("text", MALFORMED_PEAK, ids=[f"json{i}" for i in range(len(MALFORMED_PEAK))])
def test_a_malformed_peak_json_is_ignored(isolated_cache, measurements, text):
    path = write_peak_json(isolated_cache, text)
    assert peak.cpu_peak() == MEASURED and len(measurements) == 1
    assert json.loads(path.read_text())[peak._table_key()] == [123.0, 45.0]


@needs_root
def test_a_peak_json_in_a_cache_root_not_ours_is_not_read(isolated_cache, measurements):
    path = write_peak_json(isolated_cache, '{"KEY": [7.5, 8]}')
    os.chown(isolated_cache, OTHER_UID, OTHER_UID)
    (compiler._temporary_cache() / "peak.json").unlink(missing_ok=True)  # (shared by this process's tests)
    with pytest.warns(UserWarning, match=f"owned by uid {OTHER_UID}"):
        assert peak.cpu_peak() == MEASURED
    assert len(measurements) == 1
    assert json.loads(path.read_text()) == {peak._table_key(): [7.5, 8]}  # left as it was
    assert json.loads((compiler._temporary_cache() / "peak.json").read_text()) == {peak._table_key(): [123.0, 45.0]}
