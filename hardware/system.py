"""What a schedule runs on: devices, links and systems.

A ``Device`` is described by roofline parameters (peak FLOP/s and memory bandwidth, each
with an efficiency factor and a fixed per-op latency). A ``Link`` follows the Hockney model,
``t = nbytes / bandwidth + latency``. A ``System`` is a device type (all devices alike) plus
the links between them: a default link, optionally an intra-node link for devices on the
same node (``devices_per_node``), and optionally explicit per-pair overrides. Links are
symmetric and have no congestion or topology (as in the paper).

Units: seconds, bytes, bytes/s, FLOP/s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Mapping, TypeGuard

from pipetab.schedules.checks import check_count

from .attention import check_backend
from .collectives import Fabric
from .overlap import check_ep_kernels


def _num(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive(what: str, value: object, unit: str) -> None:
    if not _num(value) or value <= 0:
        raise ValueError(f"{what} must be > 0 {unit}, got {value!r}")


# what any real device or link lies within, many orders of magnitude either side: beyond,
# a step's seconds overflow or vanish (a typo in the exponent, or the wrong unit)
RANGES = {"FLOP/s": (1e6, 1e19), "bytes/s": (1.0, 1e16), "bytes": (1e3, 1e16), "s": (0.0, 1e3)}


def _in_range(what: str, value: float, unit: str) -> None:
    low, high = RANGES[unit]
    if not low <= value <= high:
        raise ValueError(f"{what} must be between {low:g} and {high:g} {unit}, got {value!r}")


def _non_negative(what: str, value: object, unit: str = "s") -> None:
    if not _num(value) or value < 0:
        raise ValueError(f"{what} must be >= 0 {unit}, got {value!r}")


def _fraction(what: str, value: object) -> None:
    if not _num(value) or not 0 < value <= 1:
        raise ValueError(f"{what} must be in (0, 1], got {value!r}")


def si(value: float, unit: str) -> str:
    """``si(3.35e12, 'B/s') == '3.35 TB/s'`` (decimal prefixes, 3 significant digits)."""
    if value == 0:
        return f"0 {unit}"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"),
                           (1.0, ""), (1e-3, "m"), (1e-6, "u"), (1e-9, "n")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


@dataclass(frozen=True)
class Device:
    """One accelerator, as the roofline model sees it.

    ``peak_flops`` (FLOP/s) reaches ``compute_efficiency`` of its peak on large GEMMs,
    ``mem_bandwidth`` (bytes/s) reaches ``mem_efficiency``; every op pays
    ``compute_latency_s`` on the compute side and ``mem_latency_s`` on the memory side.
    ``memory_bytes`` is the device memory, of which ``reserved_bytes`` are not available
    to the model (CUDA context, communication buffers, allocator fragmentation).

    Efficiency curve: an op over ``n`` tokens (a microbatch of ``b`` sequences of ``s``
    tokens: ``n = b*s``) reaches ``compute_efficiency * n / (n + efficiency_half_tokens)``
    of peak — GEMMs with few rows fill fewer tiles of the GPU's cores and pay their fixed
    costs over less work (tile and wave quantization, NVIDIA's "Matrix Multiplication
    Background" guide). ``efficiency_half_tokens = 0`` (default) is a flat efficiency.

    Kernel model (``sm_count > 0``; ``hardware.kernels``): ops are priced as the kernels
    they run instead — GEMMs tiled ``tile_m x tile_n`` over ``sm_count`` multiprocessors
    in waves, each tile at ``compute_efficiency`` of its share of the peak (fp8 GEMMs at
    ``fp8_compute_efficiency``, 0 meaning ``compute_efficiency``, of ``fp8_peak_flops``),
    fused attention at the measured rates of
    ``attention_backend`` (``hardware.attention``; empty: ``attention_efficiency`` of peak,
    0 meaning ``compute_efficiency``), memory-bound kernels at ``mem_efficiency``; each kernel
    pays ``compute_latency_s`` (launch). The efficiency curve is then not used.
    ``run_overhead`` is what a real run loses beyond its kernels: every op's kernel
    seconds stretched by ``1 + run_overhead`` (``hardware.overheads``).
    ``ep_kernels`` names the expert-parallel all-to-all kernels (``hardware.overlap``:
    the SMs they hold slow the compute they overlap in a pair; empty: they hold none).
    ``p2p_efficiency`` is the share of the intra-node link's bandwidth a pipeline message
    reaches (NCCL's send/receive runs on a few channels, well below what its collectives
    draw from NVLink; ``Topology.pipeline_link``); 1 (default): the link's bandwidth.
    ``collective_sms`` is how many SMs NCCL's collective kernels hold while a data-parallel
    reduction or gather runs beside the compute it overlaps (``hardware.collectives
    .sm_shared_exposed``); 0 (default): none.
    """

    peak_flops: float
    compute_efficiency: float
    compute_latency_s: float
    mem_bandwidth: float
    mem_efficiency: float
    mem_latency_s: float
    memory_bytes: float
    efficiency_half_tokens: float = 0.0
    reserved_bytes: float = 0.0
    sm_count: int = 0
    tile_m: int = 256
    tile_n: int = 128
    fp8_peak_flops: float = 0.0
    attention_efficiency: float = 0.0
    attention_backend: str = ""
    ep_kernels: str = ""
    fp8_compute_efficiency: float = 0.0
    run_overhead: float = 0.0
    p2p_efficiency: float = 1.0
    collective_sms: int = 0

    def __post_init__(self) -> None:
        _positive("peak_flops", self.peak_flops, "FLOP/s")
        _fraction("p2p_efficiency", self.p2p_efficiency)
        _fraction("compute_efficiency", self.compute_efficiency)
        _non_negative("compute_latency_s", self.compute_latency_s)
        _positive("mem_bandwidth", self.mem_bandwidth, "bytes/s")
        _fraction("mem_efficiency", self.mem_efficiency)
        _non_negative("mem_latency_s", self.mem_latency_s)
        _positive("memory_bytes", self.memory_bytes, "bytes")
        _non_negative("efficiency_half_tokens", self.efficiency_half_tokens, "tokens")
        _non_negative("reserved_bytes", self.reserved_bytes, "bytes")
        for what, unit in (("peak_flops", "FLOP/s"), ("mem_bandwidth", "bytes/s"), ("memory_bytes", "bytes"),
                           ("compute_latency_s", "s"), ("mem_latency_s", "s")):
            _in_range(what, getattr(self, what), unit)
        for what in ("sm_count", "tile_m", "tile_n", "collective_sms"):
            value = getattr(self, what)
            least = 0 if what in ("sm_count", "collective_sms") else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{what} must be an integer >= {least}, got {value!r}")
        if self.collective_sms and not self.collective_sms < self.sm_count:
            raise ValueError(f"collective_sms must be below sm_count ({self.sm_count}): NCCL's kernels leave the "
                             f"compute some SMs, got {self.collective_sms!r}")
        _non_negative("fp8_peak_flops", self.fp8_peak_flops, "FLOP/s")
        if not isinstance(self.attention_backend, str):
            raise ValueError(f"attention_backend must be a string, got {self.attention_backend!r}")
        check_backend(self.attention_backend)
        if not isinstance(self.ep_kernels, str):
            raise ValueError(f"ep_kernels must be a string, got {self.ep_kernels!r}")
        check_ep_kernels(self.ep_kernels)
        _non_negative("run_overhead", self.run_overhead, "(a fraction of busy time)")
        if self.fp8_compute_efficiency:
            _fraction("fp8_compute_efficiency", self.fp8_compute_efficiency)
        if self.attention_efficiency:
            _fraction("attention_efficiency", self.attention_efficiency)
        if self.reserved_bytes >= self.memory_bytes:
            raise ValueError(
                f"reserved_bytes ({self.reserved_bytes:g}) must be below memory_bytes ({self.memory_bytes:g})"
            )

    @property
    def effective_flops(self) -> float:
        """``peak_flops * compute_efficiency`` (FLOP/s)."""
        return self.peak_flops * self.compute_efficiency

    @property
    def kernels(self) -> bool:
        """Whether ops are priced by the kernel model (``sm_count > 0``)."""
        return self.sm_count > 0

    def peak(self, fp8: bool = False) -> float:
        """Peak FLOP/s of a GEMM in bf16 (``peak_flops``) or fp8 (``fp8_peak_flops``;
        ``ValueError`` when the device has none)."""
        if not fp8:
            return self.peak_flops
        if not self.fp8_peak_flops:
            raise ValueError("gemm precision fp8 needs a device with fp8_peak_flops")
        return self.fp8_peak_flops

    def gemm_efficiency(self, fp8: bool = False) -> float:
        """A GEMM tile's share of the peak: ``fp8_compute_efficiency`` for fp8 GEMMs when
        set, else ``compute_efficiency``."""
        return (self.fp8_compute_efficiency or self.compute_efficiency) if fp8 else self.compute_efficiency

    @property
    def effective_mem_bandwidth(self) -> float:
        """``mem_bandwidth * mem_efficiency`` (bytes/s)."""
        return self.mem_bandwidth * self.mem_efficiency

    @property
    def usable_memory_bytes(self) -> float:
        """``memory_bytes - reserved_bytes``: what the model's state and activations may use."""
        return self.memory_bytes - self.reserved_bytes

    def efficiency(self, tokens: float | None = None) -> float:
        """Compute efficiency of an op over ``tokens`` tokens (the curve in the class
        docstring; ``compute_efficiency`` when ``tokens`` is None or the curve is flat)."""
        if tokens is None or self.efficiency_half_tokens == 0:
            return self.compute_efficiency
        _positive("tokens", tokens, "tokens")
        return self.compute_efficiency * tokens / (tokens + self.efficiency_half_tokens)

    def compute_time(self, flops: float, traffic_bytes: float, tokens: float | None = None) -> float:
        """Roofline time of one op (paper, level 3):
        ``max(F / (P * e_c(n)) + L_c, V_m / (BW_m * e_m) + L_m)``, ``e_c(n)`` the
        efficiency at ``tokens`` tokens."""
        _non_negative("flops", flops, "FLOP")
        _non_negative("traffic_bytes", traffic_bytes, "bytes")
        return max(
            flops / (self.peak_flops * self.efficiency(tokens)) + self.compute_latency_s,
            traffic_bytes / self.effective_mem_bandwidth + self.mem_latency_s,
        )

    @property
    def description(self) -> str:
        return (
            f"{si(self.peak_flops, 'FLOP/s')} x {self.compute_efficiency:g} "
            f"(+{si(self.compute_latency_s, 's')}), "
            f"memory {si(self.mem_bandwidth, 'B/s')} x {self.mem_efficiency:g} "
            f"(+{si(self.mem_latency_s, 's')}), {si(self.memory_bytes, 'B')}"
            + (f" ({si(self.reserved_bytes, 'B')} reserved)" if self.reserved_bytes else "")
            + (f", half efficiency at {self.efficiency_half_tokens:g} tokens" if self.efficiency_half_tokens else "")
            + (f", {self.sm_count} SMs, GEMM tiles {self.tile_m}x{self.tile_n}" if self.kernels else "")
        )


@dataclass(frozen=True)
class Link:
    """A point-to-point link, Hockney model: ``time(n) = n / bandwidth + latency_s``."""

    bandwidth: float
    latency_s: float

    def __post_init__(self) -> None:
        _positive("link bandwidth", self.bandwidth, "bytes/s")
        _non_negative("link latency_s", self.latency_s)
        _in_range("link bandwidth", self.bandwidth, "bytes/s")
        _in_range("link latency_s", self.latency_s, "s")

    def time(self, nbytes: float) -> float:
        """Seconds to send ``nbytes`` over this link (``nbytes/bandwidth + latency``)."""
        _non_negative("message size", nbytes, "bytes")
        return nbytes / self.bandwidth + self.latency_s

    @property
    def description(self) -> str:
        return f"{si(self.bandwidth, 'B/s')} at {si(self.latency_s, 's')}"


@dataclass(frozen=True)
class HostLink:
    """One GPU's link to its host's memory (PCIe, or the GH200's NVLink-C2C) and what the
    host offers offload: ``d2h`` and ``h2d`` bandwidth (bytes/s) each direction alone,
    ``duplex`` both directions at once in total (bytes/s; two copies running together
    share it), ``host_memory_bytes`` per node (pinned buffers of offloaded activations and
    optimizer state must fit in it), ``adam_params_per_s`` the host's optimizer update rate
    per GPU (parameters per second; 0: not known, optimizer offload is refused)."""

    d2h: float
    h2d: float
    duplex: float
    host_memory_bytes: float
    adam_params_per_s: float = 0.0

    def __post_init__(self) -> None:
        for what in ("d2h", "h2d", "duplex"):
            _positive(f"host link {what}", getattr(self, what), "bytes/s")
            _in_range(f"host link {what}", getattr(self, what), "bytes/s")
        if self.duplex > self.d2h + self.h2d:
            raise ValueError(f"host link duplex ({self.duplex:g}) must not exceed d2h + h2d "
                             f"({self.d2h + self.h2d:g}) bytes/s")
        _positive("host_memory_bytes", self.host_memory_bytes, "bytes")
        _in_range("host_memory_bytes", self.host_memory_bytes, "bytes")
        _non_negative("adam_params_per_s", self.adam_params_per_s, "parameters/s")

    @property
    def description(self) -> str:
        return (f"host link {si(self.d2h, 'B/s')} D2H, {si(self.h2d, 'B/s')} H2D, "
                f"{si(self.duplex, 'B/s')} both ways; {si(self.host_memory_bytes, 'B')} host memory per node")


@dataclass(frozen=True)
class System:
    """Identical devices and the links between them.

    ``link(a, b)`` is, in order of precedence: the explicit override for the pair in
    ``links``; ``intra_node_link`` when both devices sit on the same node
    (``a // devices_per_node == b // devices_per_node``); otherwise ``default_link``.
    ``num_devices=None`` means "as many devices as the schedule needs" (uniform systems).
    ``links`` may be given as a mapping ``{(a, b): Link}``; it is stored as a sorted tuple of
    ``((min, max), Link)`` pairs, so the system stays hashable.
    """

    name: str
    device: Device
    default_link: Link
    num_devices: int | None = None
    links: tuple[tuple[tuple[int, int], Link], ...] = ()
    devices_per_node: int | None = None
    intra_node_link: Link | None = None
    summary: str = ""
    host_link: HostLink | None = None  # None: no offload to host memory is modelled
    fabric: Fabric | None = None  # None: every collective one ring, each GPU on its own link (hardware.collectives)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"system name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.device, Device):
            raise ValueError(f"system device must be a Device, got {type(self.device).__name__}")
        if not isinstance(self.default_link, Link):
            raise ValueError(
                f"system default_link must be a Link, got {type(self.default_link).__name__}"
            )
        if self.num_devices is not None:
            check_count("num_devices", self.num_devices)
        if (self.devices_per_node is None) != (self.intra_node_link is None):
            raise ValueError("devices_per_node and intra_node_link must be given together")
        if self.devices_per_node is not None:
            check_count("devices_per_node", self.devices_per_node)
            if not isinstance(self.intra_node_link, Link):
                raise ValueError("intra_node_link must be a Link")
        raw = self.links.items() if isinstance(self.links, Mapping) else self.links
        pairs: dict[tuple[int, int], Link] = {}
        for item in raw:
            try:
                (a, b), link = item
            except (TypeError, ValueError):
                raise ValueError(f"links must map (src, dst) device pairs to Links, got {item!r}") from None
            self._check_device("link src", a)
            self._check_device("link dst", b)
            if a == b:
                raise ValueError(f"links: device {a} cannot have a link to itself")
            if not isinstance(link, Link):
                raise ValueError(f"links[({a}, {b})] must be a Link, got {type(link).__name__}")
            key = (min(a, b), max(a, b))
            if key in pairs:
                raise ValueError(f"links: pair {key} is given twice")
            pairs[key] = link
        object.__setattr__(self, "links", tuple(sorted(pairs.items())))
        if self.host_link is not None and not isinstance(self.host_link, HostLink):
            raise ValueError(f"system host_link must be a HostLink, got {type(self.host_link).__name__}")
        if self.fabric is not None:
            if not isinstance(self.fabric, Fabric):
                raise ValueError(f"system fabric must be a Fabric, got {type(self.fabric).__name__}")
            if self.devices_per_node is None or self.links:
                raise ValueError("system fabric needs devices_per_node and no per-pair links")

    def _check_device(self, what: str, device: object) -> None:
        if not isinstance(device, int) or isinstance(device, bool) or device < 0:
            raise ValueError(f"{what} must be a device index >= 0, got {device!r}")
        if self.num_devices is not None and device >= self.num_devices:
            raise ValueError(
                f"{what} {device} is out of range; system {self.name!r} has devices "
                f"0..{self.num_devices - 1}"
            )

    @cached_property
    def _pair2link(self) -> dict[tuple[int, int], Link]:
        return dict(self.links)

    def check_devices(self, count: int) -> None:
        """``ValueError`` unless the system has at least ``count`` devices."""
        if self.num_devices is not None and count > self.num_devices:
            raise ValueError(
                f"system {self.name!r} has {self.num_devices} devices, the schedule needs {count}"
            )

    def link(self, src: int, dst: int) -> Link:
        """The (symmetric) link between two different devices."""
        self._check_device("src device", src)
        self._check_device("dst device", dst)
        if src == dst:
            raise ValueError(
                f"device {src} has no link to itself (a same-device transfer costs nothing; "
                "use message_time)"
            )
        override = self._pair2link.get((min(src, dst), max(src, dst)))
        if override is not None:
            return override
        node, intra = self.devices_per_node, self.intra_node_link  # given together
        if node is not None and intra is not None and src // node == dst // node:
            return intra
        return self.default_link

    def message_time(self, src: int, dst: int, nbytes: float) -> float:
        """Hockney time of a message from ``src`` to ``dst``; 0 when ``src == dst``."""
        if src == dst:
            self._check_device("src device", src)
            return 0.0
        return self.link(src, dst).time(nbytes)

    def node_of(self, device: int) -> int:
        """Node index of ``device`` (0 for every device when there are no nodes)."""
        self._check_device("device", device)
        return 0 if self.devices_per_node is None else device // self.devices_per_node

    @property
    def description(self) -> str:
        size = "any number of" if self.num_devices is None else str(self.num_devices)
        parts = [f"{self.name}: {size} devices of {self.device.description}"]
        if self.devices_per_node is not None and self.intra_node_link is not None:  # given together
            parts.append(
                f"{self.devices_per_node} per node, intra-node {self.intra_node_link.description}, "
                f"inter-node {self.default_link.description}"
            )
        else:
            parts.append(f"links {self.default_link.description}")
        if self.links:
            parts.append(f"{len(self.links)} pair overrides")
        text = "; ".join(parts)
        return f"{text} -- {self.summary}" if self.summary else text

    # ---- constructors -----------------------------------------------------------------
    @classmethod
    def uniform(cls, name: str, device: Device, link: Link, num_devices: int | None = None,
                summary: str = "") -> "System":
        """All device pairs joined by the same link."""
        return cls(name, device, link, num_devices, summary=summary)

    @classmethod
    def nodes(cls, name: str, device: Device, devices_per_node: int, intra_node_link: Link,
              inter_node_link: Link, num_devices: int | None = None, summary: str = "") -> "System":
        """Nodes of ``devices_per_node`` devices: ``intra_node_link`` inside a node,
        ``inter_node_link`` between nodes."""
        return cls(name, device, inter_node_link, num_devices, (), devices_per_node,
                   intra_node_link, summary)
