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


def ask_bits(problem, case, seed, cache, out=None, mutate=False, **msg):
    x, y = problem.make_inputs(case, "cpu", seed)
    if out is None:
        out = (x.double() + y.double()).to(x.dtype)
    if mutate:
        x[0] += 1.0
    return checker._answer({"problem": problem.name, "case": case.to_json(), "seed": seed,
                            "inputs": [x, y], "output": out, **msg}, "cpu", cache)


def test_the_verified_bits_pass_without_a_reference_and_other_bits_get_the_whole_check(counted):
    """The timing's checks: an output with the fingerprint of the verified one needs no float64
    reference; any other output (one element off by an ulp) is compared in full and fails;
    a mutated input fails whatever the output's bits."""
    from harness.output_check import fingerprint
    problem, calls = counted
    case = problem.case(N=4099, dtype="float16")
    first = ask_bits(problem, case, 0, {}, fingerprint=True)
    assert first["ok"] and len(calls) == 1
    bits = first["details"]["bits"]
    x, y = problem.make_inputs(case, "cpu", 0)
    good = (x.double() + y.double()).to(x.dtype)
    assert bits == fingerprint(good)
    cache = {}                                  # the timing's checker: a fresh process
    same = ask_bits(problem, case, 0, cache, out=good.clone(), expect=bits)
    assert same["ok"] and same["details"]["same_bits"] and len(calls) == 1
    assert "reference_s" not in same["details"]["checker_s"]
    off = good.clone()
    off[4098] = torch.nextafter(off[4098:].float(), torch.tensor([float("inf")])).to(off.dtype)
    off[17] += 1.0
    bad = ask_bits(problem, case, 0, cache, out=off, expect=bits)
    assert not bad["ok"] and len(calls) == 2 and "same_bits" not in bad["details"]
    mutated = ask_bits(problem, case, 0, cache, out=good.clone(), expect=bits, mutate=True)
    assert not mutated["ok"] and "modified" in mutated["reason"]


def test_a_failing_output_gets_no_fingerprint(counted):
    problem, _ = counted
    case = problem.case(N=1001, dtype="float32")
    x, y = problem.make_inputs(case, "cpu", 0)
    out = (x + y) * 1.5
    res = ask_bits(problem, case, 0, {}, out=out, fingerprint=True)
    assert not res["ok"] and "bits" not in res["details"]


def test_fingerprints_see_every_bit_and_ignore_the_layout():
    from harness.output_check import fingerprint
    g = torch.Generator().manual_seed(3)
    a = torch.randn(300, 777, generator=g).to(torch.bfloat16)
    assert fingerprint(a) == fingerprint(a.clone())
    wide = torch.zeros(300, 780, dtype=torch.bfloat16)
    wide[:, 1:778] = a                          # the same values as a strided, misaligned view
    assert fingerprint(wide[:, 1:778]) == fingerprint(a)
    for i in (0, 1, a.numel() // 2, a.numel() - 1):   # first, odd, middle and last element
        b = a.clone().view(-1)
        b.view(torch.int16)[i] ^= 1             # one bit flipped
        assert fingerprint(b.view(300, 777)) != fingerprint(a)
    assert fingerprint(a.view(777, 300)) != fingerprint(a)          # the shape counts
    assert fingerprint(torch.zeros(3, dtype=torch.float16)) != fingerprint(torch.zeros(3, dtype=torch.bfloat16))
    z = torch.zeros(5)
    assert fingerprint(z) != fingerprint(-z)    # -0.0 is other bits
