"""The checker's reference cache: every seed of the case in hand is computed once, whichever
row asks; another case, or too little free memory, drops what is cached - and the verdicts stay
right in both cases."""
import pytest
import torch

from harness import checker, problems


@pytest.fixture
def counted(monkeypatch):
    """The checker's answers in this process, with the references it computes counted."""
    problem = problems.get("vector_add")
    calls = []
    real = type(problem).reference_and_bound

    def counting(self, inputs, case, roundings=0):
        calls.append((case.id, inputs[0][:4].tolist()))
        return real(self, inputs, case, roundings)

    monkeypatch.setattr(type(problem), "reference_and_bound", counting)
    return problem, calls


def ask(problem, case, seed, cache, wrong=False):
    x, y = problem.make_inputs(case, "cpu", seed)
    out = (x.double() + y.double()).to(x.dtype)
    if wrong:
        out[len(out) // 2] += 1.0
    return checker._answer({"problem": problem.name, "case": case.to_json(), "seed": seed,
                            "inputs": [x, y], "output": out}, "cpu", cache)


def test_each_seed_of_a_case_is_computed_once_for_every_row(counted):
    problem, calls = counted
    case = problem.case(N=4099, dtype="float16")
    cache = {}
    for row in range(3):                        # three rows, each checked on seeds 0, 1, 2
        for seed in (0, 1, 2):
            assert ask(problem, case, seed, cache)["ok"]
    assert len(calls) == 3
    assert not ask(problem, case, 1, cache, wrong=True)["ok"]   # a cached reference still judges
    assert len(calls) == 3


def test_another_case_drops_the_cached_references(counted):
    problem, calls = counted
    a, b = problem.case(N=4099, dtype="float16"), problem.case(N=1001, dtype="float32")
    cache = {}
    for case in (a, b, a):
        assert ask(problem, case, 0, cache)["ok"]
    assert len(calls) == 3 and len(cache) == 1


def test_too_little_free_memory_keeps_one_reference(counted, monkeypatch):
    problem, calls = counted
    case = problem.case(N=4099, dtype="float16")
    monkeypatch.setattr(checker, "_free_bytes", lambda device: 1)
    cache = {}
    for seed in (0, 1, 0):
        assert ask(problem, case, seed, cache)["ok"]
    assert len(calls) == 3 and len(cache) == 1
    assert not ask(problem, case, 0, cache, wrong=True)["ok"]
