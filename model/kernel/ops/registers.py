"""The golden of the engines' register instructions: ``register_move`` (an immediate or
another register), ``register_load`` (one integer element of the SBUF or device memory) and
``register_store`` (a register into one 32-bit integer element).  Each stream's sequencer has
its own registers (``state.registers[stream]``, 32-bit two's complement); the loop
instructions that read them run in :mod:`ncrtl.model.kernel.loops` (docs/nki/control.md)."""

from __future__ import annotations

import numpy as np

from ncrtl.model.kernel.loops import wrap32
from ncrtl.model.kernel.values import KernelError, where

__all__ = ["OPS", "registers", "read"]


def registers(state, stream):
    """The registers of ``stream``'s sequencer in ``state`` (a dict, name -> value)."""
    regs = getattr(state, "registers", None)
    if regs is None:
        regs = state.registers = {}
    return regs.setdefault(stream, {})


def read(state, ins, name):
    """The value of register ``name`` on the sequencer of ``ins``'s stream (an instruction that
    reads a register: ``args["regs"]``); a register nothing wrote raises."""
    got = registers(state, ins.engine).get(name)
    if got is None:
        raise KernelError(
            f"{where(ins)}reads register {name} on the {ins.engine} sequencer, which nothing "
            f"wrote (nisa.register_alloc() without a value, then no register_move or "
            f"register_load)"
        )
    return got


def _move(st, ins):
    a = ins.args
    src = a.get("src")
    value = read(st, ins, src) if isinstance(src, str) else wrap32(a["imm"])
    registers(st, ins.engine)[a["dst"]] = value


def _load(st, ins):
    (src,) = ins.srcs
    v = st.read(src, ins, matters="register").reshape(-1)
    registers(st, ins.engine)[ins.args["dst"]] = wrap32(int(v[0]))


def _store(st, ins):
    (dst,) = ins.dsts
    v = read(st, ins, ins.args["src"]) & 0xFFFFFFFF
    st.write(dst, np.array([v], np.uint32).view(dst.element.storage))


OPS = {"register_move": _move, "register_load": _load, "register_store": _store}
