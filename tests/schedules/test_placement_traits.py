"""The placement-family traits table (``schedules.placements.TRAITS``): each row checked
against maps, splits and counts written out by hand for small shapes."""

import pytest

from pipetab.schedules import registry
from pipetab.schedules.placements import (
    FAMILY_LABELS,
    TRAITS,
    PlacementFamily,
    family_stages,
    split_microbatches,
    traits,
)
from pipetab.solver.cpsat import idealized_problem

L, BI, WAVE, V, INT, FREE = (PlacementFamily.LINEAR, PlacementFamily.BIDIRECTIONAL, PlacementFamily.WAVE,
                             PlacementFamily.V, PlacementFamily.INTERLEAVED, PlacementFamily.FREE)


def test_every_family_has_one_row():
    """One row per family, found by the family or its name."""
    assert set(TRAITS) == set(PlacementFamily)
    assert traits("v") is TRAITS[V] and traits(BI).family is BI


def test_unknown_family_is_refused():
    """A name that is no family gets the families listed."""
    with pytest.raises(ValueError, match="placement must be one of linear, bidirectional"):
        traits("diagonal")


@pytest.mark.parametrize("family, pipelines", [(L, 1), (BI, 2), (WAVE, 1), (V, 1), (INT, 1), (FREE, None)])
def test_pipelines(family, pipelines):
    """Chimera's placement has two pipelines, free leaves it to the ``pipelines`` option."""
    t = traits(family)
    assert t.pipelines == pipelines
    assert t.num_pipelines(2) == (2 if pipelines is None else pipelines)


@pytest.mark.parametrize("family, exportable", [(L, True), (BI, False), (WAVE, True), (V, True), (INT, True)])
def test_torch_csv(family, exportable):
    """PyTorch's CSV holds one pipeline: every fixed family but the bidirectional one."""
    assert traits(family).torch_csv() is exportable


def test_torch_csv_of_free_depends_on_its_pipelines():
    assert traits(FREE).torch_csv(1) and not traits(FREE).torch_csv(2)


def test_partitionable_families():
    """CP-SAT chooses layer splits on one stage per device and pipeline: linear and bidirectional."""
    assert {f for f, t in TRAITS.items() if t.partitionable} == {L, BI}


def test_size_options_and_stages_per_device():
    """Hanayo's waves put 2W stages on a device, interleaved's chunks v, V two."""
    assert {f: t.size_option for f, t in TRAITS.items()} == {
        L: None, BI: None, WAVE: "waves", V: None, INT: "chunks", FREE: None}
    assert traits(WAVE).stages_per_device(waves=3) == 6
    assert traits(INT).stages_per_device(chunks=5) == 5
    assert traits(V).stages_per_device(waves=3, chunks=5) == 2
    assert traits(L).stages_per_device(waves=3, chunks=5) == 1
    assert {f for f, t in TRAITS.items() if t.stages_per_device(waves=1, chunks=2) > 1} == {WAVE, V, INT}
    assert {f for f, t in TRAITS.items() if not t.fixed} == {FREE}


@pytest.mark.parametrize("family, kw, stage2device", [
    (L, {}, ((0, 1, 2, 3),)),
    (BI, {}, ((0, 1, 2, 3), (3, 2, 1, 0))),
    (WAVE, {"waves": 2}, ((0, 1, 2, 3, 3, 2, 1, 0, 0, 1, 2, 3, 3, 2, 1, 0),)),
    (V, {}, ((0, 1, 2, 3, 3, 2, 1, 0),)),
    (INT, {"chunks": 3}, ((0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3),)),
])
def test_stage_to_device_maps(family, kw, stage2device):
    """The stage -> device map of each family on 4 devices, written out."""
    t = traits(family)
    assert t.place(4, family_stages(family, 4, **kw)).stage2device == stage2device


def test_free_has_no_map():
    with pytest.raises(ValueError, match="free placement has no fixed stage -> device map"):
        traits(FREE).place(4, (4,))


def test_labels_come_from_the_table():
    assert FAMILY_LABELS[BI] == "bidirectional (down s->s, up s->S-1-s)"
    assert FAMILY_LABELS[FREE] == "free (the solver chooses)"


def test_split_microbatches_by_hand():
    """Chimera: each unit of S=4 half down, half up; forward doubling: units of 2S;
    DualPipe: the first half of all microbatches down."""
    assert split_microbatches(1, 4, 5) == (0, 0, 0, 0, 0)
    assert split_microbatches(2, 4, 8) == (0, 0, 1, 1, 0, 0, 1, 1)
    assert split_microbatches(2, 8, 8) == (0, 0, 0, 0, 1, 1, 1, 1)
    assert split_microbatches(2, 3, 6) == (0, 1, 1, 0, 1, 1)
    assert traits(BI).microbatch2pipeline(4, 16, per=2) == (0,) * 4 + (1,) * 4 + (0,) * 4 + (1,) * 4
    assert traits(L).microbatch2pipeline(4, 3) == (0, 0, 0)
    with pytest.raises(ValueError, match="pipelines must be 1 or 2, got 3"):
        split_microbatches(3, 4, 8)


def test_generators_and_cpsat_take_the_same_split():
    """Chimera, Chimera-FD and DualPipe's generators and CP-SAT's idealized problem send
    the microbatches the hand-written ways."""
    assert registry.generate("chimera", 4, 8).microbatch2pipeline == (0, 0, 1, 1, 0, 0, 1, 1)
    assert registry.generate("chimera-fd", 4, 8).microbatch2pipeline == (0, 0, 0, 0, 1, 1, 1, 1)
    assert registry.generate("dualpipe", 4, 8).microbatch2pipeline == (0, 0, 0, 0, 1, 1, 1, 1)
    assert idealized_problem(4, 8, "bidirectional").microbatch2pipeline == (0, 0, 1, 1, 0, 0, 1, 1)
    assert idealized_problem(4, 6, "free", pipelines=2).microbatch2pipeline == (0, 0, 1, 1, 0, 0)


@pytest.mark.parametrize("name, family", [
    ("gpipe", L), ("1f1b", L), ("zb-h1", L), ("zb-h2", L), ("chimera", BI), ("chimera-fd", BI),
    ("chimera-asym", BI), ("dualpipe", BI), ("hanayo", WAVE), ("zbv", V), ("dualpipev", V), ("v-half", V),
    ("v-min", V), ("interleaved", INT), ("looped-bfs", INT), ("interleaved-zb", INT),
])
def test_registry_families(name, family):
    """Each schedule's family as its authors place it, and its generator places it so."""
    assert registry.spec(name).family is family
    assert registry.schedule_traits(name) is TRAITS[family]
    s = registry.generate(name, 4, 16)
    n = tuple(s.num_stages(p) for p in range(s.num_pipelines))
    assert traits(family).place(4, n).stage2device == s.placement.stage2device


def test_registry_lists_every_schedule_above():
    """The parametrization above covers the registry (a new schedule must name its family)."""
    assert len(registry.REGISTRY) == 16



def test_framework_names():
    """torchtitan's ``pipeline_parallel_schedule`` names and the schedules Megatron-LM runs
    (what the emitters take from the registry)."""
    torch = {name: spec.torchtitan for name, spec in registry.REGISTRY.items() if spec.torchtitan}
    assert torch == {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "Interleaved1F1B",
                     "zbv": "ZBVZeroBubble", "dualpipev": "DualPipeV"}
    assert [name for name, spec in registry.REGISTRY.items() if spec.megatron] == ["1f1b", "interleaved"]
