"""One planner contract for every layer (kltools.plan; docs/DESIGN.md, "One contract per layer").

Each layer's planner module exposes ``VARIANTS`` (its variants by algorithm word, each with the
files and entry points of its kernels) and a pure ``plan(problem, facts) -> Plan``. Checked here,
for every layer and every case of every suite: ``plan`` answers with a variant of ``VARIANTS``
whose files exist, the registered id of that variant (where the layer registers one) accepts the
case, and the answer is the variant the layer's adapter plans for the same case (its default's
compile-only path on the case's meta tensors).
"""
from __future__ import annotations

import importlib
from functools import lru_cache
from pathlib import Path

import pytest

from harness import problems, registry
from harness.meta_inputs import case_facts
from harness.problems import SUITES
from kltools.plan import H200, Device, Plan, Source

ROOT = Path(__file__).resolve().parent.parent
#: layer -> its planner's package (the CuPy rows plan with the CUDA C++ planner)
LAYERS = {"cuda": "cuda_src", "cupy": "cuda_src", "triton": "triton_src", "gluon": "gluon_src",
          "cute": "cutlass_src", "helion": "helion_src", "tilelang": "tilelang_src", "cutile": "cutile_src"}
#: what a planner module needs to import, besides Python and torch
NEEDS = {"triton_src": "triton", "gluon_src": "triton", "helion_src": "helion"}


def planner(layer: str):
    pkg = LAYERS[layer]
    if pkg in NEEDS:
        pytest.importorskip(NEEDS[pkg])
    return importlib.import_module(f"{pkg}.dispatch")


@lru_cache(maxsize=None)
def all_cases():
    return [(p.name, c) for p in problems.all_problems() for s in SUITES for c in p.cases(s)]


def planned_problems(layer: str) -> set:
    """The problems ``layer`` has a default for (the ones its planner plans)."""
    return {i.problem for i in registry.all_impls() if i.layer == layer and i.role == "default"}


def layer_cases(layer: str):
    return [(p, c) for p, c in all_cases() if p in planned_problems(layer)]


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_variants_by_word_name_existing_files(layer):
    d = planner(layer)
    assert set(d.VARIANTS) == planned_problems(layer)
    for problem, words in d.VARIANTS.items():
        assert words, problem
        for word, srcs in words.items():
            assert srcs and all(isinstance(s, Source) for s in srcs), (problem, word)
            for s in srcs:
                assert (ROOT / s.path).is_file(), s.path
                assert s.path.startswith(LAYERS[layer] + "/"), f"{word}: {s.path} is outside the layer's folder"
                assert s.kernels, f"{problem}/{word}: {s.path} names no kernel"


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_plan_answers_every_case_of_every_suite(layer):
    d = planner(layer)
    for problem, case in layer_cases(layer):
        p = d.plan(problem, case_facts(case))
        assert isinstance(p, Plan) and p.problem == problem, (layer, case.id)
        assert p.variant in d.VARIANTS[problem], (layer, case.id, p.variant)
        assert p.sources and all((ROOT / s.path).is_file() for s in p.sources), (layer, case.id)
    for problem, case in all_cases():   # a problem the layer has no default for: one clear error
        if problem not in d.VARIANTS:
            with pytest.raises(ValueError, match="problem"):
                d.plan(problem, case_facts(case))
            break


def _kernels(srcs) -> set:
    return {(s.path, k) for s in srcs for k in (s.kernels or ())}


