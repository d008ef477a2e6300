import pytest

from ddpsim.units import UnitError, parse_bandwidth_Bps, parse_size_bytes, parse_time_s


@pytest.mark.parametrize(
    "text, expected",
    [("450GB/s", 450e9), ("400Gbps", 50e9), ("400Gb/s", 50e9), ("100Gbps", 12.5e9), ("1GiB/s", 2**30), (5e9, 5e9)],
)
def test_bandwidth(text, expected):
    assert parse_bandwidth_Bps(text) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("text, expected", [("3us", 3e-6), ("1.5ms", 1.5e-3), ("2s", 2.0), ("250ns", 250e-9), (0.1, 0.1)])
def test_time(text, expected):
    assert parse_time_s(text) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("text, expected", [("25MB", 25e6), ("25MiB", 25 * 2**20), ("1KiB", 1024), ("4GB", 4e9)])
def test_size(text, expected):
    assert parse_size_bytes(text) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("bad", ["450GX/s", "fast", "3 parsecs", "", "GB/s"])
def test_bad_bandwidth(bad):
    with pytest.raises(UnitError):
        parse_bandwidth_Bps(bad)


@pytest.mark.parametrize("bad", ["3uss", "3 lightyears", "x"])
def test_bad_time(bad):
    with pytest.raises(UnitError):
        parse_time_s(bad)



@pytest.mark.parametrize(
    "parse, bad",
    [(p, v) for p in (parse_bandwidth_Bps, parse_time_s, parse_size_bytes) for v in (float("nan"), float("inf"))]
    + [(parse_bandwidth_Bps, "1e400GB/s"), (parse_time_s, "1e400us"), (parse_size_bytes, "1e400MB"),
       (parse_bandwidth_Bps, "1e300PB/s")],
)
def test_non_finite_quantities_are_refused(parse, bad):
    with pytest.raises(UnitError, match="expected a finite"):
        parse(bad)
