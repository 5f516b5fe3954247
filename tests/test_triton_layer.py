"""Triton layer on the CPU (the interpreter) and, with a GPU, on the GPU: the defaults on the whole
verify suite, the twins and variants on cases that reach their paths, compile_only for sm_90 on the
models suite (a plan exists and compiles, no spills), the dispatch rules, the split protocol, and
the wrappers rejecting bad inputs by name. CPU budget: the interpreter runs the verify cases up to
the adapter's CPU limits; the twins and variants get the cases below a size cap."""
import re
from pathlib import Path

import pytest
import torch

triton = pytest.importorskip("triton")

from harness import problems, registry  # noqa: E402
from harness.errors import Unsupported  # noqa: E402
from harness.verify import verify_case  # noqa: E402
from harness.worker import _cpu_limit  # noqa: E402
from triton_src import H200, dispatch, interpreting  # noqa: E402

HAS_GPU = torch.cuda.is_available() and not interpreting()
DEV = "cuda" if HAS_GPU else "cpu"
ROOT = Path(__file__).resolve().parent.parent

IDS = {"vector_add": {"vector_add", "vector_add_simple"},
       "softmax": {"softmax", "softmax_simple", "softmax_block", "softmax_rows", "softmax_online",
                   "softmax_split"},
       "gemm_epilogue": {"gemm_epilogue", "gemm_epilogue_simple", "gemm_epilogue_tiled",
                         "gemm_epilogue_tma", "gemm_epilogue_splitk"}}


def _impl(problem, name):
    return registry.get(problem, f"triton:{name}")


def test_registered_ids_and_roles():
    for problem, names in IDS.items():
        impls = {i.name: i for i in registry.select(problem=problem, layer="triton")}
        assert set(impls) == names, (problem, set(impls))
        assert impls[problem].role == "default" and impls[f"{problem}_simple"].role == "simple"
        for i in impls.values():
            assert i.available() is None
            assert set(i.devices) == {"cuda", "cpu"}
            assert i.sources and i.compile_only_fn and "grid" in i.extra
            for s in i.sources:
                assert (ROOT / s.path).is_file(), s.path


def test_no_environment_variables_in_the_layer():
    for p in list((ROOT / "triton_src").glob("*.py")) + [ROOT / "backends" / "triton_layer.py"]:
        assert "os.environ" not in p.read_text() and "getenv" not in p.read_text(), p


def test_twins_are_plain():
    """The twin files launch the tutorial way: no runtime / dispatch / interpreter machinery."""
    for name in ("vector_add", "softmax", "gemm_epilogue"):
        text = (ROOT / "triton_src" / f"{name}.py").read_text()
        assert not re.search(r"runtime|dispatch|interpret", text), name
        assert len(text.splitlines()) <= 70, name


# -- verify: every default on the verify suite (CPU: up to the interpreter limits) ---------------
def _runnable(impl, prob, case):
    return impl.supports(case) is None and (HAS_GPU or ("cpu" in impl.devices
                                                        and _cpu_limit(impl, prob, case) is None))


@pytest.mark.parametrize("problem", sorted(IDS))
def test_verify_suite_default(problem):
    prob = problems.get(problem)
    impl = _impl(problem, problem)
    bad, ran = [], 0
    for case in prob.cases("verify"):
        assert impl.supports(case) is None, case.label
        if not _runnable(impl, prob, case):
            continue
        ran += 1
        c = verify_case(impl, prob, case, DEV, seeds=(0,), repeat=False)
        if not c.ok:
            bad.append(f"{case.label}: {c.reason}")
    assert ran >= 10 and not bad, "\n".join(bad)


#: twins and variants on the verify cases of at most this many output elements (CPU)
SMALL = 40_000


@pytest.mark.parametrize("problem,name", [(p, n) for p in sorted(IDS) for n in sorted(IDS[p]) if n != p])
def test_verify_small_cases(problem, name):
    prob = problems.get(problem)
    impl = _impl(problem, name)
    bad, ran = [], 0
    for case in prob.cases("verify"):
        if not _runnable(impl, prob, case):
            continue
        if not HAS_GPU and (case.M if problem != "vector_add" else 1) * case.N > SMALL:
            continue
        ran += 1
        c = verify_case(impl, prob, case, DEV, seeds=(0,), repeat=False)
        if not c.ok:
            bad.append(f"{case.label}: {c.reason}")
    if not ran:
        pytest.skip("no verify case of this variant under the CPU size cap (test_verify_long_rows)")
    assert not bad, "\n".join(bad)


#: long rows that the size cap above leaves out: the paths of online and split (CPU)
LONG = [("softmax_split", dict(M=2, N=20_000, dtype="bfloat16")),
        ("softmax_split", dict(M=3, N=17_001, dtype="float16", layout="strided_odd", kind="neginf")),
        ("softmax_online", dict(M=3, N=20_011, kind="neginf")),
        ("softmax_online", dict(M=5, N=17_000, dtype="bfloat16", layout="strided")),
        ("softmax_block", dict(M=4, N=32_768, kind="neginf"))]


@pytest.mark.parametrize("name,kw", LONG, ids=[f"{n}-{kw['N']}" for n, kw in LONG])
def test_verify_long_rows(name, kw):
    prob = problems.get("softmax")
    c = verify_case(_impl("softmax", name), prob, prob.case(**kw), DEV, seeds=(0,), repeat=True)
    assert c.ok, c.reason


# -- compile_only for sm_90: every models case has a plan that compiles without spills ---------
@pytest.mark.parametrize("problem", ["vector_add", "softmax", "gemm_epilogue"])
def test_compile_only_models_suite_defaults(problem):
    prob = problems.get(problem)
    impl = _impl(problem, problem)
    few = 4 * dispatch.SOFTMAX["split_cap_max_spills"]      # bytes: the split register cap's allowance
    for case in prob.cases("models"):
        facts = impl.compile_only_fn(case)
        assert facts["target"].startswith("sm_90"), case.label
        capped = "maxnreg" in facts["config"]
        assert 0 < facts["registers"] <= facts["config"].get("maxnreg", 255), (case.label, facts)
        # a split kernel may keep the cap's few spilled values; uncapped, this triton's ptxas also
        # spills two values of the fp16 split at 4096 x 32000 (bf16, the same config: none)
        split = "CHUNK" in facts["config"]          # the split kernel's row chunk
        # the staged TMA kernel storing C from registers on 128 x 256 tiles (N = 50257) spills a
        # few values at 255 registers: the plan that won where it was timed (docs/performance.md,
        # "Triton / GEMM + epilogue")
        staged = "stage" in facts and facts["local_bytes"] <= 32
        assert facts["spills"] == 0 or staged or ((capped or split) and facts["local_bytes"] <= few), \
            (case.label, facts)


@pytest.mark.slow
@pytest.mark.parametrize("problem", ["softmax", "gemm_epilogue"])
def test_compile_only_edge_suite_defaults(problem):
    """The edge suite's plans (few long rows, short rows, odd small GEMMs with the plain tile by
    waves, skinny M, small K) compile for sm_90 within 255 registers, without spills beyond the
    split register cap's allowance."""
    prob = problems.get(problem)
    impl = _impl(problem, problem)
    few = 4 * dispatch.SOFTMAX["split_cap_max_spills"]
    for case in prob.cases("edge"):
        facts = impl.compile_only_fn(case)
        assert facts["target"].startswith("sm_90"), case.label
        assert 0 < facts["registers"] <= facts["config"].get("maxnreg", 255), (case.label, facts)
        split = "CHUNK" in facts["config"]
        assert facts["spills"] == 0 or (split and facts["local_bytes"] <= few), (case.label, facts)


