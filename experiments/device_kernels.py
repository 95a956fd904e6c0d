"""Measure, on one GPU, the kernel facts pipetab's pricing needs and no paper gives for
this GPU (run on a machine with CUDA and torch; ``--dry`` runs tiny sizes on the CPU to
check the script).

Each time is the mean of timed repetitions after untimed warm-ups, with CUDA events. Files:

* ``attention.csv`` — ``scaled_dot_product_attention`` per backend (``flash``: PyTorch's
  FlashAttention-2; ``cudnn``: cuDNN's fused attention, which Transformer Engine uses on
  Hopper), causal and full masks, head dimensions 64 and 128 (and MLA's 192/128), sequence
  lengths 1k to 64k, grouped-query (32 query heads, 8 key/value heads); forward and backward
  (the backward is forward + backward less the forward). FLOPs: 4 b h s^2 d forward
  (halved when causal), 2.5 x that backward; TFLOP/s against the GPU's dense bf16 peak.
* ``gemms.csv`` — bf16 and fp8 (``torch._scaled_mm``, e4m3, per-tensor scales) GEMMs of
  real layer shapes: the forward ``tokens x in @ in x out``, the input gradient ``tokens x
  out @ out x in`` and the weight gradient ``in x tokens @ tokens x out``; plus a size
  sweep (square and skinny); plus the fp8 casts (amax, scale, cast) and transposed copies
  a tensor-wise fp8 recipe runs per GEMM input.
* ``host_link.csv`` — pinned host <-> GPU copies (the activation-offload path) alone, both
  directions at once, and each beside a bf16 GEMM on another stream (each's slowdown), and
  a GPU-to-GPU copy beside the GEMM (memory-bandwidth contention, as a communication
  kernel's traffic would cause).
* ``saved.csv`` — bytes one Llama-style layer (eager PyTorch, bf16) saves for its backward,
  per module (autograd's saved tensors, each storage counted once, attributed to the first
  module that saved it).
* ``loss.csv`` — the LM head GEMM and an fp32 cross-entropy at large vocabularies: time of
  forward and backward and the bytes allocated at the forward's end.
* ``launch.csv`` — the cost of one small kernel launch from Python (eager) and replayed in
  a CUDA graph.
* ``meta.json`` — the GPU, clocks, torch, CUDA, repetitions, date.

Run: python3 experiments/device_kernels.py OUT_DIR [--dry]
"""

from __future__ import annotations

import contextlib
import csv
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

DRY = "--dry" in sys.argv
DEV = "cpu" if DRY else "cuda"
DT = torch.bfloat16
WARMUP, REPS = (1, 2) if DRY else (3, 10)
PEAK_BF16 = 989e12  # dense bf16 of an H100/H200 SXM (datasheet); the CSVs keep the raw times


def sync() -> None:
    if not DRY:
        torch.cuda.synchronize()


def timed(fn, reps: int = REPS) -> float:
    """Mean seconds of ``fn`` over ``reps`` runs after ``WARMUP`` untimed ones."""
    for _ in range(WARMUP):
        fn()
    sync()
    if DRY:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) / reps
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps * 1e-3


