"""The device allocator's pool of freed blocks (corvid/runtime/device.py): what it keeps and what it
gives back.

The pool exists for loops that free and allocate the same sizes at every step (training, decoding),
which then never wait for fresh memory; these tests check that such a loop still allocates nothing
fresh once warm, and that the pool gives memory back where it will not be reused: ``trim`` /
``cv.empty_cache`` (now), sizes no allocation asked for in ``release_after`` allocations (on its
own), and text generation's prefill, whose sizes follow the prompt's length.

The CPU device's blocks are numpy arrays, which ``tracemalloc`` traces: "given back" is checked
there, as memory the process no longer holds, not only as the pool's own count.
"""

from __future__ import annotations

import gc
import threading
import tracemalloc

import numpy as np
import pytest

import corvid as cv
from corvid import models, nn, optim
from corvid.runtime.cpu import CPUAllocator
from corvid.runtime.device import DEFAULT_POOL_AGE, Allocator, get_device

MB = 1 << 20


def _blocks(alloc: Allocator) -> int:
    """The bytes of the blocks in the pool, counted from the pool itself."""
    return sum(size * len(blocks) for size, blocks in alloc._pool.items())


def _counting(alloc: Allocator, monkeypatch) -> list[int]:
    """The sizes of the fresh blocks ``alloc`` takes from the system from now on (pool misses)."""
    fresh: list[int] = []
    take = alloc._alloc

    def counted(nbytes: int):
        fresh.append(nbytes)
        return take(nbytes)

    monkeypatch.setattr(alloc, "_alloc", counted)
    return fresh


# --- trim and empty_cache --------------------------------------------------------------------------------


def test_trim_gives_the_memory_back_to_the_system():
    alloc = CPUAllocator()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        handles = [alloc.alloc(4 * MB) for _ in range(3)] + [alloc.alloc(MB)]
        for h, n in zip(handles, [4 * MB] * 3 + [MB]):
            alloc.free(h, n)
        del handles, h
        held = tracemalloc.get_traced_memory()[0] - base
        assert alloc.pooled_bytes == _blocks(alloc) == 13 * MB and held >= 13 * MB  # pooled, still held
        assert len(alloc._addresses) == 4
        assert alloc.trim() == 13 * MB
        assert alloc.pooled_bytes == _blocks(alloc) == 0 and alloc._addresses == {}
        assert tracemalloc.get_traced_memory()[0] - base < MB // 4  # numpy freed the arrays
    finally:
        tracemalloc.stop()
    assert alloc.trim() == 0


def test_trim_since_a_mark_keeps_the_blocks_of_sizes_asked_for_before_it():
    alloc = CPUAllocator()
    loop = alloc.alloc(2 * MB)  # a loop's size, in use before and after the mark
    alloc.free(loop, 2 * MB)
    mark = alloc.mark()
    assert alloc.mark() == mark  # (a mark allocates nothing)
    one_off = [alloc.alloc(3 * MB), alloc.alloc(5 * MB)]
    alloc.free(one_off[0], 3 * MB)
    alloc.free(one_off[1], 5 * MB)
    assert alloc.pooled_bytes == 10 * MB
    assert alloc.trim(since=mark) == 8 * MB
    assert alloc.pooled_bytes == _blocks(alloc) == 2 * MB and {s for s, b in alloc._pool.items() if b} == {2 * MB}
    assert alloc.alloc(2 * MB) is loop  # still pooled, handed out again
    # a size asked for before the mark and again after it counts as asked for since
    alloc.free(loop, 2 * MB)
    mark = alloc.mark()
    alloc.free(alloc.alloc(2 * MB), 2 * MB)
    assert alloc.trim(since=mark) == 2 * MB and alloc.pooled_bytes == 0


def test_trim_gives_cuda_blocks_back_through_its_own_release():
    """Every release goes through the subclass's ``clear_pool`` (CUDA: synchronize, then
    cuMemFree each block): a partial trim frees exactly the dropped handles."""

    class Recording(Allocator):
        def __init__(self):
            super().__init__()
            self.released: list[int] = []
            self.next = 0

        def _alloc(self, nbytes):
            self.next += 1
            return self.next

        def clear_pool(self):
            with self.lock:
                handles = [h for blocks in self._pool.values() for h in blocks]
                super().clear_pool()
            self.released += handles

    alloc = Recording()
    a, b = alloc.alloc(100), alloc.alloc(100)
    mark = alloc.mark()
    c = alloc.alloc(300)
    for h, n in [(a, 100), (b, 100), (c, 300)]:
        alloc.free(h, n)
    assert alloc.trim(since=mark) == 300 and alloc.released == [c]
    assert alloc.pooled_bytes == 200 and sorted(alloc._pool[100]) == [a, b]
    assert alloc.trim() == 200 and sorted(alloc.released) == [a, b, c]


