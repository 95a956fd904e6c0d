"""``plan --emit``: Megatron-LM arguments and torchtitan fields whose names the pinned
frameworks define (lists made from their source: ``experiments/megatron_args.py``,
``experiments/torchtitan_fields.py``), every configuration of a fixed set read back to
what was planned (or to what the framework runs, with a DIFFERS line naming the
difference), the schedule CSV read back to the planned orders."""

import itertools
import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from experiments.emit_clients import hand_made
from pipetab.cli import main
from pipetab.hardware.context import Recompute
from pipetab.hardware.layout import Layout
from pipetab.plan import plan, plan_question
from pipetab.plan.emit import (
    TORCHTITAN,
    TORCHTITAN_TOML,
    Notes,
    megatron_args,
    megatron_text,
    megatron_view,
    module_fqns,
    planned,
    read_megatron,
    read_torchtitan,
    torch_csv,
    torchtitan_command,
    torchtitan_toml,
    torchtitan_view,
)
from pipetab.schedules import registry
from pipetab.schedules.formats import from_torch_csv

DATA = Path(__file__).parents[1] / "data"
MEGATRON = {line for line in (DATA / "megatron_arguments.txt").read_text().splitlines() if line.startswith("--")}
FIELDS = [line.split(":", 1) for line in (DATA / "torchtitan_fields.txt").read_text().splitlines()
          if line and not line.startswith("#")]
TITAN = {version: {f for v, f in FIELDS if v == version} for version in (TORCHTITAN, TORCHTITAN_TOML)}
KEYS = ("pp", "tp", "cp", "dp", "ep", "microbatch_size", "global_batch", "seq_len", "layout", "chunks", "recompute")


@pytest.fixture(scope="module")
def result():
    sp = plan_question("llama3_8b", 2, 8, 64, "H100", 8192, cpsat_shapes=0, top=40)
    return sp, plan(sp)


def variants(result):
    """A few configurations unlike each other: schedules, ZeRO, layouts, recomputation."""
    confs = [c for c in result[1].evaluated if c.fits]
    out = [confs[0]]
    for pick in (lambda c: c.schedule == "interleaved", lambda c: c.schedule == "1f1b" and c.shape.zero == 3,
                 lambda c: c.shape.layout is not None, lambda c: c.shape.recompute is Recompute.FULL,
                 lambda c: c.shape.recompute_layers is not None, lambda c: c.shape.pp == 1):
        found = next((c for c in confs if pick(c)), None)
        if found is not None and found not in out:
            out.append(found)
    return out


def fixed_set():
    """The hand-made plans of ``make clients-frameworks``' fixed set: DeepSeek-V3's 61 layers
    on PP 16 (uneven), per-stage recompute with CP and ZeRO-3, MoE interleaved with
    overlapped pairs, FP8 with DeepEP and a node limit, ZeRO-2 on PP 1, ETP with recompute
    modules, selective recomputation with a module list on an interleaved pipeline."""
    return [(model, gpus, conf) for _, model, gpus, conf in hand_made()]


CASES = range(7)
ROUND_TRIP = ("pp", "tp", "cp", "dp", "ep", "layout", "schedule", "recompute", "microbatch_size", "global_batch")


def _said(key: str, differs: list[str]) -> bool:
    """Whether a DIFFERS line names ``key`` (the differences a framework may have: the
    recomputation, and MTP layers left out of the layout)."""
    word = {"recompute": "recomput", "layout": "MTP layer"}.get(key)
    return word is not None and any(word in line for line in differs)


@pytest.mark.parametrize("case", CASES)
def test_round_trip_to_the_plan(case):
    """Emitted -> read back == planned for the sizes, layout, schedule, recomputation,
    microbatch and global batch, in Megatron-LM's arguments (ETP and the dispatcher too)
    and both torchtitan forms; where a DIFFERS line names the recomputation, it reads back
    to what the framework runs instead, and that differs from the plan."""
    model, gpus, conf = fixed_set()[case]
    want = planned(conf, gpus, model)
    notes = Notes()
    back = read_megatron(megatron_text(conf, model, gpus, notes), gpus)
    for key in (*ROUND_TRIP, "etp", "dispatcher"):
        if _said(key, notes.differs):
            assert back[key] == megatron_view(conf, gpus, model)[key] != want[key], key
        else:
            assert back[key] == want[key], key
    for form in (torchtitan_command, torchtitan_toml):
        notes = Notes()
        back = read_torchtitan(form(conf, model.name, gpus, "s.csv", notes), gpus)
        for key in ROUND_TRIP:
            planned_value = registry.REGISTRY[want[key]].torchtitan if key == "schedule" else want[key]
            if _said(key, notes.differs):
                assert back[key] == torchtitan_view(conf, gpus, "s.csv")[key] != planned_value, key
            else:
                assert back[key] == planned_value, key


