"""Gluon stream-K GEMM (``gluon_src/gemm_epilogue_streamk.py``): the invariants of its walk over
many shapes and grids (every output tile stored by exactly one program, every K step of a tile
computed exactly once, every partial absorbed exactly once by its tile's owner, a higher program),
the memory ordering of its compiled flags (release after the partial's stores, one acquire shared
by the CTA before the partial is read, no reset that a lagging warp could miss), its counts left
balanced by every launch (no per-call reset needed), and on a GPU (``-m gpu``) the cases that once
left a warp's rows NaN, many seeds and many launches."""
import re
from collections import Counter, defaultdict

import pytest
import torch

triton = pytest.importorskip("triton")
pytest.importorskip("triton.experimental.gluon")

from harness import problems, registry  # noqa: E402
from harness.verify import verify_case  # noqa: E402

HAS_GPU = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9
#: the cases gluon:gemm_epilogue_next left one tile's worth of NaN in on an H100 (2026-12-05)
FAILED = ((640, 136, 4104, "bfloat16", "gelu", 0), (640, 136, 4104, "float16", "gelu", 0),
          (256, 4096, 14_336, "bfloat16", "none", 1))


def _S():
    from gluon_src import gemm_epilogue_streamk
    return gemm_epilogue_streamk


def _grids():
    """(M, N, K, cfg, programs) of every tma tile over a spread of shapes, on 132 SMs and on other
    SM counts."""
    from gluon_src import dispatch
    S = _S()
    for sms in (132, 114, 78):
        for M in (1, 64, 100, 256, 555, 640, 2048, 3000):
            for N in (136, 1000, 4096, 6144):
                for K in (64, 136, 777, 4104, 14_336):
                    for cfg in dispatch.GEMM["tma"]:
                        yield M, N, K, cfg, S.programs_for(M, N, K, cfg, sms)


def _check_walk(M, N, K, cfg, programs):
    S = _S()
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    ks = triton.cdiv(K, cfg["BLOCK_K"])
    work = S.schedule(tiles, ks, programs)
    where = (M, N, K, cfg["BLOCK_M"], cfg["BLOCK_N"], programs)
    stored = Counter(t for mine in work for t, _, _, role, _ in mine if role != "partial")
    assert stored == Counter(range(tiles)), where
    steps = defaultdict(list)
    published = {}
    for pid, mine in enumerate(work):
        sk = [w for w in mine if w[3] != "tile"]
        assert sk or S.dp_tiles(tiles, programs) == tiles, (where, pid, "a program with no stream-K step")
        assert all(w[3] == "owner" for w in sk[1:]), (where, pid, "a partial not the first piece")
        for t, k0, k1, role, _ in mine:
            assert 0 <= k0 < k1 <= ks, (where, pid, t, k0, k1)
            steps[t].append((k0, k1))
            if role == "partial":
                published[pid] = t
    for t, ranges in steps.items():
        ranges.sort()
        assert ranges[0][0] == 0 and ranges[-1][1] == ks, (where, t, ranges)
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), (where, t, ranges)
    absorbed = Counter()
    for pid, mine in enumerate(work):
        for t, _, _, role, qs in mine:
            for q in qs:
                assert q < pid and published.get(q) == t, (where, pid, t, q)
                absorbed[q] += 1
    assert absorbed == Counter(published.keys()), (where, "a partial absorbed other than once")
    return work


def test_walk_stores_every_tile_once_and_every_k_step_once():
    from gluon_src import dispatch
    S = _S()
    for M, N, K, *_ in FAILED:
        cfg = dispatch.gemm_streamk_config(M, N, K, {"sms": 132})[1]
        programs = S.programs_for(M, N, K, cfg, 132)
        assert programs == 132
        work = _check_walk(M, N, K, cfg, programs)
        assert any(w[4] for mine in work for w in mine), "the failed cases absorb partials"
    for M, N, K, cfg, programs in _grids():
        _check_walk(M, N, K, cfg, programs)


def test_counts_balance_after_every_launch():
    """flags[q] (partials published) and flags[G + q] (absorbed) start zero and every launch
    raises each by one for every program that publishes, so each launch's owner waits for
    exactly that launch's partial without a reset between calls, also after a launch whose owner
    gave up on a partial (the late partial squares it)."""
    S = _S()
    M, N, K = 640, 136, 4104
    from gluon_src import dispatch
    cfg = dispatch.gemm_streamk_config(M, N, K, {"sms": 132})[1]
    _, flags = S.workspace(cfg, 132, "cpu")
    assert flags.shape == (264,) and flags.dtype == torch.int32 and not flags.any()
    work = S.schedule(triton.cdiv(M, 64) * triton.cdiv(N, 64), triton.cdiv(K, 64), 132)
    pub, done = flags[:132].tolist(), flags[132:].tolist()
    for launch in range(3):
        waits = [(q, done[q] + 1) for mine in work for w in mine for q in w[4]]
        for pid, mine in enumerate(work):
            pub[pid] += any(w[3] == "partial" for w in mine)
        for q, want in waits:
            assert pub[q] == want == launch + 1, (launch, q)
            done[q] = want
        assert pub == done


