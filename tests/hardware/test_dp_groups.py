"""The data-parallel groups a cluster keeps per residue of a device's first GPU
(``Topology.dp_groups``, shared by every device of that residue) are those found GPU by GPU."""

from pipetab.hardware.context import Context
from pipetab.hardware.parallel import Topology
from pipetab.plan import cluster


def test_dp_groups_kept_per_residue_are_those_of_each_device():
    system = cluster("h800_ib", 8, 8)
    assert system.fabric is not None  # NCCL's algorithms on the node's NICs: placement decides
    for ctx in (Context(tp=2, dp=4, cp=1), Context(tp=1, dp=8, cp=2), Context(tp=4, dp=2)):
        pp = 64 // (ctx.tp * ctx.dp * ctx.cp)
        topo = Topology(system, ctx, pp)
        for d in range(pp):
            direct = tuple(topo.fabric_group(topo.dp_group(d, i)) for i in range(ctx.tp))
            assert topo.dp_groups(d) == direct
            assert topo.dp_collective(1e9, d) == max(topo.collective(topo.dp_group(d, i), 1e9)
                                                     for i in range(ctx.tp))
