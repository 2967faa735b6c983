"""The Tensor: a handle on a lazy graph node.

Every operation returns a new Tensor whose node describes the computation; nothing runs until a
value is needed (``realize``, ``numpy``, ``item``, ``tolist``, ``repr``, ``bool``). Methods are
grouped by theme in mixins: :mod:`corvid.ops.movement`, :mod:`corvid.ops.elementwise`,
:mod:`corvid.ops.reduce`. This module holds construction, the primitive builders the mixins use
(type promotion, broadcasting), and the ways to get values out.
"""

from __future__ import annotations

import math
from typing import Any, Iterator, Sequence

import numpy as np

from .errors import ShapeError
from . import dtype as dt
from .autograd import AutogradMixin, cut_under_no_grad, grad_mode, leaf_node
from .dtype import DType, DTypeLike
from .engine import capture as _capture
from .engine.realize import holder
from .engine.realize import realize as _realize
from .engine.schedule import ScheduledKernel, create_schedule
from .graph.node import COMPARISON, Node, Op, node
from .graph.symbolic import Num, Sym
from .ops.elementwise import ElementwiseMixin
from .ops.movement import MovementMixin
from .ops.reduce import ReduceMixin
from .runtime.device import Buffer, canonical_device

Scalar = bool | int | float | complex


class Size(int):
    """An element count that is also PyTorch's ``size()`` method: ``int(x.size)`` is the count,
    ``x.size()`` the shape (a tuple) and ``x.size(d)`` dimension ``d`` (negative counts from the end)."""

    def __new__(cls, count: int, shape: tuple[int, ...]) -> Size:
        out = super().__new__(cls, count)
        out.shape = shape
        return out

    def __call__(self, dim: int | None = None) -> Any:
        if dim is None:
            return self.shape
        from .errors import AxisError
        from .ops.movement import normalize_axis

        if not self.shape:
            raise AxisError(f"size: dimension {dim} of a 0-d tensor (it has none)")
        return self.shape[normalize_axis(dim, len(self.shape), "size: dim")]


class SymSize:
    """The element count of a tensor with a symbolic size (inside a ``jit`` trace with ``dynamic``
    sizes): the count as an expression (arithmetic and comparisons act on it), callable like
    :class:`Size`."""

    __slots__ = ("count", "shape")

    def __init__(self, count: Sym, shape: tuple):
        self.count, self.shape = count, shape

    __call__ = Size.__call__

    def __bool__(self) -> bool:
        return bool(self.count != 0) if isinstance(self.count, Num) else True  # (symbolic sizes are >= 2)

    def __repr__(self) -> str:
        return repr(self.count)


def _delegate(name: str) -> Any:
    return lambda self, *a: getattr(self.count, name)(*(x.count if isinstance(x, SymSize) else x for x in a))


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__floordiv__", "__rfloordiv__",
              "__mod__", "__rmod__", "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__hash__", "__index__",
              "__int__", "__float__", "__truediv__", "__rtruediv__", "__neg__"):
    setattr(SymSize, _name, _delegate(_name))