def _registered(layer: str, problem: str, word: str):
    key = f"{problem}/{layer}:{problem}_{word}"
    return {i.key: i for i in registry.all_impls() + registry.candidates()}.get(key)


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_the_chosen_variant_accepts_the_case(layer):
    """Where the layer registers the chosen variant as an id of its own that runs the same kernels,
    that id takes the case (the default runs nothing its own variant would decline). A plan that
    first copies A or B to TMA-legal rows (CUDA's staged ping-pong or split-K) runs the variant on
    the copy, which the variant's id cannot know: it launches a kernel the id does not, as does a
    plan of an id that runs another kernel of the word (TileLang's ids are its pending 16-byte
    kernels); neither id is a judge of the default's."""
    d = planner(layer)
    checked = 0
    for problem, case in layer_cases(layer):
        p = d.plan(problem, case_facts(case))
        impl = _registered(layer, problem, p.variant)
        if impl is None or not _kernels(p.sources) <= _kernels(impl.sources):
            continue
        assert impl.supports(case) is None, (impl.id, case.id)
        checked += 1
    assert checked, f"{layer}: no plan chose a variant with an id of its own"


# -- the adapters' own planning of a case (their defaults' compile-only path) ---------------------
def _cuda_word(problem, case):
    from backends import cuda_attention, cuda_gemm, cuda_layer
    from cuda_src import dispatch
    fn = {"vector_add": cuda_layer.case_vector_add, "softmax": cuda_layer.case_softmax,
          "gemm_epilogue": cuda_gemm.case_gemm, "attention": cuda_attention.case_attention}[problem]
    path = fn("auto", case).info["path"]
    return dispatch._WORD.get(path, path)


def _word_of(spec) -> str:
    """The word of an attention launch spec's kernel (``attention_<word>_kernel``)."""
    return spec.kernel.__name__.removeprefix("attention_").removesuffix("_kernel")


def _triton_word(problem, case):
    from backends import triton_attention as a
    from backends import triton_layer as t
    return {"vector_add": lambda: "unmasked", "softmax": lambda: t._sm_choice(case)[0],
            "gemm_epilogue": lambda: t._gemm_choice(case)[0],
            "attention": lambda: _word_of(a.attention_specs("default", case)[0])}[problem]()


def _gluon_word(problem, case):
    from backends import gluon_attention as a
    from backends import gluon_layer as g
    return {"vector_add": lambda: "unmasked", "softmax": lambda: g._sm_specs("default", case)[0],
            "gemm_epilogue": lambda: g._gemm_specs("default", case)[0],
            "attention": lambda: _word_of(a.default_spec(case))}[problem]()


def _cute_word(problem, case):
    from backends import cute_attention as a
    from backends import cute_layer as c
    from cutlass_src import dispatch
    return {"vector_add": lambda: "unmasked", "softmax": lambda: c._sm_plan(case)["kernel"],
            "gemm_epilogue": lambda: dispatch.plan_gemm(case.M, case.N, case.K,
                                                        c._gemm_case_widths(case))["schedule"],
            "attention": lambda: a._plan(case.B, case.Hq, case.Sq, case.D, 2, True)["kernel"]}[problem]()


def _helion_word(problem, case):
    if problem == "attention":
        from backends import helion_attention as a
        return a.plan_for(a._meta_args(case)).variant
    from backends import helion_layer as h
    return h.plan_for(problem, h._meta_args(problem, case)).variant


def _cutile_word(problem, case):
    from backends import cutile_attention as a
    from backends import cutile_layer as c
    from harness.meta_inputs import meta_attention, meta_gemm, meta_softmax
    if problem == "vector_add":
        return "unmasked"
    if problem == "attention":
        q, k = meta_attention(case)[:2]
        return a._plan("default", q, k)["variant"]
    if problem == "softmax":
        return c._sm_plan("default", *meta_softmax(case))["variant"]
    a, b = meta_gemm(case)[:2]
    return c._gemm_plan("default", a, b)["variant"]


ADAPTER_WORD = {"cuda": _cuda_word, "cupy": _cuda_word, "triton": _triton_word, "gluon": _gluon_word,
                "cute": _cute_word, "helion": _helion_word, "cutile": _cutile_word}