@pytest.mark.parametrize("problem,name,kw", [
    ("softmax", "softmax_simple", dict(M=4096, N=50_257)),
    ("softmax", "softmax_rows", dict(M=32_768, N=512, dtype="bfloat16")),
    ("softmax", "softmax_online", dict(M=4096, N=151_936, dtype="bfloat16", layout="strided_odd")),
    ("softmax", "softmax_split", dict(M=4096, N=50_257)),
    ("gemm_epilogue", "gemm_epilogue_simple", dict(M=1000, N=4000, K=3000, act="gelu")),
    ("gemm_epilogue", "gemm_epilogue_tma", dict(M=4096, N=4096, K=4096, act="gelu")),
    ("gemm_epilogue", "gemm_epilogue_splitk", dict(M=256, N=4096, K=14336)),
    ("gemm_epilogue", "gemm_epilogue_tiled", dict(M=1000, N=4000, K=3000, act="gelu")),
])
def test_compile_only_variants(problem, name, kw):
    facts = _impl(problem, name).compile_only_fn(problems.get(problem).case(**kw))
    assert 0 < facts["registers"] <= 255 and facts["spills"] == 0, facts


def test_compile_only_default_vector_add_loads_16_bytes_on_odd_n():
    """The twin's masked loads go element by element when N is not a multiple of 16; the
    default's unmasked branch loads 16-byte vectors (the cause of the odd-N gap)."""
    from backends import triton_layer as T
    case = problems.get("vector_add").case(N=12_345_679, dtype="float16")
    default = T.compile_spec(T._va_default_spec(case))["ptx"]
    simple = T.compile_spec(T._va_simple_spec(case))["ptx"]
    assert re.search(r"ld\.global(\.\w+)*\.v4\.b32", default)
    assert not re.search(r"ld\.global(\.\w+)*\.v4\.b32", simple)


def test_grid_descriptions():
    for problem, kws in (("vector_add", [dict(N=98_432)]),
                         ("softmax", [dict(M=1823, N=781), dict(M=4096, N=50_257), dict(M=3, N=262_147),
                                      dict(M=4096, N=32_000, dtype="bfloat16")]),
                         ("gemm_epilogue", [dict(M=16, N=6144, K=4096), dict(M=1025, N=769, K=513),
                                            dict(M=4096, N=4096, K=4096)])):
        for name in sorted(IDS[problem]):
            for kw in kws:
                case = problems.get(problem).case(**kw)
                g = _impl(problem, name).extra["grid"](case)
                if "unsupported" in g:
                    assert _impl(problem, name).supports(case), (name, kw)
                    continue
                assert len(g["grid"]) == 3 and g["grid"][0] >= 1, (name, kw)
                for p in g["programs"]:
                    assert p["kept"] >= 0 and p["dropped"] >= 0 and p["covers"], (name, kw, p)


def test_compile_only_leaves_the_interpreter_working():
    if not interpreting():
        pytest.skip("only meaningful under the interpreter")
    from triton_src.vector_add import vector_add
    _impl("softmax", "softmax_online").compile_only_fn(problems.get("softmax").case(M=2, N=5000))
    x, y = torch.randn(77), torch.randn(77)
    assert torch.equal(vector_add(x, y), x + y)


# -- dispatch rules ------------------------------------------------------------------------------
def test_softmax_choice_on_cases_with_known_answers():
    """Worked out by hand from the SOFTMAX table (H200: 132 SMs): rows of up to 1024 columns
    several a program; a row in one program's registers up to 16384 (16-bit) / 32768 (32-bit)
    padded columns, from 16385 columns on only where the padding wastes < 10 %; else split over
    co-resident programs (at most 2 chunks an SM); else online."""
    c = lambda M, N, es: dispatch.softmax_choice(M, N, es, H200)[0]  # noqa: E731
    known = [((4096, 1, 4), "rows"), ((4096, 1024, 2), "rows"),
             ((4096, 1025, 2), "block"), ((1, 16_384, 2), "block"), ((4096, 32_768, 4), "block"),
             ((4096, 16_385, 2), "split"),       # beyond a 16-bit program's 16384 padded columns
             ((4096, 32_000, 4), "block"),       # 32000 of 32768 padded lanes used (97.7 %)
             ((4096, 20_000, 4), "split"),       # 20000 of 32768 (61 %): split wastes less
             ((4096, 151_936, 2), "split"),      # LM head: no program holds it
             ((1, 1_000_000, 2), "split"),       # >= 123 chunks of 8192 <= 2 x 132 programs
             ((1, 4_000_000, 4), "split"),       # >= 245 chunks of 16384 <= 264
             ((1, 4_000_000, 2), "online"),      # >= 489 chunks of 8192 > 264
             ((4096, 10_000_000, 4), "online")]  # >= 611 chunks of 16384 > 264
    for (M, N, es), want in known:
        assert c(M, N, es) == want, (M, N, es, c(M, N, es))


