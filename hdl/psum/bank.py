"""One PSUM bank (an SRAM word of every partition's slot) or one SBUF partition: an SRAM with
one read and one write port."""

from amaranth.hdl import ClockSignal, Instance, Module, ResetSignal, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.params import check_int, validated_init

__all__ = ["BankMemory", "place_bank"]


class BankMemory(wiring.Component):
    """A ``width x depth`` :class:`~amaranth.lib.memory.Memory` with one synchronous read port and
    one write port of ``granularity``-bit write enables: the SRAM of one PSUM bank (``width = 32 *
    partitions``, ``depth = rows``, 16-bit halves) and of one SBUF partition (a word of
    ``word_bytes``, byte enables; the SBUF drives both addresses from one, a single port).  Out of
    reset (power-on) it holds zeros.

    The read port is not transparent: data read in cycle ``t + 1`` for an address presented in
    cycle ``t`` is the memory before the write of cycle ``t`` (PSUM forwards that write itself).

    Parameters
    ----------
    width : int
        Word width, a multiple of ``granularity``.
    depth : int
        Words.
    granularity : int
        Bits per write enable (16 for PSUM, 8 for the SBUF).

    Attributes
    ----------
    latency : int
        1 (read).

    Interface
    ---------
    i_raddr : In(range(depth)), i_ren : In(1)
        Read address and enable (``o_rdata`` holds while ``i_ren`` is low).
    o_rdata : Out(width)
    i_waddr : In(range(depth)), i_wdata : In(width)
    i_wen : In(width // granularity)
        Write enable per ``granularity`` bits: bit ``k`` writes bits ``[g k, g k + g)``.
    """

    latency = 1

    @validated_init
    def __init__(self, width, depth, *, granularity=16):
        check_int(granularity, "BankMemory granularity", minimum=1)
        check_int(width, "BankMemory width", minimum=granularity)
        check_int(depth, "BankMemory depth", minimum=1)
        if width % granularity:
            raise ValueError(f"BankMemory width must be a multiple of {granularity}, not {width}")
        self.width, self.depth, self.granularity = width, depth, granularity
        super().__init__(
            {
                "i_raddr": In(range(depth)),
                "i_ren": In(1),
                "o_rdata": Out(width),
                "i_waddr": In(range(depth)),
                "i_wen": In(width // granularity),
                "i_wdata": In(width),
            }
        )

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=self.width, depth=self.depth, init=[])
        rp = mem.read_port(domain="sync")
        wp = mem.write_port(granularity=self.granularity)
        m.d.comb += [
            rp.addr.eq(self.i_raddr),
            rp.en.eq(self.i_ren),
            self.o_rdata.eq(rp.data),
            wp.addr.eq(self.i_waddr),
            wp.en.eq(self.i_wen),
            wp.data.eq(self.i_wdata),
        ]
        return m


def place_bank(m, name, width, depth, *, granularity=16, module=None):
    """Place a :class:`BankMemory` in ``m`` as submodule ``name`` and return its ports, a dict
    ``raddr``, ``ren``, ``rdata``, ``waddr``, ``wen``, ``wdata`` to drive and read.

    ``module``: the Verilog module name of the memory, placed with ``Instance`` (one module
    for every bank of a design, emitted once: :class:`ncrtl.hdl.verilog.Cell`); ``None``: an
    Amaranth submodule (the Amaranth simulator)."""
    if module is None:
        m.submodules[name] = mem = BankMemory(width, depth, granularity=granularity)
        return dict(
            raddr=mem.i_raddr,
            ren=mem.i_ren,
            rdata=mem.o_rdata,
            waddr=mem.i_waddr,
            wen=mem.i_wen,
            wdata=mem.i_wdata,
        )
    sig = dict(
        raddr=Signal(range(depth), name=f"{name}_raddr"),
        ren=Signal(name=f"{name}_ren"),
        rdata=Signal(width, name=f"{name}_rdata"),
        waddr=Signal(range(depth), name=f"{name}_waddr"),
        wen=Signal(width // granularity, name=f"{name}_wen"),
        wdata=Signal(width, name=f"{name}_wdata"),
    )
    m.submodules[name] = Instance(
        module,
        i_clk=ClockSignal(),
        i_rst=ResetSignal(),
        i_i_raddr=sig["raddr"],
        i_i_ren=sig["ren"],
        o_o_rdata=sig["rdata"],
        i_i_waddr=sig["waddr"],
        i_i_wen=sig["wen"],
        i_i_wdata=sig["wdata"],
    )
    return sig
