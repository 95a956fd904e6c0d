"""Every size is bounded where a file or string is read (``schedules.limits.SIZE_LIMITS``),
every field of a trace checked by type and range, and text from files escaped for the
place it goes (``schedules.text``): one ``ValueError`` naming the file and the key, before
any work — never a hang, ``MemoryError``, ``OverflowError`` or another exception."""

from __future__ import annotations

import gzip
import json
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipetab.hardware.hf import model_from_hf_config
from pipetab.hardware.layout import MAX_EXPANDED, Layout
from pipetab.hardware.profile import profile_from_file
from pipetab.hardware.trace import profile_from_traces, read_trace
from pipetab.schedules.limits import SIZE_LIMITS
from pipetab.schedules.text import html_text, terminal_text, toml_string

HF = Path(__file__).resolve().parents[1] / "data" / "hf"


def _config(tmp_path: Path, name: str, **changes) -> Path:
    doc = json.loads((HF / name).read_text())
    doc.update(changes)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("name, key, value", [
    ("llama-3.1-8b.json", "num_hidden_layers", 2**70),
    ("mixtral-8x7b.json", "num_local_experts", 2**40),
    ("deepseek-v3.json", "num_nextn_predict_layers", 2**40),
    ("llama-3.1-8b.json", "hidden_size", 10**30),
    ("llama-3.1-8b.json", "vocab_size", 2**27),
])
def test_config_sizes_bounded_by_key(tmp_path, name, key, value):
    """The issue's examples: each absurd size is refused naming the file and the key and the limit."""
    path = _config(tmp_path, name, **{key: value})
    with pytest.raises(ValueError, match=rf"config\.json: key '{key}' must be an integer from \d+ to [\d,]+"):
        model_from_hf_config(path)


def test_config_at_the_limit_is_read(tmp_path):
    """The limit itself is allowed (a refusal is for what lies beyond it)."""
    path = _config(tmp_path, "llama-3.1-8b.json", vocab_size=SIZE_LIMITS["vocab"])
    assert model_from_hf_config(path).vocab == SIZE_LIMITS["vocab"]


