"""Golden model of PSUM, the partial-sum buffer and its read-add-write unit (docs/psum.md).

* :mod:`.isa` — write-instruction fields, the rules (:func:`check`) and the instruction word.
* :func:`read_add_write` — the bit-exact update of one slot by one beat.
* :class:`Psum` — memory, accumulation groups, stochastic-rounding generators, engine ports.
* :class:`Arbiter` — the least-recently-granted arbitration of the TE, VE and SE requesters.
"""

from . import isa
from .arbiter import PORTS, Arbiter
from .isa import (
    FIELDS,
    INSTR_BITS,
    MAX_WRITE_N,
    Dtype,
    Error,
    Flag,
    Geometry,
    GroupState,
    Rounding,
    Write,
    check,
    decode,
    encode,
)
from .psum import Psum, rand_states, read_add_write

__all__ = [
    "isa",
    "Psum",
    "Arbiter",
    "PORTS",
    "read_add_write",
    "rand_states",
    "Write",
    "Dtype",
    "Rounding",
    "Flag",
    "Error",
    "Geometry",
    "GroupState",
    "check",
    "encode",
    "decode",
    "FIELDS",
    "INSTR_BITS",
    "MAX_WRITE_N",
]
