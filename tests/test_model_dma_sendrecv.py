"""The golden sendrecv (``ncrtl.model.dma.sendrecv``): exchanges between the two cores of an
LNC = 2 logical core, pairing by pipe, and every rule writing nothing."""

import numpy as np
import pytest

from ncrtl.model.dma.sendrecv import (
    PENDING,
    Code,
    SendRecv,
    Tile,
    exchange,
    ring,
)

P, B = 32, 2048


def _sbufs(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (P, B), dtype=np.uint8) for _ in range(2)]


def test_ring_exchange_swaps_the_tiles_bit_for_bit():
    sb = _sbufs()
    src, dst = Tile(0, 16, 0, 64, 4), Tile(16, 16, 512, 64, 4)
    out, codes, _ = exchange([[ring(0, src, dst)], [ring(1, src, dst)]], sb)
    assert codes == [[Code.NONE], [Code.NONE]]
    for r in (0, 1):
        want = sb[r].copy()
        want[16:32, 512:768] = sb[1 - r][0:16, 0:256]
        assert np.array_equal(out[r], want)


def test_pipes_pair_in_order_and_do_not_wait_for_each_other():
    """Core 0 posts pipes 0, 1, 0; core 1 posts 1, 0, 0: each pipe's k-th pairs with the other
    core's k-th of that pipe, so neither waits for an order the other did not follow."""
    sb = _sbufs(1)
    t = [Tile(0, 8, 128 * i, 32, 4) for i in range(6)]

    def op(r, i, pipe):
        return SendRecv(t[i], t[i + 3], 1 - r, 1 - r, pipe)

    core0 = [op(0, 0, 0), op(0, 1, 1), op(0, 2, 0)]
    core1 = [op(1, 0, 1), op(1, 1, 0), op(1, 2, 0)]
    out, codes, _ = exchange([core0, core1], sb)
    assert codes == [[Code.NONE] * 3] * 2
    # pipe 0: (core0 op0, core1 op1), (core0 op2, core1 op2); pipe 1: (core0 op1, core1 op0)
    for i0, i1 in ((0, 1), (2, 2), (1, 0)):
        assert np.array_equal(
            out[0][0:8, t[i0 + 3].byte : t[i0 + 3].byte + 128],
            sb[1][0:8, t[i1].byte : t[i1].byte + 128],
        )
        assert np.array_equal(
            out[1][0:8, t[i1 + 3].byte : t[i1 + 3].byte + 128],
            sb[0][0:8, t[i0].byte : t[i0].byte + 128],
        )


def test_a_sendrecv_without_a_partner_never_completes():
    src, dst = Tile(0, 4, 0, 8, 4), Tile(4, 4, 0, 8, 4)
    sb = _sbufs()
    out, codes, _ = exchange(
        [[ring(0, src, dst), ring(0, src, dst, pipe_id=2)], [ring(1, src, dst)]], sb
    )
    assert codes == [[Code.NONE, PENDING], [Code.NONE]]


GOOD = Tile(0, 16, 0, 64, 4), Tile(16, 16, 0, 64, 4)


@pytest.mark.parametrize(
    ("op0", "code0", "code1", "words"),
    [
        (SendRecv(*GOOD, 2, 1), Code.RANK, Code.PAIR, "ranks of an LNC = 2"),
        (SendRecv(*GOOD, 0, 1), Code.RANK, Code.PAIR, "exchanges with the other core"),
        (
            SendRecv(GOOD[0], Tile(16, 16, 0, 32, 4), 1, 1),
            Code.SHAPE,
            Code.PAIR,
            "same data type, partitions and elements per partition",
        ),
        (
            SendRecv(Tile(0, 8, 0, 64, 4), Tile(16, 8, 0, 64, 4), 1, 1, engine="gpsimd_dma"),
            Code.LIMIT,
            Code.PAIR,
            "not a multiple of 16",
        ),
        (
            SendRecv(Tile(0, 16, 0, 300, 4), Tile(16, 16, 0, 300, 4), 1, 1, engine="gpsimd_dma"),
            Code.LIMIT,
            Code.PAIR,
            "at most 1024",
        ),
        (
            SendRecv(GOOD[0], Tile(24, 16, 0, 64, 4), 1, 1),
            Code.TENSOR,
            Code.PAIR,
            "outside the SBUF's 32",
        ),
        (
            SendRecv(GOOD[0], Tile(8, 16, 128, 64, 4), 1, 1),
            Code.OVERLAP,
            Code.PAIR,
            "may not receive into what it sends",
        ),
        (SendRecv(*GOOD, 1, 1, engine="gpsimd_dma"), Code.PAIR, Code.PAIR, "different paths"),
        (
            SendRecv(Tile(0, 16, 0, 32, 4), Tile(16, 16, 0, 32, 4), 1, 1),
            Code.PAIR,
            Code.PAIR,
            "core 0 sends [16, 32]",
        ),
    ],
)
def test_every_broken_rule_fails_both_sides_and_writes_nothing(op0, code0, code1, words):
    sb = _sbufs(2)
    out, codes, msgs = exchange([[op0], [SendRecv(*GOOD, 0, 0)]], sb)
    assert codes == [[code0], [code1]]
    assert words in msgs[0][0]
    assert all(np.array_equal(a, b) for a, b in zip(out, sb))


def test_gpsimd_limits_by_element_size():
    for esize, limit in ((4, 1024), (2, 512), (1, 256)):
        n = limit // esize
        ok = [
            SendRecv(
                Tile(0, 16, 0, n, esize),
                Tile(16, 16, 0, n, esize),
                1 - r,
                1 - r,
                engine="gpsimd_dma",
            )
            for r in (0, 1)
        ]
        assert exchange([[ok[0]], [ok[1]]], _sbufs())[1] == [[Code.NONE], [Code.NONE]]
        big = [
            SendRecv(
                Tile(0, 16, 0, n + 1, esize),
                Tile(16, 16, 0, n + 1, esize),
                1 - r,
                1 - r,
                engine="gpsimd_dma",
            )
            for r in (0, 1)
        ]
        assert exchange([[big[0]], [big[1]]], _sbufs())[1] == [[Code.LIMIT], [Code.LIMIT]]


def test_bad_engine_name():
    with pytest.raises(ValueError, match="dma_engine must be one of"):
        SendRecv(*GOOD, 1, 1, engine="gpsimd")
