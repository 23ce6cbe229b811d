"""AXI4 as five valid/ready streams: the device memory port of the DMA engine.

Each AXI4 channel is an :class:`amaranth.lib.stream.Signature` whose payload holds the channel's
signals (``ar``/``aw``: ``id``, ``addr``, ``len``, ``size``, ``burst``; ``w``: ``data``,
``strb``, ``last``; ``r``: ``id``, ``data``, ``resp``, ``last``; ``b``: ``id``, ``resp``), and
``VALID``/``READY`` are the stream's ``valid``/``ready``, with AXI4's handshake rules (a transfer
at a rising edge with both high; the source holds its payload until then).  In Verilog a channel
``ar`` of a top has the ports ``ar__valid``, ``ar__ready`` and ``ar__payload``; the fields are
the payload's bit ranges, LSB first in the order above.
"""

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AxiManager", "address_layout", "BURST_INCR", "RESP_OKAY"]

#: ``AxBURST`` of an incrementing burst.
BURST_INCR = 1
#: ``xRESP`` of a successful transfer.
RESP_OKAY = 0


def address_layout(addr_bits, id_bits):
    return data.StructLayout({"id": id_bits, "addr": addr_bits, "len": 8, "size": 3, "burst": 2})


class AxiManager(wiring.Signature):
    """The manager side of an AXI4 interface (``ar``, ``aw``, ``w`` out; ``r``, ``b`` in) with
    ``data_bytes`` of data, ``addr_bits`` of address and ``id_bits`` of ID."""

    def __init__(self, data_bytes, addr_bits, id_bits=1):
        self.data_bytes, self.addr_bits, self.id_bits = data_bytes, addr_bits, id_bits
        super().__init__(
            {
                "ar": Out(stream.Signature(address_layout(addr_bits, id_bits))),
                "r": In(
                    stream.Signature(
                        data.StructLayout(
                            {"id": id_bits, "data": 8 * data_bytes, "resp": 2, "last": 1}
                        )
                    )
                ),
                "aw": Out(stream.Signature(address_layout(addr_bits, id_bits))),
                "w": Out(
                    stream.Signature(
                        data.StructLayout({"data": 8 * data_bytes, "strb": data_bytes, "last": 1})
                    )
                ),
                "b": In(stream.Signature(data.StructLayout({"id": id_bits, "resp": 2}))),
            }
        )
