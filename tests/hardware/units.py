"""The small model and the unit device the hardware tests work by hand on.

``MINI``: h=8, a=2 (d=4, MHA), s=4, f=32 (GELU), V=16, classic attention, no loss
activation; a layer has 4h^2 + 2hf + 9h + f = 872 parameters, the embedding and the head
V*h = 128 each. ``UNIT``: 1 MFLOP/s, 1 MB/s, no latencies, efficiency 1 (a time is
FLOPs/1e6 or bytes/1e6 seconds). ``LINK``: 1 kB/s, 1 ms.
"""

from pipetab.hardware.model import TransformerModel
from pipetab.hardware.system import Device, Link

MINI = TransformerModel("mini", num_layers=4, hidden=8, heads=2, seq_len=4, vocab=16, global_batch=4,
                        attention="classic", logit_bytes=0)
UNIT = Device(peak_flops=1e6, compute_efficiency=1.0, compute_latency_s=0.0,
              mem_bandwidth=1e6, mem_efficiency=1.0, mem_latency_s=0.0, memory_bytes=1e9)
LINK = Link(bandwidth=1e3, latency_s=1e-3)