def test_config_with_a_huge_integer_names_the_file(tmp_path):
    """A 5,000-digit number is beyond Python's int parsing limit: named with the file."""
    path = tmp_path / "config.json"
    path.write_text('{"architectures": ["LlamaForCausalLM"], "hidden_size": ' + "9" * 5000 + "}")
    with pytest.raises(ValueError, match=r"config\.json: not a config\.json pipetab can read"):
        model_from_hf_config(path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(["num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                            "intermediate_size", "vocab_size", "num_local_experts", "num_experts_per_tok"]),
       value=st.one_of(st.integers(-2**80, 2**80), st.floats(allow_nan=True), st.text(max_size=5), st.none(),
                       st.lists(st.integers(), max_size=2), st.booleans()))
def test_random_config_values_give_a_model_or_a_named_refusal(tmp_path, key, value):
    """Property: any value of any size key yields a model or one ValueError naming the file."""
    path = _config(tmp_path, "mixtral-8x7b.json", **{key: value})
    try:
        model_from_hf_config(path)
    except ValueError as exc:
        assert str(exc).startswith(str(path))


@pytest.mark.parametrize("key, value", [("tp", 2**40), ("dp", 2**40), ("microbatch_size", 2**40),
                                        ("stages", 2**40)])
def test_profile_sizes_bounded(tmp_path, key, value):
    """A profile's degrees and stage count are bounded as the command line bounds them."""
    path = tmp_path / "p.toml"
    path.write_text(f'summary = "x"\n{key} = {value}\n[default]\nforward = 1.0\nbackward = 2.0\n')
    with pytest.raises(ValueError, match=rf"p\.toml: key '{key}' must be"):
        profile_from_file(path)


@pytest.mark.parametrize("text, message", [
    ("Et*99999999999|t*4L", "a number of times 11 digits long"),
    ("Et*" + str(2**70) + "|t*4L", "22 digits long"),
    ("E(t|)*3000000t*4L", "expands to 6,000,005 characters"),
    ("Et*\uff14|tL", "has characters"),  # a full-width digit is no repeat count
])
def test_layout_repeats_bounded_before_expanding(text, message):
    """The issue's examples: refused from the counts, before any string is built."""
    with pytest.raises(ValueError, match=message):
        Layout.parse(text)


def test_layout_within_the_limit_still_expands():
    assert Layout.parse("Et*3|(tt|)*4t*3L").layers == (3, 2, 2, 2, 2, 3)
    assert SIZE_LIMITS["layers"] + SIZE_LIMITS["layout_stages"] <= MAX_EXPANDED


# ---- traces -------------------------------------------------------------------------------
def _trace_doc(**kernel_changes) -> dict:
    """A minimal trace: one forward and one backward, each with a kernel tied to its launch."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "PP:0F0", "ts": 0, "dur": 10},
        {"ph": "X", "cat": "user_annotation", "name": "PP:0B0", "ts": 20, "dur": 10},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1, "dur": 1, "args": {"correlation": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 21, "dur": 1, "args": {"correlation": 2}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 2, "dur": 5, "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 22, "dur": 7, "args": {"correlation": 2}, **kernel_changes},
    ]
    return {"traceEvents": events}


def _write(tmp_path: Path, doc: dict | str, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_a_valid_trace_reads(tmp_path):
    t = read_trace(_write(tmp_path, _trace_doc()))
    assert t.ops[(0, "F")] == [pytest.approx(5e-6)] and t.ops[(0, "B")] == [pytest.approx(7e-6)]


@pytest.mark.parametrize("changes, field", [
    ({"dur": [1]}, "'dur' [1]"),
    ({"dur": {"a": 1}}, "'dur' {'a': 1}"),
    ({"ts": None}, "'ts' None"),
    ({"dur": -3}, "'dur' -3"),
    ({"args": {"correlation": [2]}}, "'args.correlation' [2]"),
    ({"args": {"correlation": {"x": 2}}}, "'args.correlation'"),
    ({"args": {"correlation": True}}, "'args.correlation' True"),
])
def test_trace_fields_checked_by_type_and_range(tmp_path, changes, field):
    """Lists, objects, nulls and negatives where numbers belong: the trace, event and field named."""
    path = _write(tmp_path, _trace_doc(**changes))
    with pytest.raises(ValueError, match=r"trace '.*t\.json': event 'gemm' has " + field.replace("[", r"\[")
                       .replace("]", r"\]").replace("{", r"\{").replace("}", r"\}")):
        read_trace(path)


def test_trace_with_400_digit_times(tmp_path):
    text = json.dumps(_trace_doc()).replace('"ts": 22', '"ts": ' + "9" * 400)
    with pytest.raises(ValueError, match=r"event 'gemm' has 'ts' a number of \d+ bits; a time is a finite number"):
        read_trace(_write(tmp_path, text))


def test_trace_with_corrupt_gzip(tmp_path):
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": []}')[:12] + b"garbage" * 10)
    with pytest.raises(ValueError, match=r"t\.json\.gz' is not readable gzip data"):
        read_trace(path)


@pytest.mark.parametrize("args", [None, [1], {"Total Allocated": None}, {"Total Allocated": {"a": 1}}])
def test_trace_memory_events_checked(tmp_path, args):
    doc = _trace_doc()
    doc["traceEvents"].append({"ph": "i", "name": "[memory]", "ts": 3, "args": args})
    with pytest.raises(ValueError, match=r"trace '.*t\.json': .*'\[memory\]'|Total Allocated"):
        read_trace(_write(tmp_path, doc))


def test_trace_of_zero_time_names_the_trace(tmp_path):
    """Annotations that last 0 us and no kernels: the refusal names the trace."""
    doc = {"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": n, "ts": 5, "dur": 0}
                           for n in ("PP:0F0", "PP:0B0")]}
    with pytest.raises(ValueError, match=r"trace '.*t\.json': forward_s must be > 0"):
        profile_from_traces([_write(tmp_path, doc)])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(["ts", "dur", "args", "cat", "name"]),
       value=st.one_of(st.none(), st.booleans(), st.integers(-2**600, 2**600), st.floats(allow_nan=True),
                       st.text(max_size=4), st.lists(st.integers(), max_size=2),
                       st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)))
def test_random_traces_read_or_refuse_by_name(tmp_path, field, value):
    """Property: a trace with any value in any field of a kernel reads, or is refused naming it."""
    path = _write(tmp_path, _trace_doc(**{field: value}))
    try:
        read_trace(path)
    except ValueError as exc:
        assert str(exc).startswith(f"trace {str(path)!r}")


# ---- text ---------------------------------------------------------------------------------
NASTY = 'a\nb\rc\x1b[31md\x7fe\u202ef\u2066g\u0085h\\i"j\u200bk'


def test_toml_string_round_trips():
    """Every control, bidi and quote character: the TOML parses back to the same text."""
    assert tomllib.loads(f"v = {toml_string(NASTY)}")["v"] == NASTY
    assert not any(c in toml_string(NASTY) for c in "\n\r\x1b\x7f\u202e\u2066\u0085\u200b")


def test_terminal_text_escapes_controls_and_bidi():
    shown = terminal_text(NASTY)
    assert not any(c in shown for c in "\n\r\x1b\x7f\u202e\u2066\u0085\u200b")
    assert "\\u202e" in shown and "\\x1b" in shown and "\\n" in shown


def test_html_text_escapes_markup_and_bidi():
    shown = html_text('<script>"x"</script>\u202e&')
    assert shown == "&lt;script&gt;&quot;x&quot;&lt;/script&gt;\\u202e&amp;"