# -- compiled for sm_90a: the memory ordering the flags rely on -------------------------------------
def _ptx(M, N, K, dtype, act, bias):
    from backends import gluon_layer as G
    case = problems.get("gemm_epilogue").case(M=M, N=N, K=K, dtype=dtype, act=act, bias=bias)
    variant, specs = G._gemm_specs("next", case)
    assert variant == "streamk"
    f = G.compile_spec(specs[0])
    assert f["spills"] == 0
    return [ln.strip() for ln in f["ptx"].splitlines()]


def _block_before(lines, i):
    """The lines of i's basic block before i (back to the label or branch that starts it)."""
    j = i
    while j > 0 and not lines[j - 1].startswith("$L__BB") and "bra" not in lines[j - 1]:
        j -= 1
    return lines[j:i]


def test_flags_release_and_acquire_at_gpu_scope():
    """Producer: the partial's stores, a CTA barrier, then one thread's release add at gpu scope.
    Owner: one thread's acquire read at gpu scope, shared through shared memory behind a barrier
    (every warp leaves the poll on the same value); the partial read from L2 in a block that a
    barrier opens. No exchange and no per-thread volatile poll (the old reset to 0 that a lagging
    warp could miss, leaving its rows NaN)."""
    lines = _ptx(*FAILED[0])
    text = "\n".join(lines)
    assert "exch" not in text and "ld.volatile" not in text
    rel = [i for i, ln in enumerate(lines) if re.search(r"(red|atom)\.global\.gpu\.release\.add", ln)]
    assert len(rel) == 1 and lines[rel[0]].startswith("@%p")
    before = _block_before(lines, rel[0])
    stores = [k for k, ln in enumerate(before) if ln.startswith("st.global")]
    assert stores and any(ln.startswith("bar.sync") for ln in before[stores[-1]:])
    acq = [i for i, ln in enumerate(lines) if re.search(r"(ld|atom)\.global\.gpu\.acquire", ln)]
    assert acq and all(lines[i].startswith("@%p") for i in acq)
    for i in acq:
        share = next(j for j in range(i, len(lines)) if lines[j].startswith("@%p") and "st.shared" in lines[j])
        bar = next(j for j in range(share, len(lines)) if lines[j].startswith("bar.sync"))
        assert next(j for j in range(bar, len(lines)) if lines[j].startswith("ld.shared")) > bar
    reads = [i for i, ln in enumerate(lines) if re.match(r"ld\.global\.cg\.v", ln)]
    assert reads and any(ln.startswith("bar.sync") for ln in _block_before(lines, reads[0]))


# -- GPU ---------------------------------------------------------------------------------------------
def _failed_case(M, N, K, dtype, act, bias):
    return problems.get("gemm_epilogue").case(M=M, N=N, K=K, dtype=dtype, act=act, bias=bias)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a Hopper GPU")
@pytest.mark.parametrize("shape", FAILED, ids=lambda s: "x".join(map(str, s[:3])) + f"-{s[3]}-{s[4]}")
def test_next_on_the_failed_cases(shape):
    """gluon:gemm_epilogue_next (streamk on these) on the cases that left NaN, eight seeds, every
    seed's launch run twice into re-poisoned output."""
    impl = registry.get("gemm_epilogue", "gluon:gemm_epilogue_next", candidates=True)
    prob = problems.get("gemm_epilogue")
    c = verify_case(impl, prob, _failed_case(*shape), "cuda", seeds=range(8), repeat=True)
    assert c.ok and not c.details.get("nondeterministic"), c.reason


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a Hopper GPU")
def test_streamk_many_launches_same_bits_and_balanced_counts():
    """One bound streamk launch run 200 times into NaN-poisoned output on the failed cases: no NaN,
    the same bits every launch (partials absorbed in program order), and after them each program's
    counts equal (published = absorbed = 200 for the programs that publish, else 0)."""
    from gluon_src import dispatch
    from gluon_src.runtime import bind
    S = _S()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for shape in FAILED:
        case = _failed_case(*shape)
        a, b, bias = problems.get("gemm_epilogue").make_inputs(case, "cuda", 1)
        out = torch.empty(case.M, case.N, device="cuda", dtype=a.dtype)
        cfg = dispatch.gemm_streamk_config(case.M, case.N, case.K, {"sms": sms})[1]
        programs = S.programs_for(case.M, case.N, case.K, cfg, sms)
        ws, flags = S.workspace(cfg, programs, a.device)
        launch = bind(S.launch_spec(a, b, bias, shape[4], out, cfg, sms, (ws, flags)), a.device)
        first = None
        for _ in range(200):
            out.fill_(float("nan"))
            launch()
            if first is None:
                first = out.clone()
                assert not first.isnan().any(), shape
            elif not torch.equal(out, first):
                pytest.fail(f"{shape}: a launch differs from the first (NaN: {int(out.isnan().sum())})")
        torch.cuda.synchronize()
        pub, done = flags[:programs].tolist(), flags[programs:].tolist()
        tiles = triton.cdiv(case.M, cfg["BLOCK_M"]) * triton.cdiv(case.N, cfg["BLOCK_N"])
        work = S.schedule(tiles, triton.cdiv(case.K, cfg["BLOCK_K"]), programs)
        want = [200 * any(w[3] == "partial" for w in mine) for mine in work]
        assert pub == want and done == want, shape