def test_the_cuda_allocator_frees_exactly_the_dropped_blocks():
    """The real CUDA allocator on the fake driver of tests/test_cuda_runtime.py: a trim, a sweep and
    an empty pool each end in one cuMemFree per dropped block, after a synchronize."""
    from tests.test_cuda_runtime import FakeCUDA

    dev = FakeCUDA()
    alloc, cu = dev.allocator, dev.cu
    keep = [alloc.alloc(1024), alloc.alloc(1024)]
    mark = alloc.mark()
    drop = [alloc.alloc(4096), alloc.alloc(8192)]
    for h, n in zip(keep + drop, [1024, 1024, 4096, 8192]):
        alloc.free(h, n)
    assert alloc.trim(since=mark) == 4096 + 8192
    assert sorted(a[0] for a in cu.named("cuMemFree")) == sorted(drop)
    assert set(cu.memory) == set(keep) and alloc.pooled_bytes == 2048
    alloc.release_after = 8
    for _ in range(10):  # (the 1024-byte size is not asked for: its blocks go)
        alloc.free(alloc.alloc(64), 64)
    assert sorted(a[0] for a in cu.named("cuMemFree")) == sorted(drop + keep) and alloc.pooled_bytes == 64
    assert alloc.trim() == 64 and cu.memory == {}


def test_empty_cache_releases_every_started_device_or_the_ones_named():
    x = cv.arange(50_000, dtype=cv.float32, device="CPU:3").exp().realize()
    y = cv.arange(70_000, dtype=cv.float32).exp().realize()
    del x, y
    gc.collect()
    cpu, cpu3 = get_device("CPU").allocator, get_device("CPU:3").allocator
    assert cpu3.pooled_bytes >= 200_000 and cpu.pooled_bytes >= 280_000
    before = cpu.pooled_bytes
    assert cv.empty_cache("cpu:3") >= 200_000
    assert cpu3.pooled_bytes == 0 and cpu.pooled_bytes == before  # the others are left alone
    assert cv.empty_cache() >= 280_000
    assert cpu.pooled_bytes == 0 and cv.empty_cache() == 0
    assert cv.empty_cache(["CPU", "CPU:3"]) == 0
    with pytest.raises(ValueError, match="unknown device"):
        cv.empty_cache("GPU")
    z = cv.arange(1000, dtype=cv.float32, device="NULL").exp().realize()
    del z
    null = get_device("NULL").allocator
    assert null.pooled_bytes >= 4000
    assert cv.empty_cache("NULL") == 0 and null.pooled_bytes == 0  # (emptied; it held no memory)


def test_tensors_keep_their_memory_through_empty_cache():
    x = (cv.arange(10_000, dtype=cv.float32) * 1e-3).exp().realize()
    cv.empty_cache()
    np.testing.assert_allclose(x.numpy(), np.exp(np.arange(10_000, dtype=np.float32) * np.float32(1e-3)), rtol=1e-6)


# --- what the pool keeps on its own ----------------------------------------------------------------------


def test_sizes_not_asked_for_in_release_after_allocations_are_given_back():
    alloc = CPUAllocator()
    alloc.release_after = 40  # (checked every 10 allocations)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        one_off = alloc.alloc(8 * MB)
        alloc.free(one_off, 8 * MB)
        del one_off
        for _ in range(39):  # a loop of other sizes: the one-off block is not yet old enough
            alloc.free(alloc.alloc(4096), 4096)
        assert alloc.pooled_bytes == 8 * MB + 4096
        for _ in range(11):  # 40 allocations without it: given back at the next check
            alloc.free(alloc.alloc(4096), 4096)
        assert alloc.pooled_bytes == _blocks(alloc) == 4096 and 8 * MB not in alloc._pool
        assert tracemalloc.get_traced_memory()[0] - base < MB
        assert len(alloc._addresses) == 1 and set(alloc._requested) == {4096}  # (nothing kept for the old size)
    finally:
        tracemalloc.stop()