def test_round_trip_reads_what_megatron_is_given():
    """``read_megatron`` on hand-written arguments: the modules of a selective granularity,
    a block count on an uneven layout (at most each stage's layers), Megatron's default
    dispatcher (allgather) when none is given, EP and ETP."""
    base = ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--context-parallel-size", "1",
            "--micro-batch-size", "1", "--global-batch-size", "8", "--seq-length", "4096"]
    back = read_megatron(shlex.join([*base, "--recompute-granularity", "selective", "--recompute-modules", "mlp",
                                     "layernorm", "--num-experts", "8", "--expert-model-parallel-size", "4",
                                     "--expert-tensor-parallel-size", "2"]), 16)
    assert back["recompute"] == "modules:layernorm,mlp" and back["dispatcher"] == "allgather"
    assert (back["ep"], back["etp"], back["dp"]) == (4, 2, 4)
    back = read_megatron(shlex.join([*base, "--recompute-granularity", "full", "--recompute-method", "block",
                                     "--recompute-num-layers", "3", "--pipeline-model-parallel-layout", "Et|t*5L"]), 16)
    assert back["recompute"] == (1, 3) and back["layout"] == "Et|t*5L" and back["dispatcher"] == ""
    assert read_megatron(shlex.join([*base, "--recompute-granularity", "selective"]), 16)["recompute"] == "selective"


def test_megatron_names_come_from_its_source_and_read_back(result):
    """Every variant: names Megatron-LM defines; read back equal to what Megatron runs,
    which is the plan unless a DIFFERS line names the recomputation."""
    sp, _ = result
    seen = 0
    for conf in variants(result):
        if conf.schedule not in ("1f1b", "interleaved"):
            with pytest.raises(ValueError, match="Megatron-LM runs 1f1b and interleaved"):
                megatron_args(conf, sp.model)
            continue
        notes = Notes()
        args = megatron_args(conf, sp.model, notes)
        assert {a for a in args if a.startswith("--")} <= MEGATRON
        back = read_megatron(megatron_text(conf, sp.model, sp.num_gpus), sp.num_gpus)
        assert back == megatron_view(conf, sp.num_gpus, sp.model)
        plan_view = planned(conf, sp.num_gpus, sp.model)
        same = {k for k in KEYS if k != "layout" or conf.shape.pp > 1}
        differs = {k for k in same if back[k] != plan_view[k]}
        assert differs <= ({"recompute"} if any("recomputation" in n for n in notes.differs) else set())
        seen += 1
    assert seen >= 2