@pytest.mark.parametrize("layer", sorted(ADAPTER_WORD))
def test_plan_is_what_the_adapter_plans(layer):
    """tilelang is not here: its adapter plans inside per-id closures, from the same three facts
    (16-byte bases; N and K rows of 16-byte multiples) that its ``plan`` reads."""
    d = planner(layer)
    if registry.get("softmax", f"{layer}:softmax").compile_only_fn is None:
        pytest.skip(f"{layer}: its package is not installed")
    for problem, case in layer_cases(layer):
        assert d.plan(problem, case_facts(case)).variant == ADAPTER_WORD[layer](problem, case), (layer, case.id)


def test_facts_of_real_tensors_equal_the_meta_facts():
    """``case_facts`` (meta tensors) says what the real inputs of the case say: sizes, strides and
    16-byte alignment of every operand (the harness's output is a 256-byte aligned buffer)."""
    import torch

    from kltools.plan import facts_of
    for problem, case in all_cases():
        if max(case.dims.values()) > 5000 or (problem not in ("vector_add", "attention")
                                              and min(case.dims.values()) > 300):
            continue
        prob = problems.get(problem)
        inputs = prob.make_inputs(case, "cpu", 0)
        out = torch.empty(prob.out_shape(case), dtype=case.torch_dtype)
        names = {"vector_add": ("x", "y"), "softmax": ("x",), "gemm_epilogue": ("a", "b", "bias"),
                 "attention": ("q", "k", "v")}[problem]
        real = facts_of(problem, case.dims, case.dtype, case.params, dict(zip(names, inputs)) | {"out": out})
        meta = case_facts(case)
        for n, op in meta.operands.items():
            r = real.operands[n]
            assert (r.shape, r.strides) == (op.shape, op.strides), (case.id, n)
            assert (r.addr16 == 0) == (op.addr16 == 0), (case.id, n)


def test_facts_read_sizes_and_reject_unknown_ones():
    case = problems.get("softmax").case(M=3, N=128, dtype="float16", layout="strided_odd")
    f = case_facts(case)
    assert (f.M, f.N, f.esize, f.device) == (3, 128, 2, H200)
    assert not f.rows16("x") and f.rows16("out")
    assert f.meta("x").stride() == (131, 1) and f.meta("x").storage_offset() == 1
    with pytest.raises(AttributeError):
        f.K
    assert Device(name="other", sms=78) != H200


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_plan_asks_no_gpu(layer, monkeypatch):
    """``plan`` reads the facts' device, never the machine's: its answer (and so the lines of code
    derived from it) is the same with and without a GPU."""
    import torch
    d = planner(layer)
    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: asked.append("is_available") or False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: asked.append("device_count") or 0)
    for problem, case in layer_cases(layer):
        d.plan(problem, case_facts(case))
    assert not asked, asked


def test_tilelang_pending_facts_are_the_adapters():
    """TileLang's plan under SWITCHES["softmax_next"] reads the alignment facts its adapter reads
    from the tensors (``_sm_facts``), here from the case's facts."""
    pytest.importorskip("tilelang")
    from backends import tilelang_layer as T
    from harness.meta_inputs import meta_softmax
    from tilelang_src import dispatch as d
    for problem, case in all_cases():
        if problem == "softmax":
            assert d.softmax_next_facts(case_facts(case)) == T._sm_facts(*meta_softmax(case)), case.id


# -- the awkward suite: shapes no planner was tuned on -------------------------------------
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_every_default_takes_the_awkward_suite(layer):
    """On the awkward suite (shapes drawn with a fixed seed, no planner tuned on them), every
    default takes the case: a user's shape is never a SKIP of our making. (That its planner answers
    there is test_plan_answers_every_case_of_every_suite's: the awkward suite is one of SUITES.)"""
    d = planner(layer)
    probs = planned_problems(layer)
    seen = set()
    for problem in sorted(probs):
        for case in problems.get(problem).cases("awkward"):
            impl = registry.get(problem, f"{layer}:{problem}")
            assert impl.supports(case) is None, (impl.id, case.id, impl.supports(case))
            seen.add((problem, d.plan(problem, case_facts(case)).variant))
    # the sweep reaches several of the planner's classes, not one
    assert len(seen) > len(probs), (layer, seen)
