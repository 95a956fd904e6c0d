"""``plan --emit``: Megatron-LM arguments whose names Megatron's source defines and
torchtitan TOML that ``tomllib`` reads, both read back to the planned configuration; the
schedule CSV read back to the planned orders."""

import itertools
from pathlib import Path

import pytest

from pipetab.cli import main
from pipetab.hardware.context import Recompute
from pipetab.hardware.layout import Layout
from pipetab.hardware.loaders import load_model
from pipetab.plan import plan, plan_question
from pipetab.plan.emit import (
    describe,
    megatron_args,
    megatron_text,
    module_fqns,
    read_megatron,
    read_torchtitan,
    torch_csv,
    torchtitan_toml,
)
from pipetab.schedules import registry
from pipetab.schedules.formats import from_torch_csv

DATA = Path(__file__).parents[1] / "data"
MEGATRON = {line for line in (DATA / "megatron_arguments.txt").read_text().splitlines() if line.startswith("--")}
TORCHTITAN = {line for line in (DATA / "torchtitan_fields.txt").read_text().splitlines()
              if line and not line.startswith("#")}


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
                 lambda c: c.shape.pp == 1):
        found = next((c for c in confs if pick(c)), None)
        if found is not None and found not in out:
            out.append(found)
    return out


def test_megatron_names_come_from_its_source_and_read_back(result):
    sp, _ = result
    seen = 0
    for conf in variants(result):
        if conf.schedule not in ("1f1b", "interleaved"):
            with pytest.raises(ValueError, match="Megatron-LM runs 1f1b and interleaved"):
                megatron_args(conf, sp.model)
            continue
        args = megatron_args(conf, sp.model)
        assert {a for a in args if a.startswith("--")} <= MEGATRON
        text = megatron_text(conf, sp.model, sp.num_gpus)
        assert read_megatron(text, sp.num_gpus) == describe(conf, sp.num_gpus, "megatron")
        seen += 1
    assert seen >= 2


def test_megatron_by_hand():
    from pipetab.hardware.context import Context
    from pipetab.plan.result import Configuration

    shape = Context(tp=8, dp=2, pp=4, cp=2, zero=3, microbatch_size=1, global_batch=64, seq_len=32768,
                    recompute="none", recompute_layers=(3, 2, 1, 0), layout="E|t*11|t*11|t*10L")
    conf = Configuration("1f1b", (), shape, 1.0, 1.0, 0.5, 1, 2, True, 0.1, layout=shape.layout.megatron())
    args = megatron_args(conf, load_model("llama3_8b"))
    assert args == ["--num-layers", "32", "--seq-length", "32768", "--micro-batch-size", "1",
                    "--global-batch-size", "64", "--tensor-model-parallel-size", "8",
                    "--pipeline-model-parallel-size", "4", "--context-parallel-size", "2", "--cp-comm-type", "p2p",
                    "--sequence-parallel", "--pipeline-model-parallel-layout", "E|t*11|t*11|t*10L",
                    "--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "3",
                    "--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params",
                    "--overlap-grad-reduce", "--overlap-param-gather"]
    assert set(a for a in args if a.startswith("--")) <= MEGATRON


def test_torchtitan_toml_reads_back(result):
    import tomllib

    sp, _ = result
    for conf in variants(result):
        text = torchtitan_toml(conf, sp.num_gpus, "schedule.csv")
        doc = tomllib.loads(text)
        assert {f"{section}.{key}" for section, table in doc.items() for key in table} <= TORCHTITAN
        back = read_torchtitan(text, sp.num_gpus)
        want = describe(conf, sp.num_gpus, "torchtitan")
        # what the reader does not take back is named: it compared only the keys both held,
        # which passed however little was read
        assert set(want) - set(back) == {"etp", "recompute"}
        assert {k: back[k] for k in want if k in back} == {k: want[k] for k in want if k not in ("etp", "recompute")}
        assert back["microbatches"] == conf.shape.microbatches and back["csv"] == "schedule.csv"


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


def test_cli_emit(capsys, tmp_path):
    base = ["plan", "--model", "llama3_8b", "--nodes", "1", "--gpus-per-node", "8", "--global-batch", "32",
            "--cpsat-shapes", "0", "--quiet"]
    assert main([*base, "--emit", "megatron", "--schedules", "1f1b,interleaved"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# pipetab plan:") and "--tensor-model-parallel-size" in out
    csv = tmp_path / "s.csv"
    assert main([*base, "--emit", "torchtitan", "--emit-csv", str(csv)]) == 0
    out = capsys.readouterr().out
    assert "[parallelism]" in out and csv.stat().st_size > 0
    assert main([*base, "--emit-csv", str(csv)]) == 2
    assert "--emit-csv applies with --emit torchtitan only" in capsys.readouterr().err
    assert main([*base, "--emit", "megatron", "--schedules", "zbv"]) == 2
    assert "no configuration found runs a schedule Megatron-LM runs" in capsys.readouterr().err


def test_torchtitan_csv_path_with_controls_parses(result):
    """A CSV file name holding a newline, CR, ESC, DEL or a bidi override is escaped
    (``schedules.text.toml_string``): the TOML parses and names the same path."""
    import tomllib

    sp, _ = result
    path = "dir\nname\r\x1b[2J\x7f\u202e.csv"
    doc = tomllib.loads(torchtitan_toml(variants(result)[0], sp.num_gpus, path))
    assert [t["pipeline_parallel_schedule_csv"] for t in doc.values()
            if "pipeline_parallel_schedule_csv" in t] == [path]