def test_softmax_choice_invariants():
    """On shapes of every class (1 to 32768 rows, 1 to 10^7 columns and the table's edges, 16- and
    32-bit): the variant is one of dispatch.VARIANTS and its configuration holds the row (rows and
    block: BLOCK_N >= N, block within the dtype's register limit; split: C chunks cover the row
    and fit the co-resident grid; online: any row); rows is taken exactly up to rows_max_cols;
    once a row goes online every longer row does; every variant is taken somewhere."""
    S, sms = dispatch.SOFTMAX, H200["sms"]
    seen = set()
    for es in (2, 4):
        r, bmax = S["rows_max_cols"], S["block_max_cols"][es]
        Ns = sorted({1, 17, r, r + 1, 2 * r + 1, 4096, bmax // 2 + 1, bmax, bmax + 1, 20_000, 32_000,
                     50_257, 65_537, 128_256, 151_936, 262_147, 1_000_000, 4_000_000, 10_000_000})
        for M in (1, 3, 64, 4096, 32_768):
            online = False
            for N in Ns:
                variant, cfg = dispatch.softmax_choice(M, N, es, H200)
                seen.add(variant)
                assert variant in dispatch.VARIANTS["softmax"], variant
                assert (variant == "rows") == (N <= r), (M, N, es, variant)
                if variant in ("rows", "block"):
                    assert cfg["BLOCK_N"] >= N, (M, N, es, cfg)
                if variant == "block":
                    assert cfg["BLOCK_N"] <= bmax, (M, N, es, cfg)
                if variant == "split":
                    assert cfg["C"] == -(-N // cfg["CHUNK"]) <= S["split_max_chunks_per_sm"] * sms, (M, N, es, cfg)
                assert variant == "online" or not online, (M, N, es, variant)
                online = online or variant == "online"
    assert seen == set(dispatch.VARIANTS["softmax"]), seen   # every variant it plans among, no other


def test_softmax_split_values_per_thread():
    for es in (2, 4):
        for M, N in ((4096, 50_257), (4096, 151_936), (2000, 50_000), (1, 262_147)):
            cfg = dispatch.softmax_split_config(M, N, es, H200)
            per_thread = cfg["CHUNK"] // (32 * cfg["num_warps"])
            assert per_thread == dispatch.SOFTMAX["split_values_per_thread"], (es, M, N, cfg)


def test_softmax_split_chunk_rule():
    """The split chunk as a rule of (M, N, element size) and the SOFTMAX table, on rows of every
    class (one row to thousands, 16- and 32-bit, lengths that fill a power of two and lengths
    that do not): a row of at most split_small_max_chunks smallest chunks takes the smallest;
    else the largest power of two in the dtype's range whose padded lanes are >= split_min_fill
    data, halved while the M x C programs leave SMs idle and then while they load the SMs
    unevenly (split_balance) and the halved chunk keeps a row within split_small_max_chunks."""
    S, sms = dispatch.SOFTMAX, H200["sms"]
    lo = S["split_min_chunk"]
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    even = lambda units: units / sms >= S["split_balance"] * cdiv(units, sms)  # noqa: E731
    classes = set()
    for es in (2, 4):
        hi = S["split_max_chunk"][es]
        sizes = [hi >> i for i in range(hi.bit_length()) if hi >> i >= lo]
        for N in (16_385, 32_000, 50_257, 65_536, 100_000, 128_256, 131_073, 151_936, 200_003,
                  262_144, 786_433):
            for M in (1, 3, 8, 48, 132, 4096):
                cfg = dispatch.softmax_split_config(M, N, es, H200)
                chunk, C = cfg["CHUNK"], cfg["C"]
                assert chunk in sizes and C == cdiv(N, chunk), (M, N, es, cfg)
                assert cfg["num_warps"] == dispatch.split_warps(chunk, es), (M, N, es, cfg)
                if cdiv(N, lo) <= S["split_small_max_chunks"]:
                    assert chunk == lo, (M, N, es, cfg)
                    classes.add("small")
                    continue
                fill = {c: N / (cdiv(N, c) * c) for c in sizes}
                first = next((c for c in sizes if fill[c] >= S["split_min_fill"]), max(sizes, key=fill.get))
                assert chunk <= first, (M, N, es, cfg)
                if chunk < first:   # each halving had its reason
                    up = 2 * chunk
                    assert M * cdiv(N, up) < sms or (not even(M * cdiv(N, up))
                                                      and C <= S["split_small_max_chunks"]), (M, N, es, cfg)
                    classes.add("idle" if M * cdiv(N, up) < sms else "uneven")
                else:
                    classes.add("fill")
                if chunk > lo:      # and it stopped for one
                    assert M * C >= sms, (M, N, es, cfg)
                    assert even(M * C) or cdiv(N, chunk // 2) > S["split_small_max_chunks"], (M, N, es, cfg)
    assert classes == {"small", "fill", "idle", "uneven"}, classes   # every clause decided somewhere
    one_row = dispatch.softmax_split_config(1, 262_147, 4, H200)
    assert one_row["C"] >= 100  # a single row spread over most SMs


def test_softmax_split_balance_is_what_the_rule_reads(monkeypatch):
    """Few rows whose chunks load the SMs unevenly take more, smaller chunks; with split_balance
    0 (any spread is even) the fill rule's chunk stays."""
    M, N = 8, 200_003                          # 98 smallest chunks: past the small-chunk bound
    cfg = dispatch.softmax_split_config(M, N, 2, H200)
    monkeypatch.setitem(dispatch.SOFTMAX, "split_balance", 0.0)
    unbalanced = dispatch.softmax_split_config(M, N, 2, H200)
    assert cfg["CHUNK"] < unbalanced["CHUNK"]
    sms = H200["sms"]
    busiest = lambda c: -(-M * c["C"] // sms)   # noqa: E731  (chunks on the busiest SM)
    assert busiest(cfg) * cfg["CHUNK"] < busiest(unbalanced) * unbalanced["CHUNK"]   # less work there


def test_softmax_table_is_what_the_rules_read(monkeypatch):
    """The choice follows the table: with split's co-resident bound at 0 every row longer than the
    block kernel takes goes online; with rows_max_cols 0 short rows go to the block kernel."""
    long_rows = [(M, N, es) for M in (8, 4096) for N in (40_000, 50_257, 100_000) for es in (2, 4)
                 if N > dispatch.SOFTMAX["block_max_cols"][es]]
    assert {dispatch.softmax_choice(M, N, es, H200)[0] for M, N, es in long_rows} == {"split"}
    monkeypatch.setitem(dispatch.SOFTMAX, "split_max_chunks_per_sm", 0)
    assert {dispatch.softmax_choice(M, N, es, H200)[0] for M, N, es in long_rows} == {"online"}
    assert {dispatch.softmax_choice(M, N, 2, H200)[0] for M in (1, 32_768) for N in (64, 512, 1000)} == {"rows"}
    monkeypatch.setitem(dispatch.SOFTMAX, "rows_max_cols", 0)
    assert {dispatch.softmax_choice(M, N, 2, H200)[0] for M in (1, 32_768) for N in (64, 512, 1000)} == {"block"}


def test_softmax_units_switch_is_gone():
    """The switch ``units`` (rows of whole 16-byte groups in 16-byte units) never won where it was
    timed (docs/performance.md, "Triton / softmax"): it left HEAD with its candidate
    triton:softmax_next, and the row kernels take N and the strides as they are."""
    from triton_src import softmax_block, softmax_rows
    assert "units" not in dispatch.SOFTMAX and not hasattr(dispatch, "SOFTMAX_NEXT")
    with pytest.raises(ValueError, match="not registered"):
        registry.get("softmax", "triton:softmax_next", candidates=True)
    for kernel in (softmax_block.softmax_block_kernel, softmax_rows.softmax_rows_kernel):
        assert "UNIT" not in kernel.arg_names
    assert "UNITS" not in dispatch.softmax_block_config(3000, 2) and "UNITS" not in dispatch.softmax_rows_config(200, 2)

def test_split_register_cap_rule(monkeypatch):
    """The cap tried is the largest multiple of 8 below the kernel's registers at which an SM holds
    more of its programs (never at or above the uncapped count: ptxas takes a cap as a hint and
    can raise the registers to it); the capped kernel is kept only when it holds more programs
    with few spills."""
    few = dispatch.SOFTMAX["split_cap_max_spills"]

    def rule(regs, warps, per_sm, capped=None):
        return dispatch.split_register_cap({"regs": regs, "spills": 0, "per_sm": per_sm, "smem": 0},
                                           warps, H200, capped)
    # one warp of 96 registers: 5 warps a sub-partition, 20 an SM; 88 still gives 5; 80 gives 6
    assert rule(96, 1, 20) == 80 and rule(90, 1, 20) == 80
    # two warps of 61 registers (64 allocated): 16 programs; 56 gives 18
    assert rule(61, 2, 16) == 56
    # eight warps of 62: 4 programs; 56 still 4 (36 warps); 48 gives 5
    assert rule(62, 8, 4) == 48
    assert rule(50, 1, 32) is None                        # the 32-programs-an-SM limit: no gain
    assert rule(48, 2, 20) is None                        # nothing at or above split_cap_min_regs
    kept = rule(96, 1, 20, {"regs": 80, "spills": few, "per_sm": 24, "regs_cap": 80})
    assert kept == 80
    assert rule(96, 1, 20, {"regs": 80, "spills": few + 1, "per_sm": 24, "regs_cap": 80}) is None
    assert rule(96, 1, 20, {"regs": 80, "spills": 0, "per_sm": 20, "regs_cap": 80}) is None
    monkeypatch.setitem(dispatch.SOFTMAX, "split_register_cap", False)
    assert rule(96, 1, 20) is None


def test_split_register_cap_of_compiles_the_capped_kernel_only_when_proposed():
    calls = []

    def compiled(regs, capped_spills):
        def facts_of(cap):
            calls.append(cap)
            if cap is None:
                return {"regs": regs, "spills": 0, "per_sm": 20 if regs > 80 else 32, "smem": 0}
            return {"regs": cap, "spills": capped_spills, "per_sm": 24, "smem": 0, "regs_cap": cap}
        return facts_of
    assert dispatch.split_register_cap_of(compiled(50, 0), 1, H200) is None and calls == [None]
    calls.clear()
    assert dispatch.split_register_cap_of(compiled(96, 0), 1, H200) == 80 and calls == [None, 80]
    calls.clear()
    assert dispatch.split_register_cap_of(compiled(96, 99), 1, H200) is None and calls == [None, 80]


def test_split_launch_spec_carries_the_register_cap():
    from triton_src import softmax_split as S
    x = torch.empty(4, 40_000, dtype=torch.bfloat16)
    slots = torch.empty(4 * 20, dtype=torch.int64)
    cfg = S.config(40_000, 2048, 1)
    assert "maxnreg" not in S.launch_spec(x, x, slots, cfg, 20).options
    assert "maxnreg" not in S.launch_spec(x, x, slots, dict(cfg, MAXNREG=None), 20).options
    assert S.launch_spec(x, x, slots, dict(cfg, MAXNREG=72), 20).options["maxnreg"] == 72


@pytest.mark.gpu
def test_split_register_cap_on_the_gpu():
    """On the GPU the plan decides the cap from the compiled kernels: the bound kernel keeps
    within it and stays correct, and a cap given in the config is used as given."""
    from triton_src import softmax_split as S
    x = torch.randn(64, 128_256, device="cuda", dtype=torch.bfloat16)
    ref = torch.softmax(x.double(), dim=1)
    out = torch.empty_like(x)
    plan = dispatch.plan_softmax(x, out)
    assert plan.variant == "split" and "MAXNREG" in plan.config
    plan.launch()
    if plan.config["MAXNREG"]:
        assert plan.launch.compiled.n_regs <= plan.config["MAXNREG"]
    assert (out.double() - ref).abs().max().item() < 2e-2
    out2 = torch.empty_like(x)
    launch = S.bind_launch(x, out2, dict(S.config(128_256, 2048, 1), MAXNREG=64))
    launch()
    assert launch.config["MAXNREG"] == 64 and launch.compiled.n_regs <= 64
    assert (out2.double() - ref).abs().max().item() < 2e-2


def test_softmax_plan_on_misaligned_rows():
    """Rows 2 bytes past a 16-byte boundary: split for long rows, block where the row fits its
    registers (plain Triton kernels only: no shared-memory staging in this layer)."""
    wide = torch.empty(132, 50_264, dtype=torch.bfloat16, device=DEV)
    shifted = wide[:, 1:50_258]
    assert dispatch.plan_softmax(shifted, torch.empty(132, 50_257, dtype=torch.bfloat16, device=DEV)).variant == "split"
    narrow = wide[:, 1:8001]      # 8000 columns 2 bytes past a boundary: the block kernel, not split
    assert dispatch.plan_softmax(narrow, torch.empty(132, 8000, dtype=torch.bfloat16, device=DEV)).variant == "block"


def test_gemm_narrow_split_gives_every_sm_a_program():
    """Few rows: unsplit exactly when the narrow tiles load the SMs evenly (the mean at least
    narrow_balance of the busiest SM's tiles: one full wave or more counts), else the smallest
    split (> 1) that gives every SM a program; on tile counts around one wave and on shapes of
    several classes."""
    sms, bal = H200["sms"], dispatch.GEMM["narrow_balance"]
    bn = dispatch.GEMM["narrow"]["BLOCK_N"]
    even = lambda t: t / sms >= bal * -(-t // sms)  # noqa: E731
    shapes = [(64, t * bn, 8192) for t in (sms // 4, int(bal * sms) - 1, -(-int(bal * sms * 100) // 100),
                                          sms, sms + 1, 2 * sms - 1, 2 * sms, 3 * sms)]
    shapes += [(16, 6144, 4096), (16, 4096, 14_336), (1, 4096, 4096), (16, 8192, 28_672),
               (16, 28_672, 4096), (16, 50_257, 768), (32, 5000, 3000), (16, 520, 8192), (64, 18_432, 5120)]
    seen = set()
    for M, N, K in shapes:
        cfg = dispatch.gemm_narrow_config(M, N, K, H200)
        tiles = -(-M // cfg["BLOCK_M"]) * -(-N // cfg["BLOCK_N"])
        S = cfg["SPLIT"]
        assert cfg["BLOCK_M"] == max(16, 1 << (M - 1).bit_length()), (M, N, K, cfg)
        assert (S == 1) == even(tiles), (M, N, K, tiles, S)
        if S > 1:    # the smallest split (> 1) that gives every SM a program
            assert tiles * S >= sms and (S == 2 or tiles * (S - 1) < sms), (M, N, K, S)
        seen.add(S == 1)
    assert seen == {True, False}


def _gemm_options(M, N, K, tma, aligned):
    """The roofline model's options for M > narrow_max_m, as gemm_choice's docstring states them."""
    kind = "tma" if tma else "tiled"
    table = dispatch.gemm_table(kind if tma or aligned else "tiled_unaligned", H200)
    pointer = dispatch.gemm_table("tiled" if aligned else "tiled_unaligned", H200)
    opts = [(kind, c, 1) for c in table]
    opts += [("splitk", c, s) for c in pointer for s in dispatch._split_choices(K, c["BLOCK_K"])[1:]]
    return opts


def test_gemm_rules():
    """gemm_choice as a rule of its inputs on shapes of every class: few rows (narrow rule, any
    alignment); rows no async copy takes (the plain kernel, its tile by waves); otherwise the
    roofline model's cheapest option among the TMA (or pointer) tiles and the split-K ones."""
    sms = H200["sms"]
    g = lambda M, N, K, tma=True, al=True: dispatch.gemm_choice(M, N, K, tma, H200, al)  # noqa: E731
    # few rows: the narrow rule decides, whatever the alignment: unsplit (the tiled kernel) when
    # the narrow tiles alone load the SMs evenly, else split-K
    for M, N, K in ((16, 50_257, 768), (16, 6144, 4096), (64, 8192, 8192), (8, 1000, 8192), (1, 1024, 512)):
        for tma, al in ((True, True), (False, False)):
            v, cfg = g(M, N, K, tma, al)
            want = dispatch.gemm_narrow_config(M, N, K, H200, al)
            assert cfg == want and v == ("splitk" if want["SPLIT"] > 1 else "tiled"), (M, N, K, v, cfg)
            assert cfg["BLOCK_N"] == dispatch.GEMM["narrow" if al else "narrow_unaligned"]["BLOCK_N"]
    # the model's argmin elsewhere: decode-to-prefill, a fraction of a wave, skinny, small K
    seen = set()
    for M, N, K in ((256, 4096, 14_336), (4096, 6144, 4096), (512, 1000, 4000), (77, 18_944, 3584),
                    (96, 12_288, 4096), (4096, 4096, 128), (8192, 2048, 64), (1000, 4000, 3000)):
        for tma in (True, False):
            v, cfg = g(M, N, K, tma)
            opts = _gemm_options(M, N, K, tma, True)
            cost = lambda o: dispatch._gemm_time(M, N, K, o[1], o[2], sms)  # noqa: E731
            best = min(cost(o) for o in opts)
            split = cfg.get("SPLIT", 1)
            assert cost((v, cfg, split)) == best and v in {o[0] for o in opts}, (M, N, K, tma, v, cfg)
            assert (v == "splitk") == (split > 1), (M, N, K, v, cfg)
            seen.add(v)
    assert seen == {"tma", "tiled", "splitk"}, seen


def test_gemm_plain_tile_by_waves():
    """Rows no async copy takes, M > narrow_max_m: the plain kernel; GEMM["plain"]'s tile where its
    grid fills a wave, else the smallest plain_small tile whose grid is still one wave (fewer
    programs than SMs either way: one program an SM, and a smaller tile's program does less)."""
    sms = H200["sms"]
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    tiles = lambda M, N, c: cdiv(M, c["BLOCK_M"]) * cdiv(N, c["BLOCK_N"])  # noqa: E731
    big = dispatch.GEMM["plain"]
    seen = set()
    for M, N in ((4096, 50_257), (256, 50_257), (2050, 1001), (1025, 769), (333, 777), (411, 733),
                 (97, 211), (65, 65), (1000, 1001), (200, 3001), (1500, 1501)):
        v, cfg = dispatch.gemm_choice(M, N, 999, False, H200, False)
        assert v == "plain", (M, N, v)
        assert {k: cfg[k] for k in ("BLOCK_K", "num_warps", "num_stages")} == \
            {k: big[k] for k in ("BLOCK_K", "num_warps", "num_stages")}
        tile = (cfg["BLOCK_M"], cfg["BLOCK_N"])
        if tiles(M, N, big) >= sms:
            assert tile == (big["BLOCK_M"], big["BLOCK_N"]), (M, N, cfg)
        else:
            fits = [c for c in dispatch.GEMM["plain_small"] if tiles(M, N, c) <= sms]
            want = min(fits, key=lambda c: c["BLOCK_M"] * c["BLOCK_N"]) if fits else big
            assert tile == (want["BLOCK_M"], want["BLOCK_N"]) and tiles(M, N, cfg) <= sms, (M, N, cfg)
        seen.add(tile)
    assert len(seen) == 1 + len(dispatch.GEMM["plain_small"]), seen    # every tile chosen somewhere


def test_gemm_plain_plan_is_what_compile_only_compiles():
    """The plain path's spec (compile-only, grid description) carries the planned tile."""
    from backends import triton_layer as T
    case = problems.get("gemm_epilogue").case(M=100, N=1000, K=63, dtype="float16", act="gelu")
    v, cfg = T._gemm_choice(case)      # staging models slower than the plain kernel here
    spec = T._gemm_specs(v, case, cfg)[0]
    assert v == "plain" and spec.args["BLOCK_M"] == cfg["BLOCK_M"] and spec.args["BLOCK_N"] == cfg["BLOCK_N"]
    assert tuple(spec.grid) == (-(-100 // cfg["BLOCK_M"]), -(-1000 // cfg["BLOCK_N"]))


def test_gemm_stage_rule():
    """The default: above narrow_max_m rows, where TMA cannot address every operand, "tma" on staged
    operands (``stage`` in its config: the copies of A / B TMA cannot read, then the TMA kernel)
    exactly when its modelled time - the TMA
    config's roofline plus, per copy, its bytes read and written at HBM speed and a launch - beats
    the unstaged choice's (the plain kernel: rounds of plain_resident programs an SM x K steps x
    plain_step_s; else the roofline), written here from those inputs; no copies to make (no TMA
    here): the unstaged choice; no TMA (sm_80): never staged; few rows: the narrow rule."""
    G = dispatch.GEMM
    sms, cdiv = H200["sms"], lambda a, b: -(-a // b)  # noqa: E731
    seen = set()
    for M, N, K in ((2048, 2047, 2048), (555, 1234, 777), (411, 733, 957), (97, 211, 389), (70, 47, 33),
                    (4096, 50_257, 768), (90, 37, 64), (1025, 770, 513), (300, 4096, 4095)):
        al = dispatch.gemm_aligned(2, min(8, 1 << (K & -K).bit_length() - 1), min(8, 1 << (N & -N).bit_length() - 1))
        copies = {op: n for op, n, ok in (("a", M * K, K % 8 == 0), ("b", K * N, N % 8 == 0)) if not ok}
        v0, c0 = dispatch.gemm_choice(M, N, K, False, H200, al)          # copies None: unstaged
        v, cfg = dispatch.gemm_choice(M, N, K, False, H200, al, copies)
        assert "stage" not in c0 and "stage" not in dispatch.gemm_choice(M, N, K, False, OTHER_GPUS["a100"], al,
                                                                          copies)[1]
        if v0 == "plain":
            t0 = cdiv(cdiv(M, c0["BLOCK_M"]) * cdiv(N, c0["BLOCK_N"]), sms * G["plain_resident"]) \
                * cdiv(K, c0["BLOCK_K"]) * G["plain_step_s"]
        else:
            t0 = dispatch._gemm_time(M, N, K, c0, c0.get("SPLIT", 1), sms)
        tma = dispatch.gemm_tma_config(M, N, K, H200)
        t = dispatch._gemm_time(M, N, K, tma, 1, sms) + sum(4 * n / G["hbm_bytes_per_s"] + G["launch_s"]
                                                            for n in copies.values())
        want = ("tma", {**tma, "stage": list(copies)}) if t < t0 else (v0, c0)
        assert (v, cfg) == want, (M, N, K, v, v0)
        seen.add("staged" if "stage" in cfg else v)
    assert {"staged", "plain"} <= seen, seen
    assert dispatch.gemm_choice(16, 2047, 2048, False, H200, False, {"b": 2048 * 2047})[1] == \
        dispatch.gemm_narrow_config(16, 2047, 2048, H200, False)


def test_default_stages_unaligned_n():
    """An unaligned N (2047 bf16: rows of 4094 bytes TMA cannot address) above narrow_max_m rows:
    the default plans tma with B staged (``"stage": ["b"]``: B copied to 16-byte rows, then the TMA
    kernel) through the adapter and through the layer contract's ``plan``, whose sources name the
    copy kernel beside the TMA kernel; an aligned case's tma plan stages nothing and names no copy."""
    from backends import triton_layer as T
    from harness.meta_inputs import case_facts
    case = problems.get("gemm_epilogue").case(M=2048, N=2047, K=2048, act="gelu", dtype="bfloat16")
    assert T._gemm_choice(case)[0] == "tma" and T._gemm_choice(case)[1]["stage"] == ["b"]
    p = dispatch.plan("gemm_epilogue", case_facts(case))
    assert p.variant == "tma" and p.config["stage"] == ["b"]
    assert {k for s in p.sources for k in s.kernels} >= {"stage_rows_kernel", "gemm_epilogue_tma_kernel"}
    aligned = dispatch.plan("gemm_epilogue", case_facts(problems.get("gemm_epilogue").case(M=4096, N=4096, K=4096)))
    assert aligned.variant == "tma" and "stage" not in aligned.config
    assert "stage_rows_kernel" not in {k for s in aligned.sources for k in s.kernels}
    # the 16-row B stream keeps the narrow rule (no copy)
    assert T._gemm_choice(problems.get("gemm_epilogue").case(M=16, N=2047, K=2048))[0] in ("tiled", "splitk")


def test_gemm_stage_specs():
    """The staged plan's launches (what compile-only compiles): the TMA kernel (named first) with
    C stored from registers where TMA cannot write it, and the copy of each operand TMA cannot
    read into rows of a multiple of 8 elements."""
    from backends import triton_layer as T
    case = problems.get("gemm_epilogue").case(M=2048, N=2047, K=2048, act="gelu")
    v, cfg = T._gemm_variant("default", case)
    specs = T._gemm_specs(v, case, cfg)
    assert v == "tma" and cfg["stage"] == ["b"] and [s.kernel.__name__ if hasattr(s.kernel, "__name__") else s.kernel.fn.__name__
                             for s in specs][0] == "gemm_epilogue_tma_kernel"
    main, copy = specs
    assert main.args["C_TMA"] is False and main.args["c_desc"] is None and main.args["stride_cm"] == 2047
    assert copy.args["stride_d"] % 8 == 0 and copy.args["cols"] == 2047 and copy.args["rows"] == 2048


def _gemm_ref(a, b, bias, act):
    y = a.double() @ b.double() + (bias.double() if bias is not None else 0.0)
    if act == "gelu":
        return 0.5 * y * (1 + torch.tanh(0.7978845608028654 * (y + 0.044715 * y ** 3)))
    return y.clamp_min(0) if act == "relu" else y


def test_stream_k_is_gone():
    """Stream-K lost where it changed the plan but two cases (docs/performance.md, "The pending switches of CUDA C++, CuPy, Triton and Gluon measured on 2026-12-06 (H100)"):
    it left HEAD with its kernel and both candidates."""
    for name in ("gemm_epilogue_streamk", "gemm_epilogue_next"):
        with pytest.raises(ValueError, match="not registered"):
            registry.get("gemm_epilogue", f"triton:{name}", candidates=True)
    assert not (ROOT / "triton_src" / "gemm_epilogue_streamk.py").exists()
    assert not any(k.startswith("streamk") for k in dispatch.GEMM) and not hasattr(dispatch, "GEMM_NEXT")
    for M, N, K in ((3000, 3000, 3000), (16, 28672, 4096), (64, 18432, 5120), (256, 28672, 4096)):
        assert dispatch.gemm_choice(M, N, K, True, H200)[0] in ("tma", "splitk", "tiled"), (M, N, K)


# -- bad inputs: clear errors naming the argument --------------------------------------------------
def test_vector_add_bad_inputs():
    from triton_src.vector_add import vector_add
    from triton_src.vector_add_unmasked import vector_add_unmasked
    x = torch.randn(10)
    with pytest.raises(TypeError, match="x"):
        vector_add([1.0], x)
    with pytest.raises(TypeError, match="y"):
        vector_add(x, torch.randn(10, dtype=torch.float64))
    with pytest.raises(ValueError, match="y"):
        vector_add(x, torch.randn(11))
    with pytest.raises(TypeError, match="x"):
        vector_add(torch.arange(10), torch.arange(10))
    with pytest.raises(ValueError, match="x"):
        vector_add(torch.randn(20)[::2], torch.randn(10))
    with pytest.raises(ValueError, match="out"):
        vector_add(x, x, torch.empty(9))
    with pytest.raises(ValueError, match="num_warps"):
        vector_add_unmasked(x, x, num_warps=3)


def test_softmax_bad_inputs():
    from triton_src.softmax import softmax
    from triton_src.direct import softmax_block
    from triton_src.direct import softmax_online
    from triton_src.direct import softmax_rows
    with pytest.raises(ValueError, match="x"):
        softmax(torch.randn(10))
    with pytest.raises(TypeError, match="x"):
        softmax_online("not a tensor")
    with pytest.raises(ValueError, match="x"):
        softmax_block(torch.randn(8, 4).t())
    with pytest.raises(ValueError, match="out"):
        softmax_online(torch.randn(4, 8), torch.empty(4, 9))
    with pytest.raises(TypeError, match="out"):
        softmax(torch.randn(4, 8), torch.empty(4, 8, dtype=torch.float16))
    with pytest.raises(ValueError, match="x"):
        softmax_block(torch.randn(1, 65_536))
    with pytest.raises(ValueError, match="rows"):
        softmax_rows(torch.randn(4, 8), rows=3)
    with pytest.raises(ValueError, match="x"):
        softmax(torch.randn(0, 8))


def test_gemm_bad_inputs():
    from triton_src.gemm_epilogue import gemm_epilogue
    from triton_src.direct import gemm_epilogue_tma
    a = torch.randn(8, 16, dtype=torch.float16)
    b = torch.randn(16, 8, dtype=torch.float16)
    with pytest.raises(TypeError, match="a"):
        gemm_epilogue(a.float(), b)
    with pytest.raises(TypeError, match="b"):
        gemm_epilogue(a, b.bfloat16())
    with pytest.raises(ValueError, match="b"):
        gemm_epilogue(a, torch.randn(15, 4, dtype=torch.float16))
    with pytest.raises(ValueError, match="act"):
        gemm_epilogue(a, b, None, act="tanh")
    with pytest.raises(ValueError, match="bias"):
        gemm_epilogue(a, b, torch.randn(5, dtype=torch.float16))
    with pytest.raises(ValueError, match="out"):
        gemm_epilogue(a, b, None, "relu", torch.empty(8, 5, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"^a: row stride 30 .*K a multiple of 8"):
        gemm_epilogue_tma(torch.randn(8, 30, dtype=torch.float16), torch.randn(30, 8, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"^out: column stride"):
        gemm_epilogue_tma(a, b, None, "relu", torch.empty(8, 8, dtype=torch.float16).t())


def test_gemm_tma_declines_unaligned_with_reason():
    case = problems.get("gemm_epilogue").case(M=64, N=64, K=30)
    impl = _impl("gemm_epilogue", "gemm_epilogue_tma")
    why = impl.supports(case)
    assert why and why.startswith("a: row stride 30") and "gemm_epilogue_tiled" in why
    assert impl.extra["grid"](case) == {"unsupported": why}
    with pytest.raises(Unsupported, match="row stride 30"):
        impl.compile_only_fn(case)
    assert _impl("gemm_epilogue", "gemm_epilogue").supports(case) is None


# -- split: the cross-program protocol -------------------------------------------------------------
def _split_check(x, **kw):
    from triton_src.direct import softmax_split
    y = softmax_split(x, **kw)
    ref = torch.softmax(x.double(), dim=-1)
    rtol, atol = {torch.float32: (1e-5, 1e-7), torch.float16: (2e-3, 1e-6),
                  torch.bfloat16: (1.6e-2, 1e-5)}[x.dtype]
    assert torch.equal(y.isnan(), ref.isnan())
    torch.testing.assert_close(y.double(), ref, rtol=rtol, atol=atol, equal_nan=True)
    return y


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_split_rows_over_chunks(dtype):
    """Ragged N (the last of 5 chunks holds 40 columns), M = 7 rows over two teams of 5."""
    _split_check((3 * torch.randn(7, 1064, device=DEV)).to(dtype), chunk=256)


def test_split_strided_rows_and_neginf():
    inf = float("inf")
    x = torch.randn(6, 1100, device=DEV)[:, 3:1003]
    x[0, ::7] = -inf
    x[1, 256:512] = -inf
    x[2] = -200.0 - torch.rand(1000, device=DEV)
    x[2, :700] = -inf
    x[3] = -inf
    x[4, 999] = 1e4
    y = _split_check(x, chunk=256)
    assert y[3].isnan().all() and not y[[0, 1, 2, 4, 5]].isnan().any()


def test_split_bad_inputs():
    from triton_src.direct import softmax_split
    x = torch.randn(4, 1000, device=DEV)
    with pytest.raises(ValueError, match="chunk"):
        softmax_split(x, chunk=300)
    with pytest.raises(ValueError, match="programs"):
        softmax_split(x, chunk=256, programs=6)  # C = 4: a row's chunks would span two rounds
    too_many = 4 * 3 if interpreting() else 4 * 10 ** 6
    with pytest.raises(ValueError, match="programs"):
        softmax_split(x, chunk=256, programs=too_many)


@pytest.mark.parametrize("prefetch", [False, True])
def test_split_bounded_spin_writes_nan_not_hang(prefetch):
    """A grid that is not a multiple of C puts a row's chunks in different rounds: the waiter
    gives up after max_spin polls and writes NaN, and the launch returns."""
    from triton_src import softmax_split as S
    x = torch.randn(4, 600, device=DEV)
    out = torch.zeros_like(x)
    cfg = S.config(600, 256, 4, prefetch)
    slots = torch.zeros(4 * cfg["C"], dtype=torch.int64, device=DEV)
    S.launch_raw(x, out, slots, cfg, 2, 64)
    assert out[0].isnan().any() and (slots != 0).all()


def test_split_prefetch_build():
    x = torch.randn(5, 700, device=DEV)
    x[2, 100:] = float("-inf")
    _split_check(x, chunk=128, prefetch=True)


# -- GPU: the lean launch path ---------------------------------------------------------------------
@pytest.mark.gpu
def test_default_launch_is_lean(monkeypatch):
    """prepare binds once; a launch is one call of the compiled launcher: it never goes back
    through ``kernel[grid](...)`` (JITFunction.run: the specialisation key from every argument, the
    cache lookup, the grid), and it computes the softmax."""
    from triton.runtime.jit import JITFunction
    prob = problems.get("softmax")
    case = prob.case(M=4096, N=1024)
    (x,) = prob.make_inputs(case, "cuda", 0)
    out = torch.full((4096, 1024), float("nan"), device="cuda")
    launch = _impl("softmax", "softmax").prepare(case, (x,), out)
    slow_path = []
    run = JITFunction.run
    monkeypatch.setattr(JITFunction, "run", lambda self, *a, **k: slow_path.append(self.__name__) or run(self, *a, **k))
    for _ in range(3):
        launch()
    torch.cuda.synchronize()
    assert slow_path == []
    torch.testing.assert_close(out, torch.softmax(x.double(), -1).float(), rtol=1e-5, atol=1e-6)


def test_programs_per_sm_allocates_registers_per_sub_partition():
    """As the CUDA occupancy calculator: 104 registers a thread = 3328 a warp; a quarter of the
    65536-register file holds 4 such warps, so 16 warps an SM (not 65536 // 3328 = 19): 8 programs
    of 2 warps, not 9 (9 x 132 blocks of a cooperative launch were refused on the H200)."""
    from types import SimpleNamespace

    from triton_src.runtime import programs_per_sm
    compiled = SimpleNamespace(n_regs=104, metadata=SimpleNamespace(shared=8), function=None)
    assert programs_per_sm(compiled, 2, H200) == 8
    compiled.n_regs = 64                      # 2048 a warp: 8 a sub-partition, 32 an SM
    assert programs_per_sm(compiled, 8, H200) == 4
    assert programs_per_sm(compiled, 1, H200) == 32   # the 32-blocks-an-SM limit


def test_default_softmax_runs_online_when_split_cannot_hold_a_row(monkeypatch):
    """A row with more chunks than the device holds at once: the default falls back to online
    (the split launch refuses it: its programs would wait forever)."""
    from triton_src import softmax_split
    monkeypatch.setattr(softmax_split, "INTERPRETER_TEAMS", 0)   # capacity 0 under the interpreter
    x = torch.randn(3, 40_000, device=DEV).to(torch.bfloat16)
    out = torch.empty_like(x)
    if HAS_GPU:
        pytest.skip("capacity is the device's own on a GPU")
    plan = dispatch.plan_softmax(x, out)
    assert plan.variant == "online"
    plan.launch()
    torch.testing.assert_close(out.double(), torch.softmax(x.double(), -1), rtol=1.6e-2, atol=1e-5)


# -- the aligned frame: rows Triton cannot prove 16-byte aligned -----------------------------------
def test_aligned_frame_decision():
    from triton_src import aligned_frame
    x = torch.empty(4, 50_257, dtype=torch.bfloat16, device=DEV)
    assert aligned_frame(x, torch.empty_like(x)) == 8          # odd N: the frame
    assert aligned_frame(x.float(), torch.empty_like(x.float())) == 4
    y = torch.empty(4, 4096, dtype=torch.bfloat16, device=DEV)
    assert aligned_frame(y, torch.empty_like(y)) == 0          # Triton proves it on its own
    flat = torch.empty(4 * 1001 + 1, dtype=torch.bfloat16, device=DEV)
    mis = flat[1:].view(4, 1001)
    assert aligned_frame(mis, torch.empty(4, 1001, dtype=torch.bfloat16, device=DEV)) == 0  # not 16-byte aligned
    z = torch.empty(4, 1003, dtype=torch.bfloat16, device=DEV)[:, :1000]   # rows 1003 apart
    assert aligned_frame(z, torch.empty(4, 1000, dtype=torch.bfloat16, device=DEV)) == 0  # rows start differently
    assert aligned_frame(z, torch.empty(4, 1011, dtype=torch.bfloat16, device=DEV)[:, :1000]) == 8  # 1011 = 1003 + 8


@pytest.mark.parametrize("variant,M,N", [("block", 5, 3001), ("rows", 9, 781), ("rows", 6, 100),
                                         ("split", 3, 1064)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_aligned_frame_writes_the_row_and_nothing_else(variant, M, N, dtype):
    """Odd N, rows of a strided view whose out is a strided view too (rows as far past a 16-byte
    boundary as x's): every element right, and not one element outside out's rows written."""
    from triton_src import softmax_block, softmax_rows, softmax_split
    from triton_src.softmax_split import with_frame
    vec = 16 // torch.tensor([], dtype=dtype).element_size()
    x = torch.randn(M + 1, N + 2 * vec + 1, dtype=dtype, device=DEV)[:M, :N]
    x[0, :5] = float("-inf")
    x[1, N - 1] = 30.0
    big = torch.full((M + 1, N + vec + 1 + 2 * vec), 7.0, dtype=dtype, device=DEV)
    out = big[:M, :N]
    before = big.clone()
    if variant == "split":
        cfg = with_frame(softmax_split.config(N, 256, 4), x, out)
        assert cfg["VEC"] == vec
        softmax_split.bind_launch(x, out, cfg)()
    else:
        mod = {"block": softmax_block, "rows": softmax_rows}[variant]
        cfg = getattr(dispatch, f"softmax_{variant}_config")(N, x.element_size())
        assert softmax_block.frame(x, out, cfg["BLOCK_N"]) == vec
        mod.bind_launch(x, out, cfg)()
    ref = torch.softmax(x.double(), dim=-1)
    rtol, atol = {torch.float32: (1e-5, 1e-7), torch.bfloat16: (1.6e-2, 1e-5)}[dtype]
    torch.testing.assert_close(out.double(), ref, rtol=rtol, atol=atol)
    outside = torch.ones_like(big, dtype=torch.bool)
    outside[:M, :N] = False
    assert torch.equal(big[outside], before[outside])


@pytest.mark.parametrize("variant,kw", [("block", dict(M=64, N=3001, dtype="bfloat16")),
                                        ("rows", dict(M=64, N=100, dtype="bfloat16")),
                                        ("split", dict(M=64, N=50_257, dtype="bfloat16"))])
def test_compile_only_aligned_frame_loads_16_bytes(variant, kw):
    """N not a multiple of 16: with the frame the loads are 128-bit; without it, 2 bytes each."""
    import triton_src
    from backends import triton_layer as T
    case = problems.get("softmax").case(**kw)
    framed = T.compile_spec(T._sm_spec(variant, case))["ptx"]
    triton_src.FRAME = False
    try:
        plain = T.compile_spec(T._sm_spec(variant, case))["ptx"]
    finally:
        triton_src.FRAME = True
    v4 = r"(ld\.global(\.[\w:]+)*\.v4\.b32|cp\.async\.cg\.shared\.global)"
    assert re.search(v4, framed) and re.search(r"st\.global(\.\w+)*\.v4\.b32", framed)
    assert not re.search(v4, plain)


def test_frame_rules_of_the_planner():
    """The rows kernel takes the frame on short rows only (rows_frame_max_cols); split with the
    frame holds half the values a thread (split_values_per_thread_framed)."""
    limit = dispatch.SOFTMAX["rows_frame_max_cols"]
    frames = set()
    for N in (17, 100, 129, limit - 1, limit, limit + 1, 300, 781, 1000):
        for es in (2, 4):
            cfg = dispatch.softmax_rows_config(N, es)
            assert cfg["FRAME"] is (cfg["BLOCK_N"] <= limit), (N, es, cfg)
            frames.add(cfg["FRAME"])
    assert frames == {True, False}
    vpt, vpt_framed = dispatch.SOFTMAX["split_values_per_thread"], dispatch.SOFTMAX["split_values_per_thread_framed"]
    for M, N, es in ((4096, 50_257, 4), (8, 200_003, 2), (1, 786_433, 4), (64, 65_537, 2)):
        plain = dispatch.softmax_split_config(M, N, es, H200)
        framed = dispatch.softmax_split_config(M, N, es, H200, framed=True)
        assert framed["CHUNK"] == plain["CHUNK"], (M, N, es)
        assert framed["CHUNK"] // (32 * framed["num_warps"]) == min(vpt_framed, framed["CHUNK"] // 32), (M, N, es)
        assert plain["CHUNK"] // (32 * plain["num_warps"]) == min(vpt, plain["CHUNK"] // 32), (M, N, es)


@pytest.mark.parametrize("name", ["softmax", "softmax_split"])
def test_split_reports_the_config_it_binds(name):
    """The default and the variant plan split through one function; the config in a row's info
    is the one the launch bound, the frame (VEC) and its chunk count included."""
    P = problems.get("softmax")
    case = P.case(M=2, N=17_000, dtype="float32")
    launch = _impl("softmax", name).prepare(case, P.make_inputs(case, DEV, 0), P.alloc_out(case, DEV))
    assert launch.info["config"] == launch.config
    assert launch.config["VEC"] == 4   # 17,000 fp32 columns: rows 16-byte apart only every 4th
    assert launch.config["num_warps"] == dispatch.split_warps(launch.config["CHUNK"], 4, framed=True)


# -- another GPU: the planner with the facts of the GPUs a newcomer may have ------------------------
OTHER_GPUS = {   # what triton_src.device_facts reports there (SMs, shared memory an SM, capability, L2)
    "a100": {"sms": 108, "regs_per_sm": 65536, "smem_per_sm": 167936, "max_warps_per_sm": 64,
             "l2_bytes": 40 * 2 ** 20, "cc": (8, 0)},
    "rtx4090": {"sms": 128, "regs_per_sm": 65536, "smem_per_sm": 102400, "max_warps_per_sm": 48,
                "l2_bytes": 72 * 2 ** 20, "cc": (8, 9)},
    "h100": {**H200, "cc": (9, 0)},
    "b200": {"sms": 148, "regs_per_sm": 65536, "smem_per_sm": 233472, "max_warps_per_sm": 64,
             "l2_bytes": 126 * 2 ** 20, "cc": (10, 0)},
    "rtx5090": {"sms": 170, "regs_per_sm": 65536, "smem_per_sm": 102400, "max_warps_per_sm": 48,
                "l2_bytes": 96 * 2 ** 20, "cc": (12, 0)},
}


@pytest.mark.parametrize("gpu", sorted(OTHER_GPUS))
def test_defaults_plan_within_other_gpus(gpu):
    """On A100, RTX 4090, H100, B200 and RTX 5090 the GEMM default takes TMA only from sm_90 on and
    tile configs whose pipelined shared memory the device holds; softmax and vector add plan
    every case. (The same planner functions the GPU launch calls, with the device's facts.)"""
    from backends import triton_layer as T
    facts = OTHER_GPUS[gpu]
    limit = facts["smem_per_sm"] - 1024
    for suite in ("verify", "models"):
        for case in problems.get("gemm_epilogue").cases(suite):
            a, b, bias, act, out = T._meta_gemm(case)
            variant, cfg = dispatch.gemm_choice(case.M, case.N, case.K, T.gemm_tma.check(a, b, out) is None, facts,
                                                T._gemm_aligned(a, b, bias, out))
            assert facts["cc"] >= (9, 0) or variant != "tma", (gpu, case.id)
            assert dispatch.gemm_smem(cfg) <= limit, (gpu, case.id, variant, cfg)
        for case in problems.get("softmax").cases(suite):
            assert dispatch.softmax_choice(case.M, case.N, case.torch_dtype.itemsize, facts)[0] in \
                dispatch.VARIANTS["softmax"]
        for case in problems.get("vector_add").cases(suite):
            assert dispatch.vector_add_choice(case.N, case.torch_dtype.itemsize)[0] == "unmasked"


@pytest.mark.slow
def test_compile_only_defaults_for_sm80():
    """The defaults' kernels as an A100 would plan them compile for sm_80 (Triton's
    GPUTarget("cuda", 80, 32)): one case of each problem and each GEMM path an A100 takes."""
    from backends import triton_layer as T
    facts = OTHER_GPUS["a100"]
    cases = [problems.get("vector_add").case(N=100_003, dtype="bfloat16"),
             problems.get("softmax").case(M=64, N=50_257, dtype="bfloat16"),
             problems.get("softmax").case(M=4096, N=768, dtype="float16")]
    gemm = problems.get("gemm_epilogue")
    for case in cases:
        variant = "default"
        specs = T.specs_for(case.problem, variant, case)
        for s in specs:
            f = T.compile_spec(s, ptxas=False, cc=80)
            assert ".target sm_80" in f["ptx"] and f["target"] == "sm_80", (case.id, f["target"])
    for case in (gemm.case(M=4096, N=4096, K=4096, dtype="bfloat16"), gemm.case(M=16, N=4096, K=4096, dtype="float16")):
        a, b, bias, act, out = T._meta_gemm(case)
        variant, cfg = dispatch.gemm_choice(case.M, case.N, case.K, T.gemm_tma.check(a, b, out) is None, facts,
                                            T._gemm_aligned(a, b, bias, out))
        assert variant != "tma"
        for s in T._gemm_specs(variant, case, cfg):
            f = T.compile_spec(s, ptxas=False, cc=80)
            assert ".target sm_80" in f["ptx"], (case.id, variant)


def test_a_staged_launch_that_copies_nothing_names_no_copy_kernel():
    """A and B readable by TMA, C not (its base off 16 bytes): the staged launch stores C from
    registers and copies nothing, so the plan's sources hold its host and the TMA kernel but no
    copy kernel (Triton and Gluon alike); with B's rows unreadable the copy kernel is named."""
    import dataclasses

    from gluon_src import dispatch as gluon_dispatch
    from harness.meta_inputs import case_facts
    from kltools.plan import Operand
    facts = case_facts(problems.get("gemm_epilogue").case(M=2048, N=2048, K=2048, act="gelu", dtype="bfloat16"))
    out = facts.operands["out"]
    off_c = dataclasses.replace(facts, operands={**facts.operands, "out": Operand(out.shape, out.strides, 2)})
    for D, host in ((dispatch, "bind_staged_launch"), (gluon_dispatch, "staged_specs")):
        p = D.plan("gemm_epilogue", off_c)
        assert p.variant == "tma" and p.config["stage"] == [], (D.__name__, p.config)
        kernels = {k for s in p.sources for k in s.kernels}
        assert "gemm_epilogue_tma_kernel" in kernels and "stage_rows_kernel" not in kernels
        assert host in {h for s in p.sources for h in s.host}
        staged = D.plan("gemm_epilogue", case_facts(problems.get("gemm_epilogue").case(M=2048, N=2047, K=2048)))
        assert "stage_rows_kernel" in {k for s in staged.sources for k in s.kernels}
