"""cocotb run behind ``ncrtl sim matmul --dtype mxfp8_*|mxfp4_*``: SBUF tiles quantized by the RTL
:class:`~ncrtl.hdl.vector_engine.quantize_mx.QuantizeMX`, checked against the golden
:func:`ncrtl.model.vector_engine.quantize_mx` and written back for the MX matmul.

``NCRTL_QUANTIZE`` is JSON: ``in`` (an ``.npz`` of named uint16 ``[P, F]`` source tiles), ``out``
(the ``.npz`` to write: ``<name>.data`` uint8 ``[P, F/4, 4]`` element codes and
``<name>.scales`` uint8 ``[P, F/4]`` in the quadrant layout, as the RTL produced them),
``src_fmt``, ``scale_rule`` and ``elem_fmt`` (one element format per tile name).  The tiles'
groups stream one beat of ``groups`` groups after the other (no stalls: this is a data run, the
stall behaviour is the conformance's).
"""

import json
import os

import cocotb
import numpy as np

from ncrtl.model.fp import from_bits, to_bits
from ncrtl.model.vector_engine import quantize_mx, sbuf_groups, sbuf_tiles
from ncrtl.testbench.conformance import tb_settings
from ncrtl.testbench.scoreboard import Scoreboard, write_counters
from ncrtl.testbench.vector_engine.beats import beats_of, unpack_beats
from ncrtl.testbench.vector_engine.test_quantize_mx import QuantizeMXTB


@cocotb.test()
async def test_quantize_tensor(dut):
    """Each tile of the input file through QuantizeMX; element codes and scales bit for bit."""
    params, _, seed, _ = tb_settings()
    groups = int(params["groups"])
    job = json.loads(os.environ["NCRTL_QUANTIZE"])
    tiles = np.load(job["in"])
    tb = QuantizeMXTB(dut, groups, stall=0.0, seed=seed)
    await tb.reset()
    out, boards = {}, []
    for name in tiles.files:
        src = tiles[name]
        P, F = src.shape
        elem = job["elem_fmt"][name]
        group_codes = sbuf_groups(src)
        beats = beats_of(group_codes, groups, job["src_fmt"], elem, job["scale_rule"])
        words = await tb.run(beats)
        codes, scales, error = unpack_beats(words, groups)
        g = len(group_codes)
        codes = codes.reshape(-1, 32)[:g]
        scales = scales.reshape(-1)[:g]
        data, sbuf_scales = sbuf_tiles(codes, scales, P, F)
        want_data, want_scales = quantize_mx(
            from_bits(src, job["src_fmt"]), elem, scale_rule=job["scale_rule"]
        )
        sb = Scoreboard(f"quantize_mx.{name}.data", elem, bits=8)
        sb.compare_sequence(data.reshape(-1), to_bits(want_data).astype(np.uint8).reshape(-1))
        sc = Scoreboard(f"quantize_mx.{name}.scales", "e8m0", bits=8)
        sc.compare_sequence(sbuf_scales.reshape(-1), want_scales.reshape(-1))
        eb = Scoreboard(f"quantize_mx.{name}.beats", "count, then error flags", bits=1)
        eb.compare_sequence(list(error), [0] * len(beats))
        boards += [sb, sc, eb]
        out[f"{name}.data"] = data.astype(np.uint8)
        out[f"{name}.scales"] = sbuf_scales.astype(np.uint8)
    np.savez(job["out"], **out)
    for b in boards:
        b.write_json()
        dut._log.info(b.report())
    write_counters(tiles=len(tiles.files))
    for b in boards:
        b.assert_clean()
