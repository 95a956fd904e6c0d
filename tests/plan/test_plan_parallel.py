"""``plan`` with its shapes opened on the sweep executors (``pipetab.plan.parallel``): the
same ranking, numbers and certificate as in one process."""

import pytest

import pipetab.plan.search as search
from pipetab.plan import plan, plan_question
from pipetab.sweep import make_executor


def answer(result):
    return ([(c.label, c.shape, c.step_time_s, c.peak_memory_bytes, c.fits) for c in result.configurations],
            result.certificate.gap, result.candidates, result.simulated)


@pytest.fixture(scope="module")
def question():
    return plan_question("llama3_8b", 1, 8, 64, "H100", 8192, top=10, cpsat_shapes=0)


@pytest.fixture(scope="module")
def one_process(question):
    return answer(plan(question))


def spied(monkeypatch) -> list[int]:
    """The sizes of the batches of shapes handed to the executor."""
    sizes: list[int] = []
    real = search.open_shapes

    def spy(executor, token, space, shapes):
        sizes.append(len(shapes))
        return real(executor, token, space, shapes)

    monkeypatch.setattr(search, "open_shapes", spy)
    return sizes


def test_a_local_pool_gives_the_answer_of_one_process(question, one_process, monkeypatch):
    sizes = spied(monkeypatch)
    got = answer(plan(question, executor=make_executor("local", 2)))
    assert sizes and max(sizes) > 1  # shapes were opened side by side
    assert got == one_process


@pytest.mark.slow
def test_a_local_dask_cluster_gives_the_answer_of_one_process(question, one_process, monkeypatch):
    pytest.importorskip("distributed")
    sizes = spied(monkeypatch)
    got = answer(plan(question, executor=make_executor("dask", 2)))
    assert sizes and max(sizes) > 1
    assert got == one_process
