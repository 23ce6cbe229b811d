"""The shipped example kernels (``ncrtl kernels``, ``ncrtl run --example NAME``).

Each is an NKI kernel file written as for AWS's toolchain (``import nki``), with the inputs it
runs on, a float64 numpy reference and the bound its outputs keep from it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

__all__ = ["Example", "EXAMPLES", "load", "load_file", "load_module", "HERE"]

HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class Example:
    """A shipped kernel: ``file`` (in this folder) and ``function``, ``inputs(rng)`` (the arrays
    it runs on), ``reference(*inputs)`` (float64 outputs), ``bound(reference)`` (the largest
    error allowed, per element), ``kwargs`` and a one-line ``description``.

    ``scales``: the kernel is written with ``nl.tile_size`` (no fixed 128 or 512), and
    ``inputs(rng, p, f)`` gives its inputs for a core of ``p`` partitions whose PSUM bank row
    holds ``f`` FP32 values (:meth:`arrays`): the same shapes in tiles of that core."""

    name: str
    file: str
    function: str
    inputs: object
    reference: object
    bound: object
    description: str
    kwargs: dict = field(default_factory=dict)
    lnc: int = 1
    scales: bool = False

    def arrays(self, rng, core=None):
        """The inputs for a kernel traced on ``core`` (a kernel
        :class:`~ncrtl.model.kernel.stream.Core`; None: a NeuronCore's 128 partitions and
        512-value bank rows).  ``ValueError`` for an example that does not scale to the
        core."""
        p, f = (128, 512) if core is None else (core.partitions, core.psum_bank_bytes // 4)
        if (p, f) == (128, 512):
            return self.inputs(rng)
        if not self.scales:
            raise ValueError(
                f"example {self.name} is written for 128 partitions and PSUM bank rows of 512 "
                f"FP32 values; it does not scale to {p} partitions and rows of {f}"
            )
        return self.inputs(rng, p, f)

    @property
    def path(self):
        return os.path.join(HERE, self.file)


def _bf16(rng, *shape):
    return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)


def _f64(a):
    return np.asarray(a).astype(np.float64)


def _matmul_ref(lhsT, rhs):
    return [_f64(lhsT).T @ _f64(rhs)]


def _dot_bound(k, out_ulp):
    """The bound of a K-term dot product of exactly represented inputs accumulated in FP32 and
    rounded once to an output of unit roundoff ``out_ulp``: ``|ref| * out_ulp + K * 2^-24 *
    sum|a||b|`` (a rounding per FP32 step, then the output's)."""

    def bound(ref, inputs):
        a, b = (_f64(x) for x in inputs[:2])
        mag = np.abs(a).T @ np.abs(b)
        return np.abs(ref) * out_ulp + k * 2.0**-24 * mag

    return bound


def _exact(ref, inputs):
    return np.zeros_like(ref)


def _fp8(rng, *shape):
    return (rng.standard_normal(shape) * 4).astype(ml_dtypes.float8_e4m3)


def _mx_ref(lhsT, rhs):
    a, b = _f64(lhsT), _f64(rhs)
    (p, m), n = (a.shape[0], a.shape[1] // 4), b.shape[1] // 4
    # partition p, free 4f + j holds contraction index j * P + p of column f
    a = a.reshape(p, m, 4).transpose(2, 0, 1).reshape(4 * p, m)
    b = b.reshape(p, n, 4).transpose(2, 0, 1).reshape(4 * p, n)
    return [a.T @ b]


def _mx_bound(ref, inputs):
    # MXFP8 e4m3fn keeps 3 fraction bits: each quantized element within 2^-4 relative of its
    # input (plus the group's flush of tiny elements); bound by 2^-3 of the magnitudes' product.
    a, b = (_f64(x) for x in inputs)
    (p, m), n = (a.shape[0], a.shape[1] // 4), b.shape[1] // 4
    a = np.abs(a).reshape(p, m, 4).transpose(2, 0, 1).reshape(4 * p, m)
    b = np.abs(b).reshape(p, n, 4).transpose(2, 0, 1).reshape(4 * p, n)
    amax = max(np.abs(a).max(), np.abs(b).max())
    return 2.0**-3 * (a.T @ b) + 4 * p * 2.0**-6 * amax * amax


def _sparse_inputs(rng, p=128, f=512, ratio=4):
    """Seed 000's sparse matmul inputs at compression ratio ``ratio``: a dense bf16 weight
    ``[ratio p, p]`` pruned to 4:4R (the 4 largest magnitudes of every ``4 ratio`` rows of a
    column kept), compressed to ``[p, p]`` with its packed tags (``compress``, whose tags are
    ``squeeze_tags`` of the kept positions), and a dense bf16 moving ``[ratio p, f]`` as
    ``[p, ratio, f]``."""
    from ncrtl.model.modes import SPARSE_GROUP
    from ncrtl.model.tensor_engine import compress

    w = rng.standard_normal((ratio * p, p))
    groups = np.abs(w).reshape(-1, SPARSE_GROUP * ratio, p)
    keep = np.argsort(-groups, axis=1, kind="stable")[:, :SPARSE_GROUP, :]
    mask = np.zeros(groups.shape, bool)
    np.put_along_axis(mask, keep, True, axis=1)
    mask = mask.reshape(w.shape)
    values, tag = compress(np.where(mask, w, 0).astype(ml_dtypes.bfloat16), ratio, mask=mask)
    return [_bf16(rng, ratio * p, f).reshape(p, ratio, f), values, tag]


def _sparse_dense(inputs):
    """The dense operands ``(weight [K R, M], moving [K R, N])`` of sparse matmul inputs."""
    from ncrtl.model.tensor_engine import decompress

    moving, values, tag = inputs
    k, r, n = moving.shape
    return _f64(decompress(values, tag, r)), _f64(moving).reshape(k * r, n)


def _sparse_ref(*inputs):
    w, x = _sparse_dense(inputs)
    return [w.T @ x]


def _sparse_bound(ref, inputs):
    # FP32 result: a rounding per compressed row (K steps), none after
    w, x = _sparse_dense(inputs)
    return inputs[0].shape[0] * 2.0**-24 * (np.abs(w).T @ np.abs(x))


EXAMPLES = {
    e.name: e
    for e in (
        Example(
            "matmul_basic",
            "matmul.py",
            "matmul_basic",
            lambda rng, p=128, f=512: [_bf16(rng, p, p // 2), _bf16(rng, p, f)],
            _matmul_ref,
            _dot_bound(128, 2.0**-8),
            "one bf16 tile, 128 x 64 x 512 (the NKI tutorial's first kernel)",
            scales=True,
        ),
        Example(
            "matmul_tiled",
            "matmul.py",
            "matmul_tiled",
            lambda rng, p=128, f=512: [_bf16(rng, 2 * p, 2 * p), _bf16(rng, 2 * p, 2 * f)],
            _matmul_ref,
            _dot_bound(256, 2.0**-8),
            "bf16, tiles in loops, K accumulated in PSUM (256 x 256 x 1024)",
            scales=True,
        ),
        Example(
            "matmul_hoist_load",
            "matmul.py",
            "matmul_hoist_load",
            lambda rng: [_bf16(rng, 256, 256), _bf16(rng, 256, 1024)],
            _matmul_ref,
            _dot_bound(256, 2.0**-8),
            "bf16, the stationary tiles loaded once per M tile",
        ),
        Example(
            "matmul_block_free_dimension",
            "matmul.py",
            "matmul_block_free_dimension",
            lambda rng: [_bf16(rng, 256, 256), _bf16(rng, 256, 1024)],
            _matmul_ref,
            _dot_bound(256, 2.0**-8),
            "bf16, 2 x 2 blocks of tiles in the free dimensions",
        ),
        Example(
            "matmul_fully_optimized",
            "matmul.py",
            "matmul_fully_optimized",
            lambda rng: [_bf16(rng, 1024, 2048), _bf16(rng, 1024, 1024)],
            _matmul_ref,
            # 8 K blocks of one bf16 rounding each (the SBUF accumulation), FP32 inside a block
            lambda ref, inputs: _dot_bound(1024, 2.0**-8)(ref, inputs) * 8,
            "bf16 2048 x 1024 x 1024, blocked in M, N and K, results accumulated in SBUF",
        ),
        Example(
            "matmul_fp8_double_row",
            "more.py",
            "matmul_fp8_double_row",
            lambda rng, p=128, f=512: [_fp8(rng, 2 * p, p), _fp8(rng, 2 * p, f)],
            _matmul_ref,
            _dot_bound(256, 0.0),
            "fp8 (e4m3) in the double-row perf mode, K = 256 in one matmul",
            scales=True,
        ),
        Example(
            "matmul_mx",
            "more.py",
            "matmul_mx",
            lambda rng, p=128, f=512: [_bf16(rng, p, 4 * p), _bf16(rng, p, 4 * f)],
            _mx_ref,
            _mx_bound,
            "MXFP8 on NeuronCore-v4: quantize_mx of both operands, then nc_matmul_mx",
            scales=True,
        ),
        Example(
            "mm_sparse_128_512_cr4",
            "more.py",
            "mm_sparse_128_512_cr4",
            _sparse_inputs,
            _sparse_ref,
            _sparse_bound,
            "seed 000's 4:16 sparse bf16 matmul: a 512 x 128 weight pruned and compressed to "
            "128 x 128 with its tags, by a [128, 4, 512] moving, in one nc_matmul_sparse",
            scales=True,
        ),
        Example(
            "transpose_tensor_engine",
            "more.py",
            "transpose_tensor_engine",
            lambda rng: [_bf16(rng, 128, 96)],
            lambda x: [_f64(x).T],
            _exact,
            "a [128, 96] bf16 transpose on the Tensor Engine (bit for bit)",
        ),
        Example(
            "transpose_dma",
            "more.py",
            "transpose_dma",
            lambda rng: [_bf16(rng, 256, 128)],
            lambda x: [_f64(x).T],
            _exact,
            "a [256, 128] bf16 transpose by the DMA engines into SBUF (bit for bit)",
        ),
        Example(
            "exchange_halves",
            "more.py",
            "exchange_halves",
            lambda rng: [rng.standard_normal((256, 64)).astype(np.float32)],
            lambda x: [np.concatenate([_f64(x)[128:], _f64(x)[:128]])],
            _exact,
            "two cores (kernel[2]) swap halves of a tile with sendrecv",
            lnc=2,
        ),
    )
}


def load_module(path, what="kernel"):
    """The user's Python file ``path`` (a ``what`` file: a kernel, a reference) run as a module,
    ``import nki`` resolving to :mod:`ncrtl.nki`, its folder importable while it runs.  The
    errors of :func:`load_file`, its file's own exceptions as one-line
    :class:`~ncrtl.nki.NkiError` s at their line."""
    import ncrtl.nki as nki

    nki.install_aliases()
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such {what} file")
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        raise ValueError(f"{path}: the {what} file cannot be read: {e.strerror}") from None
    if b"\0" in source:
        raise ValueError(
            f"{path}: not a Python {what} file (it holds binary data); give FILE.py::FUNCTION"
        )
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as e:
        where = f"{path}:{e.lineno}" if e.lineno else path
        raise ValueError(f"{where}: the {what} file does not parse: {e.msg}") from None
    name = f"ncrtl_{what}_" + os.path.splitext(os.path.basename(path))[0]
    folder = os.path.dirname(os.path.abspath(path))
    root, package = _package_of(folder)
    if package:
        # a module of a package (its folder holds __init__.py): its relative imports resolve
        # in that package, whose root stays importable (imports inside its functions)
        name = f"{package}.{os.path.splitext(os.path.basename(path))[0]}"
    # any file name, not only *.py: the loader is named, not found by the suffix
    loader = importlib.machinery.SourceFileLoader(name, path)
    module = importlib.util.module_from_spec(
        importlib.util.spec_from_file_location(name, path, loader=loader)
    )
    if package:
        module.__package__ = package
    sys.path.insert(0, folder)
    if package and root not in sys.path:
        sys.path.append(root)
    try:
        with nki.kernel_code():
            exec(code, module.__dict__)
    finally:
        sys.path.remove(folder)
    return module


def _package_of(folder):
    """``(root, dotted package name)`` of a folder inside a package (each folder up to the
    root holds ``__init__.py``), or ``(None, None)``."""
    parts = []
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        folder, part = os.path.split(folder)
        if not part.isidentifier():
            return None, None
        parts.append(part)
    if not parts:
        return None, None
    return folder, ".".join(reversed(parts))


def load_file(path, function):
    """The kernel ``function`` of the NKI kernel file ``path``, imported with ``import nki``
    resolving to :mod:`ncrtl.nki`.

    Raises
    ------
    ValueError
        No such file, a file that is not Python or does not parse, no such function in it, a
        name that is not a function; an :class:`~ncrtl.nki.NkiError` of one line where the
        file's own code raises (:func:`ncrtl.nki.kernel_error`: the exception and its line).
    """
    import inspect

    import ncrtl.nki as nki

    module = load_module(path, "kernel")
    fn = getattr(module, function, None)
    kernels = sorted(n for n, v in vars(module).items() if isinstance(v, nki.Kernel))
    if fn is None:
        raise ValueError(
            f"{path} has no function {function!r}; its kernels: {', '.join(kernels) or 'none'}"
        )
    if isinstance(fn, nki.Kernel):
        return fn
    if not inspect.isfunction(fn):
        what = (
            "a class"
            if isinstance(fn, type)
            else "a module"
            if inspect.ismodule(fn)
            else f"of type {type(fn).__name__}"
        )
        raise ValueError(
            f"{path}::{function} is not a kernel function (it is {what}); its kernels: "
            f"{', '.join(kernels) or 'none'}"
        )
    return nki.Kernel(fn)


def load(name):
    """The shipped example ``name`` as ``(Example, kernel)``."""
    if name not in EXAMPLES:
        raise ValueError(f"no example {name!r}; the examples: {', '.join(EXAMPLES)}")
    e = EXAMPLES[name]
    k = load_file(e.path, e.function)
    return e, (k[e.lnc] if e.lnc != 1 else k)
