"""The execution graph of a schedule on given costs, as a networkx DiGraph.

Nodes: every op (``("op", op)``), every transfer between devices (``("send", op,
consumer)``), the all-reduce of each replicated stage group (``("allreduce", i)``), each
device's optimizer step (``("optimizer", d)``), and a sink ``"end"``. Each node has a
``duration``; edges are "must finish before". Without link contention the longest path to
``"end"`` is T_sim — an independent check of ``simulate`` — and it names the critical path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import networkx as nx

from pipetab.schedules.ops import Kind, data_predecessors

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Schedule

    from .costs import Costs


def execution_graph(schedule: Schedule, costs: Costs) -> nx.DiGraph:
    """Build the execution graph (see module docstring)."""
    g = nx.DiGraph()
    nstages = [schedule.num_stages(p) for p in range(schedule.num_pipelines)]
    for d, order in enumerate(schedule.orders):
        for i, op in enumerate(order):
            g.add_node(("op", op), duration=costs.duration(op), device=d)
            if i:
                g.add_edge(("op", order[i - 1]), ("op", op))
    for d, order in enumerate(schedule.orders):
        for op in order:
            for q in data_predecessors(op, nstages[op.pipeline]):
                src = schedule.device_of(q)
                if src == d:
                    g.add_edge(("op", q), ("op", op))
                else:
                    send = ("send", q, op)
                    g.add_node(send, duration=costs.transfer(q, src, d), link=(src, d))
                    g.add_edge(("op", q), send)
                    g.add_edge(send, ("op", op))
    last = Kind.W if schedule.split_backward else Kind.B
    opt = costs.optimizer_time or (0,) * schedule.num_devices
    for d in range(schedule.num_devices):
        node = ("optimizer", d)
        g.add_node(node, duration=opt[d], device=d)
        for op in schedule.orders[d]:
            g.add_edge(("op", op), node)
        g.add_edge(node, "end")
    for i, group in enumerate(costs.replica_groups):
        node = ("allreduce", i)
        g.add_node(node, duration=group.allreduce_time)
        members = set(group.stages)
        for op in schedule.expected_ops():
            if op.kind is last and (op.pipeline, op.stage) in members:
                g.add_edge(("op", op), node)
        for p, s in group.stages:
            g.add_edge(node, ("optimizer", schedule.placement.device(p, s)))
    g.add_node("end", duration=0)
    return g


def critical_path(graph: nx.DiGraph) -> tuple[float, list]:
    """Length (sum of node durations) and nodes of the longest path ending at ``"end"``.

    Raises ``networkx.NetworkXUnfeasible`` if the graph has a cycle (a deadlocked order)."""
    best: dict = {}
    via: dict = {}
    for node in nx.topological_sort(graph):
        preds = list(graph.predecessors(node))
        if preds:
            p = max(preds, key=best.__getitem__)
            best[node] = best[p] + graph.nodes[node]["duration"]
            via[node] = p
        else:
            best[node] = graph.nodes[node]["duration"]
    path = ["end"]
    while path[-1] in via:
        path.append(via[path[-1]])
    return best["end"], path[::-1]
