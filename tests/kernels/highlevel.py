"""Kernels for the tests of the language's high-level functions (tests/test_nki_highlevel.py):
each calls one function of ``nki.language`` on the line marked ``call``, so the instructions
its lowering emits are the ones of that line."""

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np


def _operands(arrays, spec):
    """``spec``: per argument of the function, ``"tN"`` (input N loaded into SBUF), ``"hN"``
    (input N as it is, in device memory), ``"pN"`` (input N in PSUM, through a copy) or a
    value passed as it is."""
    out = []
    for s in spec:
        if isinstance(s, str) and s[:1] in "thp" and s[1:].isdigit():
            a = arrays[int(s[1:])]
            if s[0] == "h":
                out.append(a)
                continue
            t = nl.load(a)
            if s[0] == "p":
                p = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.psum)
                nisa.tensor_copy(dst=p, src=t)
                t = p
            out.append(t)
        else:
            out.append(s)
    return out


@nki.jit
def call(*arrays, fn, spec, kw=None):
    """``nl.<fn>(*operands, **kw)`` (its result stored to a new device tensor)."""
    args = _operands(arrays, spec)
    r = getattr(nl, fn)(*args, **(kw or {}))  # LINE call
    out = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
    nl.store(out, r)
    return out


@nki.jit
def store(a, dtype):
    """``nl.store`` of an SBUF tile (and of a PSUM copy of it) into tensors of ``dtype``."""
    t = nl.load(a)
    out = nl.ndarray((2,) + a.shape, dtype=dtype, buffer=nl.shared_hbm)
    nl.store(out[0], t)  # LINE store
    p = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.psum)
    nisa.tensor_copy(dst=p, src=t)
    nl.store(out[1], p)  # LINE store_psum
    return out


@nki.jit
def printed(a, prefix):
    """``nl.device_print`` of an SBUF tile and of the device tensor."""
    t = nl.load(a)
    nl.device_print(prefix, t)  # LINE device_print
    nl.device_print(prefix + " hbm", a)
    return a


@nki.jit
def seeded(seed):
    """``nl.random_seed`` from a ``[1, 1]`` tile, then one ``nl.rand``."""
    s = nl.load(seed)
    nl.random_seed(s)  # LINE random_seed
    r = nl.rand((128, 8), nl.float32)
    out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, r)
    return out


@nki.jit
def ordered(a, b, block):
    """Two independent element-wise functions, inside ``nl.no_reorder()`` or not."""
    x = nl.load(a)
    y = nl.load(b)
    if block:
        with nl.no_reorder():
            s = nl.add(x, y)
            p = nl.exp(y)
    else:
        s = nl.add(x, y)
        p = nl.exp(y)
    out = nl.ndarray((2,) + a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0], s)
    nl.store(out[1], p)
    return out


@nki.jit
def attention(q, k, v):
    """A small attention head written with the high-level functions: ``softmax(q.T k) v``
    (q, k, v ``[d, s]``, one tile each)."""
    qs = nl.load(q)
    ks = nl.load(k)
    vs = nl.load(v)
    scores = nl.matmul(qs, ks, transpose_x=True)  # [s, s] in PSUM
    top = nl.max(scores, axis=1)
    e = nl.exp(nl.subtract(scores, top))
    probs = nl.divide(e, nl.sum(e, axis=1))
    vt = nl.transpose(vs)  # [s, d] in PSUM
    o = nl.matmul(probs, vt)
    out = nl.ndarray((q.shape[1], q.shape[0]), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, o)
    return out


@nki.jit
def by_isa(a, b):
    """``nl.multiply(nl.add(x, y), 0.5)`` written with nki.isa as the lowering table gives it."""
    x = nl.load(a)
    y = nl.load(b)
    s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=s, data1=x, data2=y, op=nl.add)
    e = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=e, data=s, op0=nl.multiply, operand0=np.float32(0.5))
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, e)
    return out


@nki.jit
def by_language(a, b):
    """The same as :func:`by_isa` with the language's functions."""
    x = nl.load(a)
    y = nl.load(b)
    e = nl.multiply(nl.add(x, y), np.float32(0.5))
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, e)
    return out