def test_release_after_zero_keeps_every_block_and_bad_values_raise(monkeypatch):
    alloc = CPUAllocator()
    assert alloc.release_after == DEFAULT_POOL_AGE
    alloc.release_after = 0
    alloc.free(alloc.alloc(MB), MB)
    for _ in range(1000):
        alloc.free(alloc.alloc(64), 64)
    assert alloc.pooled_bytes == MB + 64
    for bad in (-1, 2.5, True, "10"):
        with pytest.raises(ValueError, match="release_after must be an int >= 0"):
            alloc.release_after = bad
    monkeypatch.setenv("CORVID_POOL_AGE", "123")
    assert CPUAllocator().release_after == 123
    monkeypatch.setenv("CORVID_POOL_AGE", "0")
    assert CPUAllocator().release_after == 0
    for bad in ("-5", "lots", "1e6"):
        monkeypatch.setenv("CORVID_POOL_AGE", bad)
        with pytest.raises(ValueError, match=r"CORVID_POOL_AGE=.*number of allocations >= 0"):
            CPUAllocator()


def test_a_training_loop_reuses_its_pooled_blocks(monkeypatch):
    """Identical steps: after the first, every block comes from the pool, with the default age and
    with one barely longer than a step (each size is asked for once a step)."""
    rng = np.random.default_rng(0)
    x = cv.Tensor(rng.standard_normal((32, 64)).astype(np.float32))
    y = cv.Tensor(rng.integers(0, 10, 32))
    alloc = get_device("CPU").allocator
    for age in (DEFAULT_POOL_AGE, None):
        cv.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
        opt = optim.SGD(model.parameters(), lr=0.1)

        def step(model=model, opt=opt):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss.item()

        step()
        start = alloc.mark()
        step()
        per_step = alloc.mark() - start
        assert per_step > 10
        monkeypatch.setattr(alloc, "release_after", age or per_step + 4)
        fresh = _counting(alloc, monkeypatch)
        losses = [step() for _ in range(5 if age else 12)]  # (12 steps: some 40 checks of the age)
        assert fresh == [] and losses[-1] < losses[0]
        monkeypatch.undo()


def test_a_jitted_step_reuses_its_pooled_blocks(monkeypatch):
    w = cv.Tensor(np.full((256, 256), 0.01, np.float32))

    @cv.jit
    def step(w, x):
        loss, g = cv.value_and_grad(lambda w: ((x @ w).tanh() ** 2).mean())(w)
        return loss, w - 0.1 * g

    x = cv.Tensor(np.full((64, 256), 0.5, np.float32))
    for _ in range(3):
        _, w = step(w, x)
    alloc = get_device("CPU").allocator
    start = alloc.mark()
    step(w, x)[0].item()
    monkeypatch.setattr(alloc, "release_after", alloc.mark() - start + 4)  # (a step, and a little)
    fresh = _counting(alloc, monkeypatch)
    for _ in range(40):
        loss, w = step(w, x)
    loss.item()
    assert fresh == []


def test_the_pool_stays_consistent_under_threads():
    alloc = CPUAllocator()
    alloc.release_after = 16
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            held = []
            for i in range(3000):
                n = int(rng.choice([64, 128, 4096, 65536, 1 << 18]))
                held.append((alloc.alloc(n), n))
                if len(held) > 4 or rng.random() < 0.5:
                    alloc.free(*held.pop(rng.integers(len(held))))
                if i % 500 == 0:
                    alloc.trim(since=alloc.mark() - 50)
            for h, n in held:
                alloc.free(h, n)
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert alloc.pooled_bytes == _blocks(alloc)
    pooled = {id(h) for blocks in alloc._pool.values() for h in blocks}
    assert pooled == set(alloc._addresses)  # (every block out of the pool was released, none twice)
    alloc.trim()
    assert alloc._addresses == {} and alloc.pooled_bytes == 0


# --- text generation --------------------------------------------------------------------------------------

SIZES = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 256,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "max_position_embeddings": 1024, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
         "initializer_range": 0.25}
LONG = np.random.default_rng(0).integers(3, 256, 200).tolist()  # a 256-token bucket
SHORT = [[5, 6, 7]] * 8  # a batch of 8: the second generation's blocks are of other sizes
GREEDY = {"temperature": 0, "stop_tokens": ()}


