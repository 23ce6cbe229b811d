"""The DMA queues' quality of service (``ncrtl.model.dma.qos``): the calendar of shares, strict
priority, the guarantees the docs state, checked on every cycle of random request patterns."""

import numpy as np
import pytest

from ncrtl.model.dma.qos import CLASSES, SLOTS, PortArbiter, QueueSelect, slot_table


def _random_shares(rng):
    shares = [0] * CLASSES
    for _ in range(int(rng.integers(0, SLOTS + 1))):
        shares[int(rng.integers(0, CLASSES))] += 1
    return shares


def test_slot_table_gives_every_class_its_share():
    rng = np.random.default_rng(1)
    for _ in range(500):
        shares = _random_shares(rng)
        table = slot_table(shares)
        assert len(table) == SLOTS
        for c in range(CLASSES):
            assert table.count(c) == shares[c]
        assert table.count(None) == SLOTS - sum(shares)
    # evenly spread: a share of 4 is every fourth slot, 8 every other one
    table = slot_table([0, 0, 0, 4])
    assert [s for s, o in enumerate(table) if o == 3] == [3, 7, 11, 15]
    table = slot_table([8, 0, 0, 0])
    assert [s for s, o in enumerate(table) if o == 0] == list(range(0, SLOTS, 2))


@pytest.mark.parametrize(
    "shares, text",
    [
        ([1, 2, 3], "needs 4 shares"),
        ([1, -1, 0, 0], "class 1 share -1 must be a whole number of slots >= 0"),
        ([1, 0.5, 0, 0], "class 1 share 0.5"),
        ([8, 8, 1, 0], "add up to 17 slots, more than the calendar's 16"),
    ],
)
def test_slot_table_refuses_bad_shares(shares, text):
    with pytest.raises(ValueError, match=text.replace(".", r"\.")):
        slot_table(shares)


def _gaps(table, c):
    """The longest run of cycles class ``c`` can wait between two of its slots."""
    own = [s for s, o in enumerate(table) if o == c]
    return max((own[(i + 1) % len(own)] - own[i] - 1) % SLOTS for i in range(len(own)))


@pytest.mark.parametrize("seed", range(6))
def test_priority_and_shares_hold_on_every_cycle(seed):
    """Random shares and random requests (some classes asking all the time): every cycle the
    grant is the slot's owner when it asks, else the highest class that asks (so without
    shares the highest class always wins and waits behind nothing); a class that keeps asking
    gets at least its share in every window of 16 cycles and never waits longer than the
    longest gap between its slots."""
    rng = np.random.default_rng(seed)
    shares = _random_shares(rng) if seed else [0, 0, 0, 0]
    table = slot_table(shares)
    arb = PortArbiter(table)
    busy = rng.random(CLASSES) < 0.5  # classes that ask every cycle
    grants, asked = [], []
    for cycle in range(4000):
        req = [bool(busy[c] or rng.random() < 0.3) for c in range(CLASSES)]
        owner = table[cycle % SLOTS]
        g = arb.step(req)
        if owner is not None and req[owner]:
            assert g == owner
        else:
            assert g == (max(c for c in range(CLASSES) if req[c]) if any(req) else None)
        grants.append(g)
        asked.append(req)
    for c in range(CLASSES):
        if not busy[c] or not shares[c]:
            continue
        got = np.array([g == c for g in grants])
        window = np.convolve(got, np.ones(SLOTS, int), "valid")
        assert window.min() >= shares[c]
        longest = max(len(run) for run in "".join("x" if x else "." for x in got).split("x"))
        assert longest <= _gaps(table, c)


def test_queue_select_is_round_robin():
    sel = QueueSelect(16)
    waiting = [q in (2, 5, 11) for q in range(16)]
    assert [sel.pick(waiting) for _ in range(6)] == [2, 5, 11, 2, 5, 11]
    assert sel.pick([False] * 16) is None
    waiting[3] = True  # a queue that wakes after 2 goes before 5
    sel = QueueSelect(16, last=2)
    assert sel.pick(waiting) == 3