@pytest.mark.parametrize("case", CASES)
def test_fixed_set_megatron(case):
    """The fixed set: names from Megatron's source, the layout always with PP > 1 (61 layers
    on 16 stages included), the dispatcher alltoall, FSDP with fsdp_dtensor, read back."""
    model, gpus, conf = fixed_set()[case]
    notes = Notes()
    text = megatron_text(conf, model, gpus, notes)
    args = megatron_args(conf, model)
    assert {a for a in args if a.startswith("--")} <= MEGATRON
    back = read_megatron(text, gpus)
    assert back == megatron_view(conf, gpus, model)
    want = planned(conf, gpus, model)
    for key in ("pp", "tp", "cp", "dp", "ep", "etp", "microbatch_size", "global_batch", "chunks"):
        assert back[key] == want[key], key
    if conf.shape.pp > 1:
        assert back["layout"] == want["layout"]
    if model.moe:
        fp8 = str(conf.shape.dispatch_precision) == "fp8"  # DeepSeek's FP8 dispatch: DeepEP
        assert args[args.index("--moe-token-dispatcher-type") + 1] == ("flex" if fp8 else "alltoall")
        assert args[args.index("--moe-layer-freq") + 1] == "([0]*3+[1]*58)"
    if conf.shape.zero >= 2:
        assert args[args.index("--ckpt-format") + 1] == "fsdp_dtensor"
        assert "export CUDA_DEVICE_MAX_CONNECTIONS=32" in text
    if case == 1:  # per-stage recompute: Megatron's uniform count, said
        assert back["recompute"] == (0, 3, 3, 3) and want["recompute"] == (0, 2, 1, 0)  # E holds no layer
        assert any("per-stage recomputation [3, 2, 1, 0]" in n for n in notes.differs)
        assert "# DIFFERS FROM THE PLAN: per-stage recomputation" in text
    else:
        assert back["recompute"] == want["recompute"] and not notes.differs
    if case == 3:  # node limit 2 on an EP group over 4 nodes: Megatron's group-limited routing
        assert args[args.index("--moe-router-num-groups") + 1] == "4"
        assert args[args.index("--moe-router-group-topk") + 1] == "2" and "--fp8-format" in args
    if case == 2:  # overlapped pairs on an interleaved MoE plan: Megatron's EP overlap
        assert "--overlap-moe-expert-parallel-comm" in args and back["schedule"] == "interleaved"


def test_megatron_overlap_refused_with_full_recompute_is_said():
    """Megatron refuses the EP overlap with full recomputation: the flag is left out, said."""
    model, _, conf = fixed_set()[2]
    from dataclasses import replace

    conf = replace(conf, shape=conf.shape.replace(recompute="full"))
    notes = Notes()
    args = megatron_args(conf, model, notes)
    assert "--overlap-moe-expert-parallel-comm" not in args
    assert any("refuses full recomputation" in n for n in notes.differs)


@pytest.mark.parametrize("case", CASES)
def test_fixed_set_torchtitan(case):
    """The fixed set in both torchtitan forms: fields of the targeted release, read back to
    what torchtitan runs; EP legal for torchtitan (it divides dp_shard x cp x tp)."""
    model, gpus, conf = fixed_set()[case]
    if model.name not in ("llama3_8b", "deepseek_v3"):
        pytest.skip("not a torchtitan model")
    for form, version in ((torchtitan_command, TORCHTITAN), (torchtitan_toml, TORCHTITAN_TOML)):
        notes = Notes()
        text = form(conf, model.name, gpus, "s.csv", notes)
        back = read_torchtitan(text, gpus)
        assert back == torchtitan_view(conf, gpus, "s.csv")
        s = conf.shape
        assert s.ep == 1 or (back["shard"] * s.cp * s.tp) % s.ep == 0
        if s.zero in (1, 2):
            assert any(f"ZeRO-{s.zero} planned" in n for n in notes.differs)
        names = _fields(text, form is torchtitan_toml)
        assert names <= TITAN[version], names - TITAN[version]


def _fields(text: str, toml: bool) -> set[str]:
    import tomllib

    if toml:
        return {f"{sec}.{key}" for sec, table in tomllib.loads(text).items() for key in table}
    return {tok[2:] for tok in text.split() if tok.startswith(("--parallelism.", "--training."))}


def test_torchtitan_reads_back(result):
    """The variants in the current form: sizes, layout, microbatch, schedule read back."""
    sp, _ = result
    for conf in variants(result):
        if registry.schedule_traits(conf.schedule).pipelines != 1:
            with pytest.raises(ValueError, match="torchtitan runs one"):
                torchtitan_command(conf, "llama3_8b", sp.num_gpus, "s.csv")
            continue
        text = torchtitan_command(conf, "llama3_8b", sp.num_gpus, "s.csv")
        back = read_torchtitan(text, sp.num_gpus)
        assert back == torchtitan_view(conf, sp.num_gpus, "s.csv")
        want = planned(conf, sp.num_gpus)
        for key in ("pp", "tp", "cp", "dp", "microbatch_size", "global_batch", "seq_len", "chunks"):
            assert back[key] == want[key], key


def test_torchtitan_refuses_an_unknown_model():
    _, gpus, conf = fixed_set()[4]
    with pytest.raises(ValueError, match=r"--model gpt3_175b: torchtitan 0\.3\.0 defines no configuration"):
        torchtitan_command(conf, "gpt3_175b", gpus)