def write(out: Path, name: str, rows: list[dict]) -> None:
    if not rows:
        return
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(out / name, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    print(f"{name}: {len(rows)} rows", flush=True)


# ---- attention ------------------------------------------------------------------------
def attention_rows() -> list[dict]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    if DRY:
        backends = {"math": SDPBackend.MATH}
    seqs = (256, 512) if DRY else (1024, 2048, 4096, 8192, 16384, 32768, 65536)
    tokens = 1024 if DRY else 32768
    shapes = [(32, 8, d, d, s, causal) for d in (64, 128) for s in seqs for causal in (True, False)
              if causal or s <= (512 if DRY else 16384)]
    shapes += [(16, 16, 192, 128, s, True) for s in seqs[:4]]  # MLA: q/k 192 (128 + 64 rope), v 128
    rows = []
    for name, backend in backends.items():
        for heads, kv, dqk, dv, seq, causal in shapes:
            b = max(1, tokens // seq)
            row = {"backend": name, "batch": b, "heads": heads, "kv_heads": kv, "head_dim": dqk, "v_head_dim": dv,
                   "seq": seq, "causal": causal}
            try:
                q = torch.randn(b, heads, seq, dqk, device=DEV, dtype=DT, requires_grad=True)
                k = torch.randn(b, kv, seq, dqk, device=DEV, dtype=DT, requires_grad=True)
                v = torch.randn(b, kv, seq, dv, device=DEV, dtype=DT, requires_grad=True)
                gqa = kv != heads

                def fwd():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

                do = torch.randn(b, heads, seq, dv, device=DEV, dtype=DT)

                def fwd_bwd():
                    fwd().backward(do)

                with sdpa_kernel([backend]):
                    reps = max(3, min(REPS, int(2e6 // seq)))
                    t_f = timed(fwd, reps)
                    t_fb = timed(fwd_bwd, reps)
                flops = 2 * b * heads * seq * seq * (dqk + dv) * (0.5 if causal else 1.0)
                row |= {"forward_s": t_f, "backward_s": t_fb - t_f, "forward_tflops": flops / t_f / 1e12,
                        "backward_tflops": 2.5 * flops / (t_fb - t_f) / 1e12, "error": ""}
            except (RuntimeError, TypeError, ValueError) as exc:
                row["error"] = f"{type(exc).__name__}: {exc}"[:160].replace("\n", " ")
            rows.append(row)
            print(row, flush=True)
    return rows


# ---- GEMMs ----------------------------------------------------------------------------
LAYER_GEMMS = {  # (tokens, in, out) of real layers' weight GEMMs
    "llama3_70b_tp8_qkv": (8192, 8192, 1280), "llama3_70b_tp8_out": (8192, 1024, 8192),
    "llama3_70b_tp8_up": (8192, 8192, 7168), "llama3_70b_tp8_down": (8192, 3584, 8192),
    "llama3_405b_tp8_qkv": (8192, 16384, 2560), "llama3_405b_tp8_up": (8192, 16384, 13312),
    "llama3_405b_tp8_down": (8192, 6656, 16384),
    "llama3_8b_tp1_up": (8192, 4096, 28672), "llama3_8b_tp1_down": (8192, 14336, 4096),
    "deepseek_v3_expert_up_256": (256, 7168, 4096), "deepseek_v3_expert_down_256": (256, 2048, 7168),
    "deepseek_v3_expert_up_1024": (1024, 7168, 4096), "deepseek_v3_expert_down_1024": (1024, 2048, 7168),
    "qwen3_235b_expert_up_1024": (1024, 4096, 3072), "qwen3_235b_expert_down_1024": (1024, 1536, 4096),
}
SWEEP = [(m, n, k) for m in (1024, 2048, 4096, 8192, 16384) for n, k in ((4096, 4096), (8192, 8192), (16384, 4096))]


def _fp8_gemm(m: int, k: int, n: int):
    """An fp8 (e4m3) ``m x k @ k x n`` by ``torch._scaled_mm`` (B column-major), or None."""
    if DRY or not hasattr(torch, "_scaled_mm"):
        return None
    a = torch.randn(m, k, device=DEV).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device=DEV).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=DEV)
    return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=DT)  # noqa: SLF001 (fp8 GEMM)


def gemm_row(what: str, direction: str, m: int, k: int, n: int) -> list[dict]:
    rows = []
    a = torch.randn(m, k, device=DEV, dtype=DT)
    b = torch.randn(k, n, device=DEV, dtype=DT)
    t = timed(lambda: a @ b)
    rows.append({"gemm": what, "direction": direction, "precision": "bf16", "m": m, "k": k, "n": n, "time_s": t,
                 "tflops": 2 * m * k * n / t / 1e12})
    try:
        fp8 = _fp8_gemm(m, k, n)
        if fp8 is not None:
            t8 = timed(fp8)
            rows.append({"gemm": what, "direction": direction, "precision": "fp8", "m": m, "k": k, "n": n,
                         "time_s": t8, "tflops": 2 * m * k * n / t8 / 1e12})
    except (RuntimeError, TypeError) as exc:
        print(f"fp8 {what} {m}x{k}x{n}: {exc}"[:200], flush=True)
    return rows


def fp8_cast_rows() -> list[dict]:
    """The per-input work of a tensor-wise fp8 recipe: amax, scale and cast; a transposed copy."""
    rows = []
    for tokens, hidden in ((4096, 7168), (8192, 8192), (8192, 16384)):
        x = torch.randn(tokens, hidden, device=DEV, dtype=DT)
        fp8 = torch.float8_e4m3fn

        def cast():
            scale = 448.0 / x.abs().amax().float().clamp(min=1e-12)
            return (x.float() * scale).to(fp8)

        def transpose_copy():
            return x.t().contiguous()

        for name, fn in (("amax_scale_cast", cast), ("transpose_copy", transpose_copy)):
            t = timed(fn)
            rows.append({"gemm": name, "direction": "cast", "precision": "fp8", "m": tokens, "k": hidden, "n": 0,
                         "time_s": t, "tflops": 0.0, "bytes_read": x.numel() * 2})
    return rows


def gemm_rows() -> list[dict]:
    rows: list[dict] = []
    shapes = LAYER_GEMMS if not DRY else {"tiny": (64, 128, 256)}
    for name, (tokens, fan_in, fan_out) in shapes.items():
        rows += gemm_row(name, "forward", tokens, fan_in, fan_out)
        rows += gemm_row(name, "input_grad", tokens, fan_out, fan_in)
        rows += gemm_row(name, "weight_grad", fan_in, tokens, fan_out)
    for m, n, k in SWEEP if not DRY else [(64, 64, 64)]:
        rows += gemm_row("sweep", "forward", m, k, n)
    rows += fp8_cast_rows() if not DRY else []
    return rows


# ---- host link and contention ---------------------------------------------------------
def host_link_rows() -> list[dict]:
    if DRY:
        return []
    rows = []
    gemm_a = torch.randn(8192, 8192, device=DEV, dtype=DT)
    gemm_b = torch.randn(8192, 8192, device=DEV, dtype=DT)
    gemm_flops = 2 * 8192 ** 3
    compute, copy1, copy2 = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
    for mib in (16, 256, 2048):
        n = mib * 2 ** 20
        host_src = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        host_dst = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        dev_src = torch.empty(n, dtype=torch.uint8, device=DEV)
        dev_dst = torch.empty(n, dtype=torch.uint8, device=DEV)
        dev_big = torch.empty(4 * n, dtype=torch.uint8, device=DEV)
        ops = {
            "h2d": lambda: dev_dst.copy_(host_src, non_blocking=True),
            "d2h": lambda: host_dst.copy_(dev_src, non_blocking=True),
            "d2d": lambda: dev_big[:n].copy_(dev_src, non_blocking=True),
        }
        reps = 5 if mib >= 2048 else 20
        for name, op in ops.items():
            t = timed(op, reps)
            rows.append({"what": name, "mib": mib, "alone_s": t, "gb_per_s": n / t / 1e9})
        both = timed(lambda: (ops["h2d"](), ops["d2h"]()), reps)  # same stream: serial baseline
        rows.append({"what": "h2d+d2h same stream", "mib": mib, "alone_s": both, "gb_per_s": 2 * n / both / 1e9})
        rows.append(_concurrent("h2d||d2h", mib, n, copy1, ops["h2d"], copy2, ops["d2h"], reps))
        if mib == 2048:
            for name in ("h2d", "d2h", "d2d"):
                rows.append(_beside_gemm(name, mib, n, compute, gemm_a, gemm_b, gemm_flops, copy1, ops[name]))
    return rows


def _concurrent(what: str, mib: int, n: int, s1, op1, s2, op2, reps: int) -> dict:
    """Two copies on two streams at once: each one's time and the span of both."""
    e = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    for _ in range(2):
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        s1.wait_event(start)
        s2.wait_event(start)
        with torch.cuda.stream(s1):
            e[0].record(s1)
            for _ in range(reps):
                op1()
            e[1].record(s1)
        with torch.cuda.stream(s2):
            e[2].record(s2)
            for _ in range(reps):
                op2()
            e[3].record(s2)
        torch.cuda.synchronize()
    t1 = e[0].elapsed_time(e[1]) / reps * 1e-3
    t2 = e[2].elapsed_time(e[3]) / reps * 1e-3
    return {"what": what, "mib": mib, "first_s": t1, "second_s": t2, "gb_per_s": 2 * n / max(t1, t2) / 1e9}


def _beside_gemm(name: str, mib: int, n: int, compute, a, b, flops: int, copy, op) -> dict:
    """A bf16 GEMM loop on one stream beside a copy loop on another: each one's rate."""
    gemm_alone = timed(lambda: a @ b)
    copy_alone = timed(op, 5)
    reps_gemm = max(5, int(copy_alone * 5 / gemm_alone))
    row = _concurrent(f"gemm||{name}", mib, n, compute, lambda: a @ b, copy, op, 1)
    # re-run with the loop lengths matched so both overlap for the whole span
    e = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    start.record()
    compute.wait_event(start)
    copy.wait_event(start)
    with torch.cuda.stream(compute):
        e[0].record(compute)
        for _ in range(reps_gemm):
            a @ b
        e[1].record(compute)
    with torch.cuda.stream(copy):
        e[2].record(copy)
        for _ in range(5):
            op()
        e[3].record(copy)
    torch.cuda.synchronize()
    gemm_beside = e[0].elapsed_time(e[1]) / reps_gemm * 1e-3
    copy_beside = e[2].elapsed_time(e[3]) / 5 * 1e-3
    row.update({"gemm_alone_s": gemm_alone, "gemm_beside_s": gemm_beside,
                "gemm_tflops_alone": flops / gemm_alone / 1e12,
                "gemm_tflops_beside": flops / gemm_beside / 1e12, "copy_alone_s": copy_alone,
                "copy_beside_s": copy_beside, "copy_gb_per_s_beside": n / copy_beside / 1e9})
    return row


# ---- saved activations per module -----------------------------------------------------
class Layer(torch.nn.Module):
    """A Llama-style decoder layer (GQA, SwiGLU), eager, at TP 1 widths."""

    def __init__(self, hidden: int, heads: int, kv: int, ffn: int) -> None:
        super().__init__()
        self.d, self.a, self.kv = hidden // heads, heads, kv
        self.input_norm = torch.nn.RMSNorm(hidden, eps=1e-5)
        self.qkv = torch.nn.Linear(hidden, (heads + 2 * kv) * self.d, bias=False)
        self.rope = torch.nn.Identity()
        self.core_attention = torch.nn.Identity()
        self.out_proj = torch.nn.Linear(heads * self.d, hidden, bias=False)
        self.mlp_norm = torch.nn.RMSNorm(hidden, eps=1e-5)
        self.up_gate = torch.nn.Linear(hidden, 2 * ffn, bias=False)
        self.down = torch.nn.Linear(ffn, hidden, bias=False)

    def forward(self, x: torch.Tensor, mark) -> torch.Tensor:
        b, s, _ = x.shape
        with mark("input_norm"):
            h = self.input_norm(x)
        with mark("qkv"):
            q, k, v = self.qkv(h).split([self.a * self.d, self.kv * self.d, self.kv * self.d], dim=-1)
        with mark("rope"):
            ang = torch.outer(torch.arange(s, device=x.device, dtype=torch.float32),
                              1.0 / 500000.0 ** (torch.arange(0, self.d // 2, device=x.device) / (self.d // 2)))
            cos, sin = ang.cos().to(x.dtype)[:, None], ang.sin().to(x.dtype)[:, None]

            def rot(t):
                t1, t2 = t[..., : self.d // 2], t[..., self.d // 2:]
                return torch.cat((t1 * cos - t2 * sin, t2 * cos + t1 * sin), dim=-1)

            q = rot(q.view(b, s, self.a, self.d)).transpose(1, 2)
            k = rot(k.view(b, s, self.kv, self.d)).transpose(1, 2)
            v = v.view(b, s, self.kv, self.d).transpose(1, 2)
        with mark("core_attention"):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv != self.a)
        with mark("out_proj"):
            x = x + self.out_proj(o.transpose(1, 2).reshape(b, s, self.a * self.d))
        with mark("mlp_norm"):
            h = self.mlp_norm(x)
        with mark("up_gate"):
            gate, up = self.up_gate(h).chunk(2, dim=-1)
        with mark("activation"):
            act = F.silu(gate) * up
        with mark("down"):
            return x + self.down(act)


def saved_rows() -> list[dict]:
    import contextlib

    shapes = [("tiny", 256, 4, 2, 512, 128)] if DRY else \
        [("llama3_8b", 4096, 32, 8, 14336, 4096), ("llama3_70b_tp8", 1024, 8, 1, 3584, 8192)]
    rows = []
    for name, hidden, heads, kv, ffn, seq in shapes:
        layer = Layer(hidden, heads, kv, ffn).to(DEV).to(DT)
        x = torch.randn(1, seq, hidden, device=DEV, dtype=DT, requires_grad=True)
        current = ["outside"]
        seen: dict[int, str] = {}
        per: dict[str, int] = {}

        @contextlib.contextmanager
        def mark(module: str):
            current.append(module)
            try:
                yield
            finally:
                current.pop()

        def pack(t: torch.Tensor):
            if isinstance(t, torch.nn.Parameter):
                return t  # weights are no activations (the layer's input is counted)
            try:
                key = t.untyped_storage().data_ptr()
                size = t.untyped_storage().nbytes()
            except (RuntimeError, NotImplementedError):
                return t
            if key not in seen:
                seen[key] = current[-1]
                per[current[-1]] = per.get(current[-1], 0) + size
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            y = layer(x, mark)
        sync()
        for module, nbytes in per.items():
            rows.append({"shape": name, "hidden": hidden, "heads": heads, "kv_heads": kv, "ffn": ffn, "seq": seq,
                         "module": module, "saved_bytes": nbytes, "bytes_per_token_per_hidden": nbytes / seq / hidden})
        del y
    return rows


# ---- loss and launches ----------------------------------------------------------------
def loss_rows() -> list[dict]:
    cases = [(64, 32, 1000)] if DRY else [(4096, 4096, 128256), (8192, 8192, 128256), (4096, 4096, 151936),
                                          (4096, 7168, 129280)]
    rows = []
    for tokens, hidden, vocab in cases:
        h = torch.randn(tokens, hidden, device=DEV, dtype=DT, requires_grad=True)
        w = torch.randn(vocab, hidden, device=DEV, dtype=DT, requires_grad=True)
        target = torch.randint(0, vocab, (tokens,), device=DEV)

        def fwd():
            return F.cross_entropy((h @ w.t()).float(), target)

        def head_only():
            return h @ w.t()

        def fwd_bwd():
            fwd().backward()

        t_head = timed(head_only)
        t_f = timed(fwd)
        t_fb = timed(fwd_bwd)
        if not DRY:
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            loss = fwd()
            sync()
            kept = torch.cuda.memory_allocated() - before
            peak = torch.cuda.max_memory_allocated() - before
            del loss
        else:
            kept = peak = 0
        rows.append({"tokens": tokens, "hidden": hidden, "vocab": vocab, "head_gemm_s": t_head, "forward_s": t_f,
                     "backward_s": t_fb - t_f, "kept_bytes": kept, "forward_peak_bytes": peak,
                     "logit_bytes_bf16": tokens * vocab * 2})
    return rows


def launch_rows() -> list[dict]:
    x = torch.zeros(1024, device=DEV)
    n = 100 if DRY else 2000

    def eager():
        for _ in range(n):
            x.add_(1.0)

    rows = [{"what": "eager add_ (1,024 elements)", "kernels": n, "per_kernel_s": timed(eager, 3) / n}]
    if not DRY:
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            eager()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            eager()
        rows.append({"what": "CUDA graph replay of the same", "kernels": n, "per_kernel_s": timed(g.replay, 3) / n})
    return rows


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    t0 = time.time()
    meta: dict = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__, "dry": DRY, "warmup": WARMUP,
                  "reps": REPS, "sections": {}}
    if not DRY:
        props = torch.cuda.get_device_properties(0)
        meta |= {"gpu": props.name, "sm_count": props.multi_processor_count, "memory_bytes": props.total_memory,
                 "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
    for name, fn in (("launch.csv", launch_rows), ("gemms.csv", gemm_rows), ("loss.csv", loss_rows),
                     ("saved.csv", saved_rows), ("host_link.csv", host_link_rows), ("attention.csv", attention_rows)):
        t = time.time()
        try:
            write(out, name, fn())
            meta["sections"][name] = round(time.time() - t, 1)
        except Exception as exc:  # one section's failure keeps the others
            meta["sections"][name] = f"failed: {type(exc).__name__}: {exc}"[:300]
            print(name, meta["sections"][name], flush=True)
        if not DRY:
            torch.cuda.empty_cache()
    meta["seconds"] = round(time.time() - t0, 1)
    if not DRY:
        import subprocess

        with contextlib.suppress(Exception):
            meta["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.sm,power.limit",
                 "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    print(json.dumps(meta), flush=True)


if __name__ == "__main__":
    main(Path(next((a for a in sys.argv[1:] if not a.startswith("--")), "device_kernels_out")))
