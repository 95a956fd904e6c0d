"""Fingerprints of ``hardware_costs`` on a fixed set of configurations, as JSON: the
regression data of ``tests/hardware/test_costs_regression.py`` (made at commit ffc6140,
before context parallelism, ZeRO-3 and layouts; the same configurations must still cost
exactly this).

    python -m experiments.costs_fingerprint > tests/data/costs_baseline.json
"""

from __future__ import annotations

import json
import sys

from pipetab.hardware.context import Context
from pipetab.schedules import registry
from pipetab.solver.pricing import hardware_costs

# (name, schedule, options, stages, microbatches, system, model, context keywords)
CASES = [
    ("1f1b_llama8b_tp2_dp2", "1f1b", {}, 4, 8, "dgx_h100_ib", "llama3_8b",
     {"tp": 2, "dp": 2, "microbatch_size": 1}),
    ("zbv_llama70b_tp8_full", "zbv", {}, 4, 8, "dgx_h100_ib", "llama3_70b",
     {"tp": 8, "dp": 1, "microbatch_size": 1, "recompute": "full"}),
    ("chimera_gpt_selective", "chimera", {}, 4, 8, "a100_cluster", "gpt3_175b",
     {"tp": 8, "dp": 2, "microbatch_size": 1, "recompute": "selective", "zero": 2}),
    ("interleaved_paper_gpt", "interleaved", {"chunks": 2}, 4, 8, "fast_nw_fast_cp", "paper_gpt", {}),
    ("dualpipev_mixtral_ep", "dualpipev", {}, 4, 8, "dgx_h100_ib", "mixtral_8x7b",
     {"tp": 2, "dp": 4, "ep": 8, "microbatch_size": 1}),
    ("zbh1_deepseek_etp", "zb-h1", {}, 4, 8, "h800_ib", "deepseek_v3",
     {"tp": 2, "dp": 8, "ep": 8, "etp": 2, "microbatch_size": 1, "dispatch_precision": "fp8",
      "node_limit": 4, "routing_imbalance": 1.25, "seq_len": 4096}),
    ("gpipe_tiny_nosp", "gpipe", {}, 2, 4, "dgx_h100_ib", "tiny_gpt",
     {"tp": 2, "dp": 2, "sequence_parallel": False, "zero": 0, "overlap": False}),
]


def fingerprint(costs) -> dict:
    """Every number of ``costs`` the simulator and the memory model read."""
    def keyed(mapping):
        return {str(k): v for k, v in sorted(mapping.items(), key=lambda kv: str(kv[0]))}

    return {"op_time": keyed(costs.op_time), "message_bytes": keyed(costs.message_bytes),
            "activation": keyed(costs.activation), "weight_memory": keyed(costs.weight_memory),
            "persistent": list(costs.persistent), "capacity": list(costs.capacity),
            "optimizer_time": list(costs.optimizer_time),
            "replica_groups": [[list(map(list, g.stages)), g.allreduce_time] for g in costs.replica_groups],
            "links": {f"{a}-{b}": costs.links.time(a, b, 1e6)
                      for a in range(len(costs.persistent)) for b in range(len(costs.persistent)) if a != b},
            "chains": keyed({k: [list(s) for s in v] for k, v in (costs.chains or {}).items()})}


def costs_of(case):
    _, name, opts, stages, micro, system, model, ctx = case
    sched = registry.generate(name, stages, micro, **opts)
    return hardware_costs(sched, system, model, Context(**ctx))


def main() -> int:
    json.dump({case[0]: fingerprint(costs_of(case)) for case in CASES}, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
