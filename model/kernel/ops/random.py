"""The golden of the engines' random-number generators: ``rng``, ``rand2``, ``dropout`` and the
generators' state (``set_rng_seed``, ``rand_set_state``, ``rand_get_state``).

The reference names the generator (XORWOW) and the state's size (6 words per GpSimd lane, 24
per Vector lane) but not its stream; ncrtl's (docs/nki/multicore.md, "Random numbers"):

* each lane (partition) of the Vector Engine holds :data:`GENERATORS` ``["vector"]`` = 4 XORWOW
  generators, each lane of the GpSimd Engine 1 (:class:`ncrtl.model.fp.xorwow.Xorwow`, the
  family PSUM's stochastic rounding uses), each generator 6 words ``(x, y, z, w, v, d)``;
* out of reset, and after ``set_rng_seed(s)`` (the Vector Engine's lanes), generator ``g`` of
  lane ``p`` holds ``Xorwow.seed_state(s << 32 | engine << 16 | p << 2 | g)`` (engine 0 for
  Vector, 1 for GpSimd; reset: ``s = 0``), so every lane and generator has its own stream;
* an instruction writing ``F`` elements per partition steps every generator of each lane it
  writes ``ceil(F / G)`` times; element ``j`` of a partition is output ``j // G`` of generator
  ``j % G`` (the surplus outputs of the last step are dropped);
* ``rng`` keeps an output's low bits (the destination's integer width); ``rand2`` and
  ``dropout`` use ``u = (out >> 8) * 2**-24``, uniform on ``[0, 1)`` in float32: ``rand2``
  writes ``min + u * (max - min)`` (float32, one conversion to the destination), ``dropout``
  zeroes an element where ``u < prob`` (so ``prob`` 0 keeps all, 1 drops all) and keeps the
  others' bits.

Each core has its own generators (``CoreState``'s ``rng``, made at the first use).
"""

from __future__ import annotations

import math

import numpy as np

from ncrtl.model.fp.xorwow import Xorwow
from ncrtl.model.kernel.values import KernelError, convert, scalar_operand, where

__all__ = ["OPS", "GENERATORS", "seed_states", "draw"]

#: Generators per lane of each engine (the reference's 24 and 6 state words, 6 per XORWOW).
GENERATORS = {"vector": 4, "gpsimd": 1}
_TAG = {"vector": 0, "gpsimd": 1}


def seed_states(engine, seed, lanes):
    """The words ``[lanes, G, 6]`` that seed ``seed`` gives lanes ``0 .. lanes-1`` of
    ``engine``."""
    g = GENERATORS[engine]
    s = (int(seed) & 0xFFFFFFFF) << 32 | _TAG[engine] << 16
    return np.array(
        [[Xorwow.seed_state(s | p << 2 | k) for k in range(g)] for p in range(lanes)],
        dtype=np.uint32,
    )


def _states(st, engine):
    rng = getattr(st, "rng", None)
    if rng is None:
        rng = st.rng = {}
    if engine not in rng:
        rng[engine] = seed_states(engine, 0, st.program.core.partitions)
    return rng[engine]


def _lanes(ref):
    """The partitions (engine lanes) an on-chip view covers."""
    row = math.prod(ref.tensor_shape()[1:])
    step, n = ref.pattern[0]
    p0 = ref.offset // row
    return p0 + np.arange(n) * (step // row if row else 0)


def draw(states, lanes, n):
    """``[len(lanes), n]`` 32-bit outputs of the lanes' generators (element ``j`` from
    generator ``j % G``, its output ``j // G``), the lanes' states stepped in place."""
    words = states[lanes]  # [L, G, 6]
    g = words.shape[1]
    steps = -(-n // g)
    x = Xorwow(0)
    x.x, x.y, x.z, x.w, x.v, x.d = (words[..., i].copy() for i in range(6))
    out = np.stack([x.next_u32() for _ in range(steps)], axis=1)  # [L, steps, G]
    states[lanes] = np.stack(x.state(), axis=-1)
    return out.reshape(len(lanes), steps * g)[:, :n]


def _uniform(bits):
    """``u`` in ``[0, 1)``: an output's upper 24 bits over 2**24 (exact in float32)."""
    return (bits >> np.uint32(8)).astype(np.float32) * np.float32(2.0**-24)


def _dst_draw(st, ins, dst):
    lanes = _lanes(dst)
    p = dst.view_shape[0]
    n = dst.size // p
    return draw(_states(st, ins.engine), lanes, n), p


def _rng(st, ins):
    (dst,) = ins.dsts
    bits, _ = _dst_draw(st, ins, dst)
    storage = dst.element.storage
    low = bits.astype(np.uint64) & np.uint64((1 << (8 * storage.itemsize)) - 1)
    st.write(dst, low.astype(storage.str.replace("i", "u")).view(storage).reshape(dst.view_shape))


def _rand2(st, ins):
    (dst,) = ins.dsts
    p = dst.view_shape[0]
    lo = scalar_operand(st, ins, ins.args["min"], ins.srcs, p)  # the operands read before the
    hi = scalar_operand(
        st, ins, ins.args["max"], ins.srcs, p
    )  # draw (taint: model/kernel/taint.py)
    bits, _ = _dst_draw(st, ins, dst)
    with np.errstate(over="ignore", invalid="ignore"):
        v = lo + _uniform(bits) * (hi - lo)
    st.write(dst, convert(v.astype(np.float32), dst.view_dtype).reshape(dst.view_shape))


def _dropout(st, ins):
    (dst,) = ins.dsts
    data = ins.srcs[0]
    if data.view_shape[0] != dst.view_shape[0] or data.size != dst.size:
        raise KernelError(f"{where(ins)}data and dst differ in partitions or elements")
    p = dst.view_shape[0]
    prob = scalar_operand(st, ins, ins.args["prob"], ins.srcs, p)  # the operands read before
    v = st.read(data, ins).reshape(p, -1)  # the draw (taint: model/kernel/taint.py)
    bits, _ = _dst_draw(st, ins, dst)
    keep = _uniform(bits) >= prob
    out = np.where(keep, v, np.zeros((), v.dtype))
    st.write(dst, out.reshape(dst.view_shape))


def _set_rng_seed(st, ins):
    (src,) = ins.srcs
    seed = (
        int(np.asarray(st.read(src, ins, matters="seed")).reshape(-1)[0].view(np.uint32))
        & 0xFFFFFFFF
    )
    states = _states(st, "vector")
    states[...] = seed_states("vector", seed, states.shape[0])


def _rand_set_state(st, ins):
    (src,) = ins.srcs
    states = _states(st, ins.engine)
    words = st.read(src, ins, matters="seed").reshape(src.view_shape[0], -1).astype(np.uint32)
    lanes = _lanes(src)
    states[lanes] = words.reshape(len(lanes), states.shape[1], 6)


def _rand_get_state(st, ins):
    (dst,) = ins.dsts
    states = _states(st, ins.engine)
    lanes = _lanes(dst)
    st.write(dst, states[lanes].reshape(len(lanes), -1).reshape(dst.view_shape))


OPS = {
    "rng": _rng,
    "rand2": _rand2,
    "dropout": _dropout,
    "set_rng_seed": _set_rng_seed,
    "rand_set_state": _rand_set_state,
    "rand_get_state": _rand_get_state,
}