def _generations_peak(model) -> tuple[int, int, int]:
    """(peak while generating from the long prompt, peak over that and a batch of short prompts,
    bytes pooled at the end), from an empty pool, the programs already traced and compiled."""
    cv.empty_cache()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        model.generate(LONG, max_new_tokens=1, **GREEDY)
        first = tracemalloc.get_traced_memory()[1] - base
        model.generate(SHORT, max_new_tokens=4, **GREEDY)
        both = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return first, both, get_device("CPU").allocator.pooled_bytes


def test_generation_gives_back_its_prefill_blocks_and_peaks_lower(monkeypatch):
    cv.manual_seed(0)
    model = models.CausalLM(SIZES).eval()
    model.generate(LONG, max_new_tokens=1, **GREEDY)  # (traced, compiled)
    model.generate(SHORT, max_new_tokens=4, **GREEDY)
    first, both, pooled = _generations_peak(model)

    kept = Allocator.trim  # the same generations, with the prefill's blocks left in the pool
    monkeypatch.setattr(Allocator, "trim", lambda self, since=None: 0 if since is not None else kept(self))
    first_kept, both_kept, pooled_kept = _generations_peak(model)
    monkeypatch.undo()

    assert abs(first - first_kept) < 0.05 * first  # the prefill itself is the same
    # its blocks are given back: the short generations take memory the long one released, instead
    # of coming on top of what it left in the pool (measured with the fused attention, which
    # stores no score matrix: 0.90 MB pooled at the end against 2.53 MB, a peak of 1.64 MB
    # against 2.58 MB)
    assert pooled_kept > 2 * MB and pooled < pooled_kept / 2
    assert both <= first * 1.02 < both_kept * 0.9


def test_decode_steps_allocate_nothing_fresh_after_the_prefill_trim(monkeypatch):
    cv.manual_seed(0)
    model = models.CausalLM(SIZES).eval()
    model.generate(LONG, max_new_tokens=4, **GREEDY)  # (traced, compiled)
    alloc = get_device("CPU").allocator
    tokens = model.stream(LONG, max_new_tokens=12, **GREEDY)
    next(tokens)  # the prefill, then its blocks given back
    next(tokens)  # the first decode step: its blocks are pooled from the warm-up's
    fresh = _counting(alloc, monkeypatch)
    assert len(list(tokens)) == 10 and fresh == []


@pytest.mark.parametrize("nbytes", [0, 1, 4, 100, 4096, 1 << 20, (4 << 20) + 12])
def test_cpu_blocks_start_on_a_cache_line(nbytes):
    """Every block starts on a 64-byte line, fresh or from the pool: numpy's large arrays start
    16 bytes into a page, where each 64-byte AVX-512 vector of a kernel spans two lines (a
    matmul ran 12% slower); the block holds its bytes, and what is written is read back."""
    from corvid.runtime.cpu import ALIGN

    a = CPUAllocator()
    h = a.alloc(nbytes)
    assert a.address(h) % ALIGN == 0 and h.ctypes.data == a.address(h) and h.size >= nbytes
    data = np.arange(nbytes, dtype=np.uint64).astype(np.uint8)
    a.copyin(h, data)
    assert np.array_equal(a.copyout(h, nbytes), data)
    a.free(h, nbytes)
    again = a.alloc(nbytes)
    assert again is h and a.address(again) % ALIGN == 0
    x = cv.Tensor(np.arange(max(nbytes // 4, 1), dtype=np.float32)) * 2
    assert x.realize().node.buffer.handle.ctypes.data % ALIGN == 0


def test_a_buffer_that_outlives_its_device_returns_its_memory_to_that_devices_allocator():
    """A value kept across ``unregister_backend`` and a new registration under the same name
    gives its memory back to the allocator it came from: the new device's pool never hands out
    the old device's memory (with stand-in devices whose memory went away with them, a kernel
    then wrote into freed memory and the process crashed)."""
    from corvid.runtime import device as registry

    registry.register_backend("POOLTEST", "corvid.runtime.cpu:CPUDevice")
    try:
        old = get_device("POOLTEST")
        x = cv.Tensor(np.arange(1000, dtype=np.float32), device="POOLTEST").realize()
        registry.unregister_backend("POOLTEST")
        registry.register_backend("POOLTEST", "corvid.runtime.cpu:CPUDevice")
        new = get_device("POOLTEST")
        assert new is not old
        old_before, new_before = _blocks(old.allocator), _blocks(new.allocator)
        del x
        gc.collect()
        assert _blocks(old.allocator) == old_before + 4000 and _blocks(new.allocator) == new_before
    finally:
        registry.unregister_backend("POOLTEST")