class Tensor(MovementMixin, ElementwiseMixin, ReduceMixin, AutogradMixin):
    """An n-dimensional array computed lazily on a device.

    ``Tensor(data, dtype=None, device=None, requires_grad=False)`` accepts a Python scalar, a
    nested list/tuple of them, a numpy array (copied) or another Tensor (shared, no copy). Without
    ``dtype``, Python floats give ``float32``, complex numbers ``complex64``, ints ``int64``, bools
    ``bool``; numpy arrays keep their dtype (complex64 and complex128 included). ``requires_grad=True`` makes a leaf for :meth:`backward` (see
    :mod:`corvid.autograd`); ``grad`` holds its accumulated gradient (None until backward).
    ``device`` defaults to the default device (:func:`corvid.set_default_device`); a Tensor given
    with another device is copied there (:meth:`to`); a list of devices replicates the value on each.

    >>> import corvid as cv
    >>> x = cv.Tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> (x * 2 + 1).exp().sum(axis=1).shape
    (2,)
    """

    __slots__ = {
        "node": """The graph node this tensor is a handle on (:class:`corvid.graph.node.Node`): its
        operation, sources, dtype and shape. Ops build new nodes; nothing is computed until a value
        is needed, and a realized tensor's node is a ``BUFFER``.

        >>> x = cv.Tensor([1.0, 2.0])
        >>> x.node.op, (x + 1).node.op
        (<Op.BUFFER: ...>, <Op.ADD: ...>)
        """,
        "device": """The name of the device holding this tensor (``'CPU'``, ``'CPU:1'``, ``'CUDA'``...),
        or a tuple of names for a tensor sharded or replicated over several (:meth:`shard`).

        >>> cv.Tensor([1.0, 2.0]).device
        'CPU'
        >>> cv.Tensor([1.0, 2.0], device="CPU:1").device
        'CPU:1'
        """,
        "_grad": None,
        "__weakref__": None,
    }
    __array_priority__ = 1000  # numpy defers to our reflected operators

    def __init__(self, data: Any, dtype: DTypeLike | None = None, device: str | None = None,
                 requires_grad: bool = False):
        self._grad: Tensor | None = None
        self.node = self._init_node(data, dtype, device)
        if requires_grad:
            self.requires_grad_()

    def _init_node(self, data: Any, dtype: DTypeLike | None, device: str | None) -> Node:
        if isinstance(data, Tensor):
            self.device = data.device if device is None else canonical_device(device)
            data = data.to(self.device)
            return data.node if dtype is None else data.astype(dtype).node
        self.device = canonical_device(device)
        target = None if dtype is None else dt.to_dtype(dtype)
        if isinstance(data, (bool, int, float, complex)) and not isinstance(data, np.generic):
            if isinstance(data, complex) and target is not None and not target.is_complex:
                raise TypeError(f"cannot make a {target.name} tensor from the complex number {data!r}; "
                                "take .real or .imag first")
            d = target or dt.python_scalar_dtype(data)
            _check_int_fill(data, d, target is not None, "Tensor")
            return _const_node(data, d, ())
        if type(self.device) is tuple:  # replicated: made on the first device, copied to the others
            return Tensor(data, dtype, self.device[0]).to(self.device).node
        arr = _to_numpy(data, target)
        buf = Buffer(self.device, dt.from_numpy(arr.dtype), arr.size)
        if arr.size:
            buf.copyin(arr)
        return node(Op.BUFFER, (), buf, buf.dtype, arr.shape)

    @classmethod
    def _from_node(cls, n: Node, device: str) -> Tensor:
        t = cls.__new__(cls)
        t.node, t.device, t._grad = n, device, None
        return t

    @property
    def grad(self) -> Tensor | None:
        """The gradient ``backward()`` accumulated into this leaf (None until then)."""
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None and not isinstance(value, Tensor):
            raise TypeError(f"grad must be a Tensor or None, got {type(value).__name__}")
        _capture.note_mutation(self, "grad")
        self._grad = value

    # --- metadata ----------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The size of each dimension, a tuple of ints (``()`` for a 0-d tensor).

        >>> cv.Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).shape
        (2, 3)
        >>> cv.Tensor(5.0).shape
        ()
        """
        return self.node.shape

    @property
    def dtype(self) -> DType:
        """The element type, a :class:`corvid.DType` (``cv.float32``, ``cv.int64``, ...).

        >>> cv.Tensor([1.0, 2.0]).dtype, cv.Tensor([1, 2]).dtype
        (corvid.float32, corvid.int64)
        """
        return self.node.dtype

    @property
    def ndim(self) -> int:
        """The number of dimensions, ``len(x.shape)``.

        >>> cv.zeros(2, 3, 4).ndim, cv.Tensor(1.0).ndim
        (3, 0)
        """
        return len(self.node.shape)

    @property
    def size(self) -> Size:
        """The element count, an int (the Array API's ``x.size``), that PyTorch code may also call:
        ``x.size()`` is the shape and ``x.size(d)`` one dimension.

        >>> x = cv.zeros(2, 3)
        >>> x.size, x.size(), x.size(-1)
        (6, (2, 3), 3)
        """
        n = self.node.numel
        return Size(n, self.node.shape) if type(n) is int else SymSize(n, self.node.shape)

    def numel(self) -> int:
        """The number of elements, the product of the shape (PyTorch's ``numel()``; ``nelement()``
        is the same method).

        >>> cv.zeros(2, 3).numel(), cv.Tensor(1.0).numel(), cv.zeros(4, 0).numel()
        (6, 1, 0)
        """
        return self.node.numel

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # --- running -----------------------------------------------------------------------------------
    def schedule(self) -> list[ScheduledKernel]:
        """The kernels realizing this tensor would run (name, IR, generated source), running nothing.

        Elementwise ops fuse: ``(x * 2 + 1).exp()`` is one kernel.

        >>> x = cv.Tensor([1.0, 2.0, 3.0])
        >>> len((x * 2 + 1).exp().schedule())
        1
        """
        return create_schedule([self.node], self.device)

    def realize(self) -> Tensor:
        """Compute this tensor now; returns self. Afterwards it is backed by one contiguous buffer.

        A tensor that gradients can flow through keeps its graph (the node just gains the buffer);
        a ``requires_grad`` leaf keeps its mark around the computed value. See :func:`corvid.realize`
        to compute several tensors in one schedule.

        >>> y = cv.Tensor([1.0, 2.0]) * 3
        >>> y.node.op
        <Op.MUL: ...>
        >>> y.realize() is y, y.node.op
        (True, <Op.BUFFER: ...>)
        """
        n = self.node
        if n.op is Op.VAR and n.buffer is None and n.arg.kind == "leaf":
            self.node = leaf_node(Tensor._from_node(n.src[0], self.device).realize().node, n.arg)
        elif n.op is not Op.BUFFER:
            h = holder(n) if n.op is Op.CONST else n
            if h.buffer is not None and h.buffer.device != self.device:
                h = on_device(h, self.device)
            _realize([h], self.device)
            if not n.traced:
                self.node = node(Op.BUFFER, (), h.buffer, n.dtype, n.shape)
        return self

    def numpy(self) -> np.ndarray:
        """A numpy copy of the value (bfloat16 and the 8-bit floats come back as ml_dtypes arrays).

        Computes the tensor first (:meth:`realize`).

        >>> (cv.arange(3) * 2).numpy()
        array([0, 2, 4])
        >>> cv.Tensor([0.5], dtype=cv.float16).numpy().dtype
        dtype('float16')
        """
        self.realize()
        return self.node.buffer.numpy().reshape(self.shape)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def item(self) -> Scalar:
        """The value of a one-element tensor (of any shape) as a Python scalar: a float, int, bool
        or complex by dtype. ValueError for any other element count.

        >>> cv.Tensor([1.0, 2.0, 3.0]).sum().item()
        6.0
        >>> cv.Tensor([[7]]).item()
        7
        """
        if self.node.numel != 1:
            raise ShapeError(f"item() needs a tensor with one element, this one has shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self) -> Any:
        """The value as nested Python lists of Python scalars (a scalar for a 0-d tensor), as
        numpy's ``tolist``.

        >>> cv.Tensor([[1, 2], [3, 4]]).tolist()
        [[1, 2], [3, 4]]
        >>> cv.Tensor(2.5).tolist()
        2.5
        """
        return self.numpy().tolist()

    def __bool__(self) -> bool:
        if self.node.numel != 1:
            raise ShapeError(f"the truth value of a tensor with shape {self.shape} is ambiguous; use .any() or .all()")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if not (self.dtype.is_int or self.dtype.is_bool):
            raise TypeError(f"only integer tensors can be used as an index, not {self.dtype.name}")
        return int(self.item())

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", prefix="Tensor(")
        extra = "" if self.dtype in (dt.float32, dt.int64, dt.bool_) else f", dtype={self.dtype.name}"
        dev = "" if self.device == "CPU" else f", device={self.device!r}"  # (tuple: a sharded tensor)
        return f"Tensor({body}{extra}{dev})"

    def _repr_html_(self) -> str:
        """Jupyter's rich display: shape, dtype and device, then the values (abbreviated when big)."""
        from .display import tensor_html

        return tensor_html(self)

    def __hash__(self) -> int:
        return id(self)

    def contiguous(self) -> Tensor:
        """A tensor stored in its own buffer (a copy, unless this one already is).

        Views (a transpose, a slice) are index rewrites read by the kernels that use them; this makes
        their layout the stored one (PyTorch's ``contiguous``). Lazy, like every op.

        >>> x = cv.Tensor([[1.0, 2.0], [3.0, 4.0]])
        >>> x.contiguous() is x
        True
        >>> x.T.contiguous().tolist()
        [[1.0, 3.0], [2.0, 4.0]]
        """
        if self.node.op is Op.BUFFER:
            return self
        return self._new(node(Op.CONTIGUOUS, (self.node,), None, self.dtype, self.shape))

    def astype(self, dtype: DTypeLike) -> Tensor:
        """Value conversion to ``dtype`` (floats to ints truncate toward zero; to bool is ``!= 0``).

        Complex to a real dtype keeps the real part (numpy's result, without its ComplexWarning);
        complex to bool is true where either part is non-zero; real to complex has imaginary part 0.
        Returns the tensor itself when it has ``dtype`` already.

        >>> cv.Tensor([1.7, -1.7, 0.0]).astype(cv.int32).tolist()
        [1, -1, 0]
        >>> cv.Tensor([1.7, -1.7, 0.0]).astype("bool").tolist()
        [True, True, False]
        """
        d = dt.to_dtype(dtype)
        if d is self.dtype:
            return self
        return self._new(node(Op.CAST, (self.node,), d, d, self.shape))

    def bitcast(self, dtype: DTypeLike) -> Tensor:
        """Reinterpret the bits as ``dtype`` of the same item size (no value conversion, unlike
        :meth:`astype`). ValueError when the item sizes differ.

        >>> cv.Tensor([1.0, -0.0]).bitcast(cv.uint32).tolist()
        [1065353216, 2147483648]
        """
        d = dt.to_dtype(dtype)
        if d.itemsize != self.dtype.itemsize:
            raise ValueError(f"bitcast needs equal item sizes: {self.dtype.name} has {self.dtype.itemsize} "
                             f"bytes, {d.name} has {d.itemsize}")
        return self if d is self.dtype else self._new(node(Op.BITCAST, (self.node,), d, d, self.shape))

    def to(self, device: Any) -> Tensor:
        """This tensor on ``device``: itself when it is there already, else a lazy copy (a COPY
        node, computed when needed; gradients flow back to this tensor's device).

        ``device`` is a name (``'CPU:1'``, ``'CL'``) or a list of devices to replicate onto (as
        :meth:`shard` with ``axis=None``); a sharded tensor moved to one device is gathered there.
        ValueError for an unknown device.

        >>> import corvid as cv
        >>> cv.Tensor([1.0, 2.0]).to("CPU:1").device
        'CPU:1'
        """
        dev = canonical_device(device)
        if dev == self.device:
            return self
        if type(dev) is tuple:
            return self.shard(dev, axis=None)
        return copy_to(self, dev)

    def shard(self, devices: Sequence[str], axis: int | None = None) -> Tensor:
        """This tensor split along ``axis`` over ``devices`` (a list of at least two), one part per
        device, or replicated on every device when ``axis`` is None. See :mod:`corvid.sharding`.

        Parts differ by at most one element along the axis (the first ones are larger, like
        ``numpy.array_split``); ValueError when the axis has fewer elements than there are devices,
        for a bad axis or device. Lazy and differentiable, like :meth:`to`.

        >>> import corvid as cv
        >>> x = cv.arange(6.0).reshape(3, 2).shard(["CPU:0", "CPU:1"], axis=0)
        >>> x.device, (x * 2).sum(axis=0).tolist()
        (('CPU', 'CPU:1'), [12.0, 18.0])
        """
        from .sharding import shard

        return shard(self, devices, axis)

    # --- Array API protocol (see corvid/array_api.py and corvid/dlpack.py) ---------------------------
    def __array_namespace__(self, /, *, api_version: str | None = None) -> Any:
        """The ``corvid`` module, which implements the Array API standard (2025.12).

        ValueError for an ``api_version`` that is not a standard revision."""
        import corvid
        from .array_api import API_VERSIONS

        if api_version is not None and api_version not in API_VERSIONS:
            raise ValueError(f"unsupported Array API version {api_version!r}; corvid implements "
                             f"{', '.join(API_VERSIONS)}")
        return corvid

    def to_device(self, device: str, /, *, stream: Any = None) -> Tensor:
        """This tensor on ``device`` (itself if already there): the Array API name of :meth:`to`.
        ``stream`` must be None (ValueError otherwise).

        >>> cv.Tensor([1.0, 2.0]).to_device("CPU:1").device
        'CPU:1'
        """
        if stream is not None:
            raise ValueError(f"to_device: streams are not supported, got {stream!r}")
        return self.to(device)

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """A DLPack capsule sharing this tensor's (realized) buffer: ``np.from_dlpack(t)`` is a view."""
        from .dlpack import dlpack_capsule

        return dlpack_capsule(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        from .dlpack import DLPACK_CPU, is_cpu

        if not is_cpu(self.device):
            raise BufferError(f"DLPack is only implemented for CPU tensors (CPU, CPU:1, ...), this one is on "
                              f"{self.device}; move it with .to('CPU') first")
        return (DLPACK_CPU, 0)  # every logical CPU device's memory is host memory

    def __complex__(self) -> complex:
        return complex(self.item())

    def __ifloordiv__(self, other): return self._inplace(self // other, "//=")  # noqa: E704
    def __imod__(self, other): return self._inplace(self % other, "%=")  # noqa: E704
    def __ipow__(self, other): return self._inplace(self ** other, "**=")  # noqa: E704
    def __imatmul__(self, other): return self._inplace(self @ other, "@=")  # noqa: E704
    def __iand__(self, other): return self._inplace(self & other, "&=")  # noqa: E704
    def __ior__(self, other): return self._inplace(self | other, "|=")  # noqa: E704
    def __ixor__(self, other): return self._inplace(self ^ other, "^=")  # noqa: E704
    def __ilshift__(self, other): return self._inplace(self << other, "<<=")  # noqa: E704
    def __irshift__(self, other): return self._inplace(self >> other, ">>=")  # noqa: E704

    # --- builders the mixins use -------------------------------------------------------------------
    def _new(self, n: Node) -> Tensor:
        if n.traced and not grad_mode.enabled:  # O(1) unless a transform or a leaf is involved
            n = cut_under_no_grad(n)
        return Tensor._from_node(n, self.device)

    def _const(self, value: Scalar, dtype: DType | None = None, shape: tuple[int, ...] | None = None) -> Tensor:
        return self._new(_const_node(value, dtype or self.dtype, self.shape if shape is None else shape))

    def _operand(self, x: Any, dtype: DType, shape: tuple[int, ...] = ()) -> Tensor:
        if isinstance(x, Tensor):
            if x.device != self.device:
                raise ValueError(f"tensors on different devices: {self.device} and {x.device}; move one "
                                 f"explicitly with .to({self.device!r}) or .to({x.device!r})")
            return x.astype(dtype)
        if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
            if type(x) is int and dtype.is_int and not _fits(x, dtype):
                raise OverflowError(f"Python integer {x} is out of bounds for {dtype.name}")
            return self._const(x, dtype, shape)
        if isinstance(x, complex) and not isinstance(x, np.generic):
            return self._const(x, dtype, shape)
        if isinstance(x, Sym):  # a symbolic size (a jit trace): its value, computed by the kernel
            return self._const(x, dtype, shape)
        return Tensor(x, device=self.device).astype(dtype)

    def _elementwise(self, op: Op, *others: Any, dtype: DType | None = None, out: DType | None = None,
                     name: str = "") -> Tensor:
        """Apply a primitive to self and ``others`` after promotion to a common dtype and broadcasting.

        ``dtype`` forces the operand dtype; ``out`` the result dtype (comparisons give bool)."""
        if len(others) == 1:  # fast paths (the same graph as the general path below, built directly)
            o, sn = others[0], self.node
            if isinstance(o, Tensor):  # same dtype: no cast
                on = o.node
                if on.dtype is sn.dtype and (dtype is None or dtype is sn.dtype) and o.device == self.device:
                    if on.shape == sn.shape:  # (and no broadcast)
                        return self._new(node(op, (sn, on), None,
                                              out or (dt.bool_ if op in COMPARISON else sn.dtype), sn.shape))
                    shape = _broadcast2(sn.shape, on.shape)
                    if shape is not None:  # (the nodes broadcast_to makes, below)
                        return self._new(node(op, (_broadcast_node(sn, shape), _broadcast_node(on, shape)), None,
                                              out or (dt.bool_ if op in COMPARISON else sn.dtype), shape))
            else:
                kind = type(o)  # exact Python scalars only (numpy scalars subclass float but are not weak)
                if isinstance(o, Sym):  # a symbolic size (a jit trace): a weak Python int, read at run time
                    common = dtype or _weak_result(sn.dtype, int)
                    return self._new(node(op, (sn, _const_node(o, common, sn.shape)), None,
                                          out or (dt.bool_ if op in COMPARISON else common), sn.shape))
                if kind is float or kind is int or kind is bool:
                    common = dtype or _weak_result(sn.dtype, kind)
                    if kind is int and common.is_int and not _fits(o, common):
                        return _int_out_of_range(self, op, o, common, self.shape, first=True)
                    if common is sn.dtype:
                        return self._new(node(op, (sn, _scalar_operand(o, common, sn.shape)), None,
                                              out or (dt.bool_ if op in COMPARISON else common), sn.shape))
        items = (self, *others)
        for x in items:
            if not isinstance(x, (Tensor, bool, int, float, complex, np.ndarray, np.generic, list, tuple, Sym)):
                raise TypeError(f"unsupported operand type for {name or op.name.lower()}: {type(x).__name__}")
        common = dtype or result_type(*items)
        shape = broadcast_shapes(*(x.shape if isinstance(x, Tensor) else np.shape(x) for x in items))
        if common.is_int:
            for x in others:
                if type(x) is int and not _fits(x, common):
                    return _int_out_of_range(self, op, x, common, shape, first=True)
        srcs = tuple(self._operand(x, common).broadcast_to(shape).node for x in items)
        res = out or (dt.bool_ if op in COMPARISON else common)
        return self._new(node(op, srcs, None, res, shape))


def _broadcast2(a: tuple, b: tuple) -> tuple[int, ...] | None:
    """The broadcast of two shapes of constant sizes, or None (symbolic sizes, shapes that do not
    broadcast, or a result too large to address: the general path sorts those out, and raises)."""
    if len(a) < len(b):
        a, b = b, a
    lead = len(a) - len(b)
    out = list(a[:lead])
    for x, y in zip(a[lead:], b):
        if type(x) is not int or type(y) is not int:
            return None
        out.append(x if x == y or y == 1 else y if x == 1 else -1)
    for x in out:
        if type(x) is not int or x < 0:
            return None
    shape = tuple(out)
    return shape if math.prod(shape) <= _MAX_ELEMENTS else None


_MAX_ELEMENTS = 2**50  # (far below any dtype's byte limit: larger broadcasts take the checked path)


def _broadcast_node(n: Node, shape: tuple[int, ...]) -> Node:
    """``n`` broadcast to ``shape`` (which it broadcasts to): the RESHAPE to the same rank, then the
    EXPAND, that ``Tensor.broadcast_to`` builds."""
    if n.shape == shape:
        return n
    if len(n.shape) != len(shape):
        old = (1,) * (len(shape) - len(n.shape)) + n.shape
        n = node(Op.RESHAPE, (n,), old, n.dtype, old)
        if old == shape:
            return n
    return node(Op.EXPAND, (n,), shape, n.dtype, shape)


def result_type(*items: Any) -> DType:
    """Array API promotion over tensors, numpy arrays and weak Python scalars."""
    args = []
    for x in items:
        if isinstance(x, Tensor):
            args.append(x.dtype)
        elif isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic):
            args.append(x)
        elif isinstance(x, Sym):  # a symbolic size: a weak Python int
            args.append(1)
        elif isinstance(x, (list, tuple)):  # the dtype Tensor(x) would get (float lists: float32)
            args.append(dt.from_numpy(_to_numpy(x, None).dtype))
        else:
            args.append(dt.from_numpy(np.asarray(x).dtype))
    return dt.result_type(*args)


_WEAK: dict[tuple[DType, type], DType] = {}


def _weak_result(d: DType, kind: type) -> DType:
    """``result_type(d, a Python scalar of type kind)``, cached (it depends only on the type)."""
    r = _WEAK.get((d, kind))
    if r is None:
        r = _WEAK[(d, kind)] = dt.result_type(d, kind(0))
    return r


_INT_RANGE: dict[DType, tuple[int, int]] = {}


def _fits(value: int, d: DType) -> bool:
    """Whether the Python int ``value`` is in the range of the integer dtype ``d`` (every integer
    scalar operand asks: one dict lookup)."""
    r = _INT_RANGE.get(d)
    if r is None:
        info = dt.iinfo(d)
        r = _INT_RANGE[d] = (info.min, info.max)
    return r[0] <= value <= r[1]


def _check_int_fill(value: Any, d: DType, cast: bool, what: str) -> None:
    """OverflowError for a Python int fill value that ``d`` cannot take: with an explicit dtype
    (``cast``) the value converts as a C cast does (-1 as uint8 is 255, as in PyTorch) unless no
    64-bit integer holds it; with an inferred one it must be in range."""
    if type(value) is int and d.is_int and not (-(1 << 63) <= value < (1 << 64) if cast else _fits(value, d)):
        raise OverflowError(f"{what}: Python integer {value} is out of bounds for {d.name}")


def _int_out_of_range(t: Tensor, op: Op, value: int, d: DType, shape: tuple[int, ...], first: bool) -> Tensor:
    """``t op value`` (``value op t`` when not ``first``) for a Python int outside the range of
    the integer dtype ``d`` that the operation computes in: a comparison has the answer numpy 2
    gives (every element is below such a value, or above it, and equals none); anything else
    raises OverflowError, as numpy 2 and JAX do (a C cast would wrap the value silently)."""
    if op not in COMPARISON:
        raise OverflowError(f"Python integer {value} is out of bounds for {d.name}")
    if op is Op.CMPLT:  # above the range: t < value everywhere; below it: value < t everywhere
        answer = (value > 0) == first
    else:
        answer = op is Op.CMPNE
    return Tensor._from_node(_const_node(answer, dt.bool_, shape), t.device)


# the broadcast literals of the latest scalar operands (``x + 1``, ``x * lr``): each is three
# nodes to build, and an eager loop builds the same few again at every step. Bounded: emptied
# whole when full (one atomic call, where evicting one entry could race another thread's)
_SCALARS: dict[tuple, Node] = {}
SCALARS_KEPT = 256


def _scalar_operand(value: Scalar, d: DType, shape: tuple[int, ...]) -> Node:
    """The node ``Tensor._operand(value, d).broadcast_to(shape)`` builds: CONST, reshaped to all-ones
    dimensions, expanded (each step only where it changes the shape). ``value`` is a Python bool,
    int or float (a float's key tells -0.0 from 0.0; nan is never equal to itself, so it misses)."""
    key = (type(value), value, d, shape) if type(value) is not float else \
        (float, value, math.copysign(1.0, value), d, shape)
    found = _SCALARS.get(key)
    if found is not None:
        return found
    c = _const_node(value, d, ())
    if shape:
        ones = (1,) * len(shape)
        c = node(Op.RESHAPE, (c,), ones, d, ones)
        if shape != ones:
            c = node(Op.EXPAND, (c,), shape, d, shape)
    if len(_SCALARS) >= SCALARS_KEPT:
        _SCALARS.clear()
    _SCALARS[key] = c
    return c


def realize(*tensors: Tensor) -> tuple[Tensor, ...]:
    """Compute several tensors in one schedule (``cv.realize(loss, *params)``): their kernels are
    planned together (shared work runs once) and compiled in parallel. Returns the tensors, each
    realized as by :meth:`Tensor.realize`. TypeError for anything that is not a Tensor.

    >>> x = cv.Tensor([1.0, 2.0, 3.0])
    >>> total, doubled = cv.realize(x.sum(), x * 2)
    >>> total.item(), doubled.tolist()
    (6.0, [2.0, 4.0, 6.0])
    """
    if len(tensors) == 1 and type(tensors[0]) is Tensor:  # (one: what its realize does, without the set-up)
        tensors[0].realize()
        return tensors
    roots: list[Node] = []
    devices: list[Any] = []
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"realize: expected Tensors, got {type(t).__name__}")
        n = t.node
        if n.op is Op.VAR and n.buffer is None and n.arg.kind == "leaf":
            n = n.src[0]
        if n.op is not Op.BUFFER and n.buffer is None:
            roots.append(holder(n))
            devices.append(t.device)
    if roots:  # one schedule, even across devices
        _realize(roots, None, devices)
    for t in tensors:
        t.realize()  # now only rebinds to the computed buffers (``roots`` keeps literals' holders alive)
    return tensors


def on_device(h: Node, device: Any) -> Node:
    """``h``, or a copy of it to ``device`` when its value was computed on another device already.

    Only a graph of constants (``zeros``, ``arange``) can be that: it mentions no buffer, so it is
    the same (hash-consed) node on every device, and the first device to realize it holds the value."""
    b = h.buffer
    if b is None or b.device == device:
        return h
    return node(Op.COPY, (h,), (b.device, device), h.dtype, h.shape)


def copy_to(t: Tensor, destination: Any) -> Tensor:
    """``t`` copied to ``destination`` (a device name, or a :class:`corvid.sharding.Layout`): a
    COPY node over ``t``'s value (a literal is stored first: a COPY reads a stored source)."""
    n = node(Op.COPY, (holder(t.node),), (t.device, destination), t.dtype, t.shape)
    out = t._new(n)
    out.device = destination if type(destination) is str else destination.devices
    return out


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """The broadcast of ``shapes`` (numpy rules, as ``numpy.broadcast_shapes``): shapes are aligned
    at their last dimension and each size must be equal or 1. ValueError naming the shapes if
    they conflict.

    >>> cv.broadcast_shapes((5, 1, 4), (3, 1))
    (5, 3, 4)
    >>> cv.broadcast_shapes((2,), ())
    (2,)
    """
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(ndim):
        sizes = {s[len(s) - ndim + i] for s in shapes if len(s) - ndim + i >= 0} - {1}
        if len(sizes) > 1:
            raise ShapeError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast together")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _const_node(value: Scalar, d: DType, shape: tuple[int, ...]) -> Node:
    if isinstance(value, Sym):  # a symbolic size as a value (the kernel computes it from its sizes)
        if isinstance(value, Num):
            value = value.value
        elif d.is_bool or d.is_complex:
            raise TypeError(f"a symbolic size cannot be a {d.name} value")
    if isinstance(value, Sym):
        v: Scalar = value
    elif d.is_bool:
        v = bool(value)
    elif d.is_float:
        v = float(value)
    elif d.is_complex:
        v = complex(value)
    else:
        v = int(value)
        info = dt.iinfo(d)
        if not info.min <= v <= info.max:  # wrap like a C cast / numpy astype
            v = ((v - info.min) % (1 << info.bits)) + info.min
    scalar = node(Op.CONST, (), v, d, ())
    if not shape:
        return scalar
    return node(Op.EXPAND, (node(Op.RESHAPE, (scalar,), (1,) * len(shape), d, (1,) * len(shape)),), shape, d, shape)


def _to_numpy(data: Any, target: DType | None) -> np.ndarray:
    if target is not None and not target.is_complex and getattr(getattr(data, "dtype", None), "kind", "") == "c":
        raise TypeError(f"cannot make a {target.name} tensor from complex data; take .real or .imag first")
    if isinstance(data, (list, tuple)) and target is None:
        flat = list(_flatten(data))
        if any(isinstance(x, (complex, np.complexfloating)) for x in flat):
            target = dt.default_complex
        elif flat and all(isinstance(x, bool) for x in flat):
            target = dt.bool_
        elif flat and all(isinstance(x, (bool, int)) for x in flat):
            target = dt.default_int
        else:
            target = dt.default_float
    try:
        arr = np.asarray(data) if target is None else np.asarray(data, dtype=target.np)
    except (ValueError, TypeError) as e:
        raise ValueError(f"cannot make a tensor from {type(data).__name__}: {e}") from None
    if arr.dtype == object:
        raise TypeError("cannot make a tensor from ragged or non-numeric data")
    if target is None and arr.dtype.kind in "fiubc" and arr.dtype.byteorder not in "=|":
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return np.ascontiguousarray(arr).reshape(arr.shape)  # ascontiguousarray makes 0-d arrays 1-d


def _flatten(x: Any) -> Iterator[Any]:
    """The leaves of nested lists and tuples, in order. An explicit stack of iterators, so that
    nesting of any depth reaches numpy, which names its dimension limit (64)."""
    stack = [iter((x,))]
    while stack:
        for y in stack[-1]:
            if isinstance(y, (list, tuple)):
                stack.append(iter(y))
                break
            yield y
        else:
            stack.pop()

