"""Measure op times of real layer shapes on one GPU (run on a machine with CUDA and torch).

What it measures, each in bf16 on the GPU it runs on, with CUDA events (the mean of
``REPS`` timed repetitions after ``WARMUP`` untimed ones):

* ``layers.csv`` — one Llama-style decoder layer (RMSNorm, fused QKV projection, rotary
  embedding, causal grouped-query flash attention through ``scaled_dot_product_attention``,
  output projection, RMSNorm, fused SwiGLU gate/up projection, down projection, two
  residuals) per shape: the layer sharded as tensor parallelism of degree ``tp`` shards it
  (heads, K/V heads and the MLP width divided by ``tp``; no collective is run), for Llama 3
  8B and 70B at sequence lengths 4,096 and 8,192, one sequence per microbatch. Per shape: the
  forward (autograd recording), the full backward, the input-gradient half of a split
  backward (``torch.autograd.grad`` with respect to the layer input alone: the weight
  GEMMs are skipped) and the activation bytes the forward leaves allocated for the backward.
* ``gemms.csv`` — the layers' weight GEMMs alone (``M x K @ K x N``), forward shapes, and
  the expert GEMMs of Mixtral 8x7B and DeepSeek-V3 at the rows one expert receives.
* ``trace/rank0.json.gz`` — a PyTorch profiler trace (CPU and CUDA activity, memory) of one
  training step of ``torch.distributed.pipelining``'s ZBV schedule: two stages of two Llama 3
  8B layers (TP 1 widths) on this one GPU, eight microbatches of one 4,096-token
  sequence, trimmed to what ``pipetab profile`` reads: the pipeline annotations, the
  kernels and the runtime calls that launched them, and the memory events.
* ``meta.json`` — the GPU, its clocks, torch and CUDA versions, whether grouped-query
  attention ran natively (``enable_gqa``), repetitions and what the trace holds.

Run: python experiments/device_ops.py OUT_DIR   (about a minute on an H100)
     python experiments/device_ops.py OUT_DIR --attention-backends   (``layers_flash.csv`` and
     ``layers_cudnn.csv``: the layers with attention pinned to FlashAttention-2 or cuDNN)
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

WARMUP, REPS = 5, 20
MODELS = {  # hidden, heads, kv heads, MLP width (the published config.json files)
    "llama3_8b": (4096, 32, 8, 14336),
    "llama3_70b": (8192, 64, 8, 28672),
}
SHAPES = [("llama3_8b", tp, s) for tp in (1, 2, 4, 8) for s in (4096, 8192)] + \
         [("llama3_70b", tp, s) for tp in (4, 8) for s in (4096, 8192)]
DT = torch.bfloat16
GQA = {"native": True}
# expert GEMMs of one microbatch of 4,096 tokens: (rows per expert, hidden, expert width)
EXPERT_GEMMS = {"mixtral_8x7b_expert_up": (1024, 4096, 2 * 14336), "mixtral_8x7b_expert_down": (1024, 14336, 4096),
                "deepseek_v3_expert_up": (128, 7168, 2 * 2048), "deepseek_v3_expert_down": (128, 2048, 7168),
                "deepseek_v3_expert_up_b8": (1024, 7168, 2 * 2048)}


class Layer(torch.nn.Module):
    """One decoder layer at tensor-parallel widths (no collectives)."""

    def __init__(self, hidden: int, heads: int, kv: int, ffn: int, tp: int) -> None:
        super().__init__()
        self.h, self.d = hidden, hidden // heads
        self.a, self.kv = heads // tp, max(kv // tp, 1)
        self.f = ffn // tp
        self.norm1 = torch.nn.RMSNorm(hidden, eps=1e-5)
        self.qkv = torch.nn.Linear(hidden, (self.a + 2 * self.kv) * self.d, bias=False)
        self.out = torch.nn.Linear(self.a * self.d, hidden, bias=False)
        self.norm2 = torch.nn.RMSNorm(hidden, eps=1e-5)
        self.up = torch.nn.Linear(hidden, 2 * self.f, bias=False)
        self.down = torch.nn.Linear(self.f, hidden, bias=False)

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x1, x2 = x[..., : self.d // 2], x[..., self.d // 2:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        pos = torch.arange(s, device=x.device, dtype=torch.float32)
        freq = 1.0 / (500000.0 ** (torch.arange(0, self.d // 2, device=x.device, dtype=torch.float32) / (self.d // 2)))
        ang = torch.outer(pos, freq)
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        q, k, v = self.qkv(self.norm1(x)).split([self.a * self.d, self.kv * self.d, self.kv * self.d], dim=-1)
        q = self._rope(q.view(b, s, self.a, self.d), cos[:, None], sin[:, None]).transpose(1, 2)
        k = self._rope(k.view(b, s, self.kv, self.d), cos[:, None], sin[:, None]).transpose(1, 2)
        v = v.view(b, s, self.kv, self.d).transpose(1, 2)
        if GQA["native"]:
            try:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv != self.a)
            except (RuntimeError, TypeError):
                GQA["native"] = False
        if not GQA["native"]:
            rep = self.a // self.kv
            o = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                               is_causal=True)
        x = x + self.out(o.transpose(1, 2).reshape(b, s, self.a * self.d))
        gate, up = self.up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


def _time(fn, reps: int = REPS) -> float:
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps * 1e-3


def measure_layer(model: str, tp: int, seq: int) -> dict:
    hidden, heads, kv, ffn = MODELS[model]
    layer = Layer(hidden, heads, kv, ffn, tp).cuda().to(DT)
    x = torch.randn(1, seq, hidden, device="cuda", dtype=DT, requires_grad=True)
    dy = torch.randn_like(x)
    t_f = _time(lambda: layer(x))

    def full():
        layer(x).backward(dy)

    def forward_input_grad():
        torch.autograd.grad(layer(x), (x,), dy)

    t_fb = _time(full)
    t_fi = _time(forward_input_grad)
    for p in layer.parameters():
        p.grad = None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    y = layer(x)
    torch.cuda.synchronize()
    act = torch.cuda.memory_allocated() - before - y.numel() * y.element_size()
    del y
    return {"model": model, "tp": tp, "seq": seq, "microbatch": 1, "forward_s": t_f,
            "backward_s": t_fb - t_f, "input_grad_s": t_fi - t_f, "activation_bytes": act}


def measure_gemms(model: str, tp: int, seq: int) -> list[dict]:
    hidden, heads, kv, ffn = MODELS[model]
    d = hidden // heads
    a, k = heads // tp, max(kv // tp, 1)
    shapes = {"qkv": (seq, hidden, (a + 2 * k) * d), "out": (seq, a * d, hidden),
              "up": (seq, hidden, 2 * (ffn // tp)), "down": (seq, ffn // tp, hidden)}
    return [gemm_row(model, tp, seq, name, *shape) for name, shape in shapes.items()]


def gemm_row(model: str, tp: int, seq: int, name: str, m: int, k: int, n: int) -> dict:
    """One ``M x K @ K x N`` GEMM timed on random bf16 data."""
    A = torch.randn(m, k, device="cuda", dtype=DT)
    B = torch.randn(k, n, device="cuda", dtype=DT)
    t = _time(lambda: A @ B)
    return {"model": model, "tp": tp, "seq": seq, "gemm": name, "m": m, "k": k, "n": n,
            "time_s": t, "tflops": 2 * m * k * n / t / 1e12}


def trace_pipeline(out: Path) -> str:
    """One ZBV step on this GPU under the profiler; returns what ran."""
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, ScheduleZBVZeroBubble
    from torch.profiler import ProfilerActivity, profile

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    dist.init_process_group("nccl", rank=0, world_size=1)
    hidden, heads, kv, ffn = MODELS["llama3_8b"]
    stages = [PipelineStage(torch.nn.Sequential(*[Layer(hidden, heads, kv, ffn, 1) for _ in range(2)]).cuda().to(DT),
                            s, 2, torch.device("cuda")) for s in (0, 1)]

    def loss_fn(y, target):
        return F.mse_loss(y.float(), target.float())

    sched = ScheduleZBVZeroBubble(stages, 8, loss_fn=loss_fn)
    x = torch.randn(8, 4096, hidden, device="cuda", dtype=DT)
    target = torch.randn_like(x)
    sched.step(x, target=target)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True) as prof:
        sched.step(x, target=target)
        torch.cuda.synchronize()
    raw = out / "raw_trace.json"
    prof.export_chrome_trace(str(raw))
    doc = json.loads(raw.read_text())
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from trim_trace import compressed, trim  # what pipetab profile reads

    small = trim(doc)
    keep = small["traceEvents"]
    (out / "trace").mkdir(exist_ok=True)
    (out / "trace" / "rank0.json.gz").write_bytes(compressed(small))
    raw.unlink()
    dist.destroy_process_group()
    return f"ZBV, 2 stages x 2 Llama 3 8B layers (TP 1), 8 microbatches, {len(keep)} events kept"


def measure_backends(out: Path) -> None:
    """``layers_<backend>.csv``: the layer shapes with attention pinned to one
    ``scaled_dot_product_attention`` backend (flash: FlashAttention-2; cudnn: cuDNN's fused
    attention, which Transformer Engine uses on Hopper), where the backend runs."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        rows = []
        for model, tp, seq in SHAPES:
            try:
                with sdpa_kernel([backend]):
                    rows.append(measure_layer(model, tp, seq))
            except RuntimeError as exc:
                print(f"{name} {model} tp{tp} s{seq}: {exc}"[:200], flush=True)
        if rows:
            with open(out / f"layers_{name}.csv", "w", newline="") as fh:
                w = csv.DictWriter(fh, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
            print(name, len(rows), "shapes", flush=True)


def main(out: Path, backends_only: bool = False) -> None:
    out.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    if backends_only:
        measure_backends(out)
        return
    t0 = time.time()
    layers, gemms = [], []
    for model, tp, seq in SHAPES:
        layers.append(measure_layer(model, tp, seq))
        gemms.extend(measure_gemms(model, tp, seq))
        print(layers[-1], flush=True)
    gemms += [gemm_row(name, 1, 4096, "expert", *shape) for name, shape in EXPERT_GEMMS.items()]
    for name, rows in (("layers.csv", layers), ("gemms.csv", gemms)):
        with open(out / name, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    try:
        traced = trace_pipeline(out)
    except Exception as exc:
        traced = f"trace failed: {type(exc).__name__}: {exc}"
    props = torch.cuda.get_device_properties(0)
    meta = {"gpu": props.name, "sm_count": props.multi_processor_count, "memory_bytes": props.total_memory,
            "torch": torch.__version__, "cuda": torch.version.cuda, "gqa_native": GQA["native"],
            "warmup": WARMUP, "reps": REPS, "trace": traced, "seconds": round(time.time() - t0, 1),
            "date": time.strftime("%Y-%m-%d")}
    try:
        import subprocess
        meta["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.sm,power.limit",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:
        pass
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    print(meta)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "device_ops_out"), "--attention-backends" in sys.argv[2:])
