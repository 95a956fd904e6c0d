"""Devices (roofline), links (Hockney) and systems."""

import pytest

from pipetab.hardware.system import Device, Link, System


def dev(**kw):
    args = dict(peak_flops=1e15, compute_efficiency=0.5, compute_latency_s=1e-6,
                mem_bandwidth=1e12, mem_efficiency=0.5, mem_latency_s=1e-7, memory_bytes=80e9)
    args.update(kw)
    return Device(**args)


def test_hockney_by_hand():
    link = Link(bandwidth=10e9, latency_s=2e-6)
    # 1 MB over 10 GB/s = 100 us, plus 2 us latency
    assert link.time(1e6) == pytest.approx(102e-6)
    assert link.time(0) == pytest.approx(2e-6)


def test_roofline_compute_bound_by_hand():
    d = dev()
    # compute: 1e12 FLOP / (1e15 * 0.5) = 2 ms, + 1 us = 2.001 ms
    # memory:  1e8 B / (1e12 * 0.5) = 0.2 ms, + 0.1 us = 0.2001 ms -> compute-bound
    assert d.compute_time(1e12, 1e8) == pytest.approx(2.001e-3)


def test_roofline_memory_bound_by_hand():
    d = dev()
    # compute: 1e10 / 5e14 = 20 us, + 1 us = 21 us
    # memory:  1e9 / 5e11 = 2 ms, + 0.1 us = 2.0001 ms -> memory-bound
    assert d.compute_time(1e10, 1e9) == pytest.approx(2.0001e-3)


def test_roofline_latency_only():
    assert dev().compute_time(0, 0) == pytest.approx(1e-6)


@pytest.mark.parametrize("field, value, message", [
    ("peak_flops", 0, "peak_flops must be > 0 FLOP/s, got 0"),
    ("compute_efficiency", 1.5, "compute_efficiency must be in (0, 1], got 1.5"),
    ("compute_latency_s", -1e-6, "compute_latency_s must be >= 0 s"),
    ("mem_bandwidth", -1, "mem_bandwidth must be > 0 bytes/s, got -1"),
    ("mem_efficiency", 0, "mem_efficiency must be in (0, 1], got 0"),
    ("memory_bytes", float("inf"), "memory_bytes must be > 0 bytes"),
    ("peak_flops", True, "peak_flops must be > 0 FLOP/s, got True"),
])
def test_device_validation(field, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        dev(**{field: value})


def test_link_validation():
    with pytest.raises(ValueError, match="link bandwidth must be > 0 bytes/s, got -1"):
        Link(-1, 1e-6)
    with pytest.raises(ValueError, match="link latency_s must be >= 0 s, got -1"):
        Link(1e9, -1)
    with pytest.raises(ValueError, match="message size must be >= 0 bytes"):
        Link(1e9, 0).time(-5)


def test_uniform_system_any_device_count_and_symmetric():
    link = Link(50e9, 500e-9)
    s = System.uniform("u", dev(), link)
    assert s.num_devices is None
    assert s.link(0, 1) is link and s.link(1000, 3) is link
    assert s.link(3, 1000) == s.link(1000, 3)
    s.check_devices(10_000)  # no limit
    with pytest.raises(ValueError, match="no link to itself"):
        s.link(2, 2)
    assert s.message_time(2, 2, 1e9) == 0.0
    assert s.message_time(0, 1, 50e9) == pytest.approx(1 + 500e-9)


def test_node_system_intra_inter_and_overrides():
    intra, inter, special = Link(450e9, 1e-6), Link(50e9, 3e-6), Link(1e9, 1e-5)
    s = System("n", dev(), inter, num_devices=16, links={(9, 2): special},
               devices_per_node=8, intra_node_link=intra)
    assert s.link(0, 7) is intra
    assert s.link(7, 8) is inter
    assert s.link(8, 15) is intra
    assert s.link(2, 9) is special and s.link(9, 2) is special  # symmetric override wins
    assert s.links == (((2, 9), special),)
    assert s.node_of(9) == 1
    hash(s)  # stays hashable
    with pytest.raises(ValueError, match=r"dst device 16 is out of range; system 'n' has devices 0..15"):
        s.link(0, 16)
    with pytest.raises(ValueError, match="system 'n' has 16 devices, the schedule needs 17"):
        s.check_devices(17)


def test_system_validation():
    d, link = dev(), Link(1e9, 0)
    with pytest.raises(ValueError, match="devices_per_node and intra_node_link must be given together"):
        System("x", d, link, devices_per_node=8)
    with pytest.raises(ValueError, match="num_devices must be an integer >= 1, got 0"):
        System("x", d, link, num_devices=0)
    with pytest.raises(ValueError, match=r"pair \(1, 2\) is given twice"):
        System("x", d, link, links=(((1, 2), link), ((2, 1), link)))
    with pytest.raises(ValueError, match="device 3 cannot have a link to itself"):
        System("x", d, link, links={(3, 3): link})
    with pytest.raises(ValueError, match="system name must be a non-empty string"):
        System("", d, link)


def test_descriptions():
    s = System.nodes("n", dev(), 8, Link(450e9, 1e-6), Link(50e9, 3e-6), summary="two kinds")
    assert "1 PFLOP/s" in s.device.description and "1 TB/s" in s.device.description
    assert Link(50e9, 500e-9).description == "50 GB/s at 500 ns"
    assert "8 per node" in s.description and "450 GB/s" in s.description
    assert s.description.endswith("two kinds")
