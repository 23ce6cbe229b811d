"""The suites (docs/testing.md) and the order tests run in.

Markers
-------
``sim``
    Builds a Verilator model (or runs one) through :mod:`ncrtl.testbench.sim`.
``synth``
    Runs Verilator's linter or Yosys on generated Verilog, without building a model.
``long``
    An Amaranth-simulator test of more than about 10 s (a whole engine stepped in Python): in
    ``make test``, not in ``make test-quick``.
``slow``
    Full-size or repeated runs: ``make test-slow`` only.

``make test-quick`` deselects all four and sets ``NCRTL_NO_BUILD=1``, under which any Verilator
build, lint or Yosys run raises: a test that needs one and lacks its marker fails there instead
of slowing the quick loop down.

Order
-----
Tests are sorted longest first by the times in ``tests/durations.json`` (a test not listed
counts as 20 s when marked ``sim``, else as 0.5 s), so the long builds start at once on every
worker and the short tests fill the gaps at the end.  The tests that share a module-scoped
fixture of their module (an Amaranth simulation run once for many tests) form one unit of their
summed time, marked ``xdist_group`` with the fixture's name: with ``-n`` the run uses
pytest-xdist's ``loadgroup`` distribution (unless ``--dist`` names another), which gives a
group to one worker, so the fixture runs once, and hands the units out in this order, the
next to whichever worker is nearly done (``--no-loadscope-reorder``: xdist would otherwise
reorder the units by their number of tests).  ``pytest --record-durations
tests/durations.json`` rewrites the table from a run (setup, call and teardown of each test).

Synthesis
---------
The default suite's Yosys checks stop after the coarse synthesis (``NCRTL_SYNTH=coarse``, see
:func:`ncrtl.testbench.lint.synth_check`); ``make test-slow`` and ``ncrtl lint`` run the whole
flow.
"""

import json
import os
from pathlib import Path

from ncrtl.testbench.sim import build_root

DURATIONS = Path(__file__).with_name("durations.json")

os.environ.setdefault("NCRTL_SYNTH", "coarse")
# One runtime-object cache for every build of the session, also those in a test's own build
# folder (the profile-guided builds, the installed wheel's conformance run).
os.environ.setdefault("NCRTL_OBJCACHE", str(build_root() / "objcache"))

#: Seconds of each test of this run, when ``--record-durations`` asks for them.
_seconds: dict[str, float] | None = None


def pytest_addoption(parser):
    parser.addoption(
        "--record-durations",
        metavar="PATH",
        default=None,
        help="write each test's seconds (setup + call + teardown) to PATH as JSON",
    )


def pytest_configure(config):
    for line in (
        "sim: builds and runs a Verilator simulation through cocotb",
        "synth: Verilator lint or Yosys synthesis of generated Verilog (no model build)",
        "long: an Amaranth-simulator test of more than about 10 s (not in make test-quick)",
    ):
        config.addinivalue_line("markers", line)
    # ``-n`` alone means xdist's ``load``, which sends the tests of one shared fixture to
    # different workers (each runs the fixture's simulation again) and first hands each worker
    # a quarter of its share in one run of consecutive tests (sorted longest first, one worker
    # would get every long build).  ``loadgroup`` keeps a group on one worker and hands the
    # units out one at a time in our order (longest processing time first).
    if _dist_named(config):
        return
    if getattr(config.option, "dist", None) == "load":
        config.option.dist = "loadgroup"
        config.option.loadscopereorder = False


def _dist_named(config):
    return any(str(a).split("=")[0] == "--dist" for a in config.invocation_params.args)


def _estimate(item, table):
    if item.nodeid in table:
        return table[item.nodeid]
    return 20.0 if item.get_closest_marker("sim") else 0.5


#: How a node id names its xdist group: ``loadgroup`` schedules by the text after the last
#: ``@`` (what xdist's own ``xdist_group`` marker appends).
GROUP = "@"


def pytest_collection_modifyitems(config, items):
    try:
        table = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        table = {}
    # Tests sharing a module-scoped fixture of their module (an Amaranth simulation run once
    # for many tests) stay together, as one unit of their summed time: pytest tears a module
    # fixture down when the next test is from another module, so interleaved they would run
    # the fixture's simulation once per test.
    units = {}
    for item in items:
        units.setdefault(_shared_fixture(item) or item.nodeid, []).append(item)
    # sorted() is stable: equal estimates keep their collection order (the same on every worker).
    ordered = sorted(units.values(), key=lambda unit: -sum(_estimate(i, table) for i in unit))
    items[:] = [item for unit in ordered for item in unit]
    # A worker of a loadgroup run (it parses the command line again, without -n's effect):
    # each shared-fixture unit goes to one worker.
    if hasattr(config, "workerinput") and not _dist_named(config):
        for unit in ordered:
            shared = _shared_fixture(unit[0])
            if shared is not None:
                for item in unit:
                    _tag(item, shared.replace(":", "."))


def _tag(item, group):
    """Append ``@group`` to the item's node id, as xdist's ``xdist_group`` marker does (its own
    tagging writes ``_nodeid``, which pytest 9.2's nodes no longer read)."""
    nodeid = f"{item.nodeid}{GROUP}{group}"
    if hasattr(item, "_id"):
        item._id = type(item._id).parse(nodeid)
    else:
        item._nodeid = nodeid


def _untagged(nodeid):
    head, sep, group = nodeid.rpartition(GROUP)
    return head if sep and "::" not in group and "]" not in group else nodeid


def _shared_fixture(item):
    """``module:fixture`` of the first module- or class-scoped fixture defined in the test's
    own module that the test uses, or None."""
    infos = getattr(item, "_fixtureinfo", None)
    module = getattr(item, "module", None)
    if infos is None or module is None:
        return None
    for name in sorted(infos.name2fixturedefs):
        last = infos.name2fixturedefs[name][-1]
        if last.scope in ("module", "class") and (
            getattr(last.func, "__module__", None) == module.__name__
        ):
            return f"{module.__name__}:{name}"
    return None


def pytest_sessionstart(session):
    global _seconds
    if session.config.getoption("--record-durations"):
        _seconds = {}


def pytest_runtest_logreport(report):
    # Runs in the controller under xdist too (the workers forward their reports).
    if _seconds is not None:
        nodeid = _untagged(report.nodeid)
        _seconds[nodeid] = _seconds.get(nodeid, 0.0) + report.duration


def pytest_sessionfinish(session):
    path = session.config.getoption("--record-durations")
    if not path or _seconds is None or hasattr(session.config, "workerinput"):
        return
    Path(path).write_text(
        json.dumps({k: round(v, 2) for k, v in sorted(_seconds.items())}, indent=0) + "\n"
    )