def test_module_names_of_a_layout():
    assert module_fqns(Layout.parse("Et|tt|tL")) == [["tok_embeddings", "layers.0"], ["layers.1", "layers.2"],
                                                     ["layers.3", "norm", "output"]]


def test_schedule_csv_reads_back_to_the_orders(result):
    for conf in variants(result):
        sched = registry.generate(conf.schedule, conf.shape.pp, conf.shape.microbatches, **dict(conf.options))
        if sched.num_pipelines != 1:
            continue
        table = from_torch_csv(torch_csv(conf, sched))
        bounds = table.offsets.tolist()
        back = [tuple(table.ops.op(k) for k in range(a, b)) for a, b in itertools.pairwise(bounds)]
        assert back == [tuple(order) for order in sched.orders]


BASE = ["plan", "--model", "llama3_8b", "--nodes", "1", "--gpus-per-node", "8", "--global-batch", "32",
        "--cpsat-shapes", "0", "--quiet"]


def test_cli_emit(capsys, tmp_path):
    assert main([*BASE, "--emit", "megatron", "--schedules", "1f1b,interleaved"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# pipetab plan:") and "--tensor-model-parallel-size" in out
    csv = tmp_path / "s.csv"
    assert main([*BASE, "--emit", "torchtitan", "--emit-csv", str(csv)]) == 0
    out = capsys.readouterr().out
    assert "--module llama3" in out and csv.stat().st_size > 0
    assert main([*BASE, "--emit", "torchtitan-toml"]) == 0
    assert "[parallelism]" in capsys.readouterr().out
    assert main([*BASE, "--emit-csv", str(csv)]) == 2
    assert "--emit-csv applies with --emit torchtitan" in capsys.readouterr().err
    assert main([*BASE, "--force"]) == 2
    assert "--force applies with --emit only" in capsys.readouterr().err


def test_cli_emit_substitutes_and_says_so(capsys):
    """A winner Megatron cannot run: the best row it runs, named on stderr and in the text;
    --no-substitute refuses."""
    args = [*BASE, "--emit", "megatron", "--schedules", "zbv,1f1b"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    if "substituted" in err:
        assert "# DIFFERS FROM THE PLAN: the best configuration" in out
        assert main([*args, "--no-substitute"]) == 2
        assert "--no-substitute" in capsys.readouterr().err
    assert main([*BASE, "--emit", "megatron", "--schedules", "zbv"]) == 0
    out, err = capsys.readouterr()
    assert "substituted its best row it runs" in err and "--pipeline-model-parallel-size" in out


def test_cli_emit_refuses_what_does_not_fit(capsys):
    args = ["plan", "--model", "llama3_70b", "--nodes", "1", "--gpus-per-node", "1", "--global-batch", "8",
            "--cpsat-shapes", "0", "--quiet", "--emit", "megatron"]
    assert main(args) == 2
    assert "no configuration fits the GPU memory" in capsys.readouterr().err
    assert main([*args, "--force"]) == 0
    assert "# DOES NOT FIT" in capsys.readouterr().out


def test_cli_emit_with_html(capsys, tmp_path):
    page = tmp_path / "p.html"
    assert main([*BASE, "--emit", "megatron", "--html", str(page)]) == 0
    assert page.stat().st_size > 0 and "pretrain_gpt.py" in capsys.readouterr().out


def test_torchtitan_schedule_as_planned_or_refused():
    """A schedule torchtitan has no class of runs from the CSV with the class of its
    placement (said); without --emit-csv, or with two pipelines, refused with the reason."""
    from dataclasses import replace

    model, gpus, base = fixed_set()[1]
    zb = replace(base, schedule="zb-h1", options=())
    notes = Notes()
    text = torchtitan_command(zb, model.name, gpus, "s.csv", notes)
    back = read_torchtitan(text, gpus)
    assert back["schedule"] == "1F1B" and back["csv"] == "s.csv"
    assert any("stage -> rank" in line for line in notes.assumes)
    with pytest.raises(ValueError, match=r"give --emit-csv FILE\.csv"):
        torchtitan_command(zb, model.name, gpus)
    chimera = replace(base, schedule="chimera", options=())
    with pytest.raises(ValueError, match="torchtitan runs one"):
        torchtitan_toml(chimera, model.name, gpus, "s.csv")


def test_cli_emit_torchtitan_of_a_model_it_lacks(capsys):
    """A model torchtitan defines no configuration of: one line naming it, exit 2."""
    args = ["plan", "--model", "gpt3_2p7b", "--nodes", "1", "--gpus-per-node", "8", "--global-batch", "32",
            "--cpsat-shapes", "0", "--quiet", "--emit", "torchtitan"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--model gpt3_2p7b: torchtitan 0.3.0 defines no configuration of it" in err and len(err.splitlines()) == 1


def test_torchtitan_fp8_and_node_limit_are_said():
    model, gpus, conf = fixed_set()[3]
    notes = Notes()
    torchtitan_command(conf, model.name, gpus, "", notes)
    assert any("FP8 GEMMs or dispatch planned" in n for n in notes.differs)
    assert any("at most 2 nodes" in n for n in notes.differs)


def test_declared_names_are_the_frameworks():
    """Every context decision's Megatron-LM name is an argument of its source, and every
    torchtitan name but the recomputation's (a subcommand in 0.3.0) a field of the current
    release (the names the emitters write come from these declarations)."""
    from pipetab.hardware.decisions import DECISIONS

    assert {d.megatron for d in DECISIONS if d.megatron} <= MEGATRON
    titan = {d.torchtitan for d in DECISIONS if d.torchtitan and d.name != "recompute"}
    assert titan <= TITAN[TORCHTITAN], titan - TITAN[TORCHTITAN]
    assert "activation_checkpoint.mode" in TITAN[TORCHTITAN_TOML]


def test_torchtitan_csv_path_with_controls_parses():
    """A CSV file name holding a newline, CR, ESC, DEL or a bidi override is escaped
    (``schedules.text.toml_string``): the TOML value parses back to the same path."""
    import tomllib

    from pipetab.plan.emit.torchtitan import _toml_value

    path = "dir\nname\r\x1b[2J\x7f\u202e.csv"
    assert tomllib.loads(f"v = {_toml_value(path)}")["v"] == path


def test_memory_techniques_reach_the_emitted_configuration(result):
    """Issue 40's rows name their techniques; what a row names is in what is emitted:
    recompute modules as Megatron's --recompute-modules (selective), and what a framework
    cannot express (FP8 activation caching; module lists in torchtitan) as a DIFFERS line."""
    from pipetab.hardware.context import Precision
    from pipetab.plan.emit.notes import Notes

    sp, _ = result
    conf = next(c for c in variants(result) if c.schedule in ("1f1b", "interleaved"))
    shaped = replace(conf, shape=conf.shape.replace(recompute_modules=("layernorm", "mlp")))
    args = megatron_args(shaped, sp.model)
    at = args.index("--recompute-modules")
    assert args[at - 2:at] == ["--recompute-granularity", "selective"] and args[at + 1:at + 3] == ["layernorm", "mlp"]
    notes = Notes()
    fp8 = conf.shape.replace(activation_precision=Precision.FP8, gemm_precision=Precision.FP8)
    megatron_args(replace(conf, shape=fp8), sp.model, notes)
    assert any("FP8 activation caching" in line for line in notes.differs)
    notes = Notes()
    torchtitan_command(shaped, "llama3_8b", sp.num_gpus, "s.csv", notes)
    assert any("recompute modules layernorm,mlp" in line for line in notes.differs)


def test_selective_recompute_on_flash_attention_is_said_to_differ():
    """pipetab prices selective recomputation on flash attention as recomputing nothing;
    Megatron's selective granularity runs the attention core again: a DIFFERS line says so,
    and none on classic attention, where the two agree."""
    from pipetab.plan.emit import Notes, megatron_args

    _, model, _gpus, conf = hand_made()[1]
    conf = replace(conf, shape=conf.shape.replace(recompute=Recompute.SELECTIVE, recompute_modules=(),
                                                    recompute_layers=None))
    said = "selective recomputation planned on flash attention"
    for attention, differs in (("flash", True), ("classic", False)):
        notes = Notes()
        args = megatron_args(conf, replace(model, attention=attention), notes)
        assert args[args.index("--recompute-granularity") + 1] == "selective"
        assert any(n.startswith(said) for n in notes.differs) is differs
