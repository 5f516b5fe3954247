"""The LOC counter (harness/loc.py) on fixture files whose counts were made by hand.

Fixtures live in tests/fixtures/loc/ and are parsed, never imported or compiled. Each expected
number below is followed by the hand count, line by line (file line numbers).
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.loc import REPO_ROOT, count_impl, count_source
from harness.registry import Source

FIX = "tests/fixtures/loc"
TRITON = f"{FIX}/triton_style.py"
CUTE = f"{FIX}/cute_style.py"
CUDA = f"{FIX}/cuda_style.cu"
CUH = f"{FIX}/helpers.cuh"
TRICKY = f"{FIX}/tricky.cpp"


@dataclass
class FakeImpl:
    sources: tuple = ()


def test_repo_root_is_parent_of_harness():
    assert (REPO_ROOT / "harness" / "loc.py").is_file()
    assert (REPO_ROOT / TRITON).is_file()


# -- Python, Triton style ----------------------------------------------------------------------
def test_triton_named_kernel_and_wrapper():
    r = count_source(Source(TRITON, kernels=("softmax_kernel",), host=("softmax",)))
    # kernel:
    #   softmax_kernel 27-37: 27 @autotune, 28 @jit, 29 def, (30 blank), 31 BLOCK):, 32 pid (code +
    #     trailing comment), 33, 34, 35, 36, 37                                        = 10
    #   _row_max (called) 16-20: 16 @jit, 17 def, (18 docstring), (19 comment), 20     = 3
    #   _max_combine (passed to tl.reduce) 11-13: 11, 12, 13                           = 3
    #   (other_kernel, _unused_helper: not reached)                                    -> 16
    assert r["kernel"] == 16
    # host:
    #   softmax 61-69: 61 def, (62 docstring), (63 blank), 64, 65, 66 lambda, 67 lambda's 2nd
    #     line, 68 launch, 69 return                                                   = 7
    #   _check 51-58: 51, 52, 53 (string with '#'), 54, 55 ('#' line inside the string),
    #     (56 blank line inside the string), 57, 58                                    = 7
    #   _grid 45-48: 45 def, (46-47 two-line docstring), 48                            = 2
    #   (softmax_kernel is referenced by the wrapper but is a kernel, not host)        -> 16
    assert r["host"] == 16
    assert sorted(r["kernel_units"]) == ["_max_combine", "_row_max", "softmax_kernel"]
    assert sorted(r["host_units"]) == ["_check", "_grid", "softmax"]
    assert r["file"] == TRITON


def test_triton_all_decorated_kernels_when_kernels_is_none():
    r = count_source(Source(TRITON, kernels=None, host=("softmax",)))
    # the 16 above + other_kernel 40-42: 40 @jit, 41 def, 42                          -> 19
    assert (r["kernel"], r["host"]) == (19, 16)
    assert sorted(r["kernel_units"]) == ["_max_combine", "_row_max", "other_kernel",
                                         "softmax_kernel"]


def test_triton_other_kernel_only_host_still_skips_jit_functions():
    r = count_source(Source(TRITON, kernels=("other_kernel",), host=("softmax",)))
    # kernel: other_kernel 40-42 = 3; host: 16 as above (softmax_kernel is @triton.jit, so it is
    # device code and never host, even when it is not the Source's kernel)
    assert (r["kernel"], r["host"]) == (3, 16)


def test_triton_no_host_named():
    r = count_source(Source(TRITON, kernels=("_row_max",)))
    # _row_max 16, 17, 20 + _max_combine 11, 12, 13                                    -> 6
    assert (r["kernel"], r["host"], r["host_units"]) == (6, 0, [])


def test_kernels_empty_tuple_means_none_are_kernels():
    r = count_source(Source(TRITON, kernels=(), host=("_check",)))
    assert (r["kernel"], r["host"]) == (0, 7)


# -- Python, CuTe DSL style --------------------------------------------------------------------
def test_cute_decorated_methods_and_host_class():
    r = count_source(Source(CUTE, kernels=None, host=("vector_add",)))
    # kernel (decorated: _warp_sum, AddOp.kernel, AddOp.__call__; reached: AddOp._threads):
    #   _warp_sum 11-15: 11 @cute.jit, 12, 13, 14, 15                                 = 5
    #   AddOp.kernel 27-30: 27 @cute.kernel, 28, 29, 30                               = 4
    #   AddOp.__call__ 32-35: 32 @cute.jit, 33, 34, 35                                = 4
    #   AddOp._threads 24-25 (self._threads() from __call__)                          = 2   -> 15
    assert r["kernel"] == 15
    # host:
    #   vector_add 38-41: 38, 39, 40, 41                                              = 4
    #   _tile 7-8                                                                     = 2
    #   AddOp (referenced; whole class minus docstring and kernel lines):
    #     18 class, (19 docstring), 21 def __init__, 22                                = 3   -> 9
    assert r["host"] == 9
    assert sorted(r["kernel_units"]) == ["AddOp.__call__", "AddOp._threads", "AddOp.kernel",
                                         "_warp_sum"]
    assert sorted(r["host_units"]) == ["AddOp", "_tile", "vector_add"]


def test_cute_method_names():
    r = count_source(Source(CUTE, kernels=("AddOp.kernel",), host=("AddOp.__init__",)))
    # kernel: AddOp.kernel 27-30 = 4, _warp_sum 11-15 = 5 -> 9; host: __init__ 21-22 -> 2
    assert (r["kernel"], r["host"]) == (9, 2)


def test_cute_jit_launcher_named_as_host_stays_host():
    r = count_source(Source(CUTE, kernels=None, host=("AddOp.__call__",)))
    # kernel: _warp_sum 5 + AddOp.kernel 4                                              -> 9
    # host: AddOp.__call__ 32-35 = 4 + AddOp._threads 24-25 = 2 (called from it)        -> 6
    assert (r["kernel"], r["host"]) == (9, 6)
    assert sorted(r["host_units"]) == ["AddOp.__call__", "AddOp._threads"]


def test_python_strings_comments_docstrings_tokenized(tmp_path):
    f = tmp_path / "m.py"
    f.write_text(
        'import triton\n'                                   # 1
        '@triton.jit\n'                                     # 2  counts
        'def k(x):\n'                                       # 3  counts
        '    """doc # not code"""; y = 1\n'                 # 4  counts (code after the docstring)
        '    s = f"{x} # in an f-string"\n'                 # 5  counts
        '    t = ("a"\n'                                    # 6  counts
        '         # a comment inside brackets\n'            # 7  comment only
        '         "b")\n'                                   # 8  counts
        '    u = """\n'                                     # 9  counts
        '"""\n'                                             # 10 counts (closes the string)
        '\n'                                                # 11 blank
        '    return s  # done\n'                            # 12 counts
    )
    r = count_source(Source(str(f), kernels=None), root=tmp_path)
    # 2, 3, 4, 5, 6, 8, 9, 10, 12                                                      -> 9
    assert r["kernel"] == 9
    assert r["file"] == "m.py"


def test_python_decorator_detection(tmp_path):
    f = tmp_path / "d.py"
    f.write_text(
        "import triton as tr\n"
        "from triton import jit\n"
        "import cutlass\n"
        "import numba\n"
        "@tr.jit\n"                      # alias of triton: kernel
        "def a(): pass\n"
        "@jit\n"                          # imported from triton: kernel
        "def b(): pass\n"
        "@cutlass.jit\n"                  # kernel
        "def c(): pass\n"
        "@tr.heuristics({})\n"            # kernel (called decorator)
        "def d(): pass\n"
        "@numba.jit\n"                    # not a GPU-DSL decorator
        "def e(): pass\n"
        "@tr.testing.perf_report([])\n"   # final attribute is not jit/kernel/...
        "def f(): pass\n"
    )
    r = count_source(Source(str(f), kernels=None))
    assert sorted(r["kernel_units"]) == ["a", "b", "c", "d"]
    assert r["kernel"] == 8


# -- C++ / CUDA --------------------------------------------------------------------------------
def test_cuda_global_kernels_and_launcher():
    r = count_source(Source(CUDA, kernels=None, host=("launch_row_max",)))
    # kernel (__global__: row_max_kernel, fill_kernel; referenced: MaxOp, warp_max):
    #   row_max_kernel 25-35: 25 template, 26 __global__ ... __launch_bounds__, 27, 28,
    #     29 (code + /* */), 30, 31 #if, 32, 33 #endif, 34, 35                          = 11
    #   fill_kernel 37-42: 37 extern "C", 38, 39 ("// ... /*" in a string), 40 ('{', '"'),
    #     41 (1'000.0f), 42                                                             = 6
    #   MaxOp 13-15: 13, 14, 15                                                          = 3
    #   warp_max 17-21: 17, (18 comment), 19, 20, 21                                     = 4
    #   (unused_helper 23: not reached)                                                  -> 24
    assert r["kernel"] == 24
    # host:
    #   launch_row_max 55-68: 55, 56, 57, 58, (59-60 block comment), 61 launch,
    #     62, 63 (inside the raw string), (64 blank inside the raw string), 65, (66 blank), 67,
    #     68                                                                             = 10
    #   grid_for 47-49: 47, 48, 49                                                       = 3
    #   (top-level #include/#define/#ifndef and the kName raw string: outside units)     -> 13
    assert r["host"] == 13
    assert sorted(r["kernel_units"]) == ["MaxOp", "fill_kernel", "row_max_kernel", "warp_max"]
    assert sorted(r["host_units"]) == ["grid_for", "launch_row_max"]


def test_cuda_named_kernel_pulls_its_helpers_only():
    r = count_source(Source(CUDA, kernels=("row_max_kernel",)))
    # row_max_kernel 11 + MaxOp 3 + warp_max 4                                          -> 18
    assert (r["kernel"], r["host"]) == (18, 0)
    r = count_source(Source(CUDA, kernels=("warp_max",)))
    # warp_max 17, 19, 20, 21                                                            -> 4
    assert (r["kernel"], r["kernel_units"]) == (4, ["warp_max"])


def test_cuh_helpers_constexpr_structs_and_overloads():
    r = count_source(Source(CUH, kernels=("block_max",)))
    # block_max 10-16: 10 template, 11, 12, 13, 14, 15, 16                              = 7
    # Vec4 6-8 (struct __align__(16), used in block_max)                                 = 3
    # ceil_div 4 (constexpr: usable on the device)                                       = 1
    # twice 18 (__host__ __device__ overload; the host-only overload on 19 is not)       = 1
    # (#pragma once, comment: outside units)                                             -> 12
    assert r["kernel"] == 12
    assert sorted(r["kernel_units"]) == ["Vec4", "block_max", "ceil_div", "twice"]
    r = count_source(Source(CUH, kernels=(), host=("twice",)))
    # a named unit takes all its overloads: 18, 19                                       -> 2
    assert (r["kernel"], r["host"]) == (0, 2)


def test_cpp_structure_corner_cases():
    r = count_source(Source(TRICKY, kernels=(), host=("entry",)))
    # entry 34-37 (inside extern "C" { }): 34, 35, 36, 37                                = 4
    # Widget 24-27 (class used by entry): 24, 25, 26, 27                                 = 4
    # Widget::size 29-31 (w.size()): 29, 30, 31                                          = 3
    # pick 15-19 (namespace outer::inner; templated return type, braced default argument,
    #   '}' char default): 15, 16 (code + comment), (17 continued // comment), 18, 19    = 4
    # Cfg 14 (parameter type of pick)                                                    = 1
    # (table, Mode, proto, the twice lambda, kScale: no unit; #define BODY with braces) -> 16
    assert (r["kernel"], r["host"]) == (0, 16)
    assert sorted(r["host_units"]) == ["Cfg", "Widget", "Widget::size", "entry", "pick"]
    for not_a_definition in ("twice", "proto", "table", "Mode", "kScale", "BODY"):
        with pytest.raises(ValueError, match=repr(not_a_definition)):
            count_source(Source(TRICKY, kernels=(), host=(not_a_definition,)))


def test_cpp_macro_attribute_before_the_kernel_name():
    r = count_source(Source(TRICKY, kernels=None))
    # macro_attr_kernel 40-44: 40 template, 41 __global__ ... KL_ATTR(N), 42 name, 43, 44   = 5
    # (39 top-level #define: outside units; entry/pick/...: not __global__)                 -> 5
    assert (r["kernel"], r["kernel_units"], r["host"]) == (5, ["macro_attr_kernel"], 0)


def test_cpp_comment_and_literal_lexing(tmp_path):
    f = tmp_path / "k.cu"
    f.write_text(
        '__global__ void k(char* p) {\n'                    # 1  counts
        '  const char* a = "/*";\n'                         # 2  counts ("/*" is a string)
        '  p[0] = a[0];\n'                                  # 3  counts
        '  /* real */ /* comments */\n'                     # 4  comment only
        "  p[1] = '\\'';  // '\n"                           # 5  counts (escaped quote char)
        '  const char* r = R"d(\n'                          # 6  counts
        '*/ } "\n'                                          # 7  counts (inside the raw string)
        ')d";\n'                                            # 8  counts
        '}\n'                                               # 9  counts
        '__global__ void other() {}\n'                      # 10 counts (second kernel)
    )
    r = count_source(Source(str(f), kernels=("k",)))
    # 1, 2, 3, 5, 6, 7, 8, 9                                                             -> 8
    assert r["kernel"] == 8
    r = count_source(Source(str(f), kernels=None))
    assert (r["kernel"], sorted(r["kernel_units"])) == (9, ["k", "other"])


# -- count_impl --------------------------------------------------------------------------------
def test_count_impl_sums_and_counts_shared_units_once():
    impl = FakeImpl(sources=(
        Source(CUDA, kernels=("row_max_kernel",), host=("launch_row_max",)),  # 18 / 13
        Source(CUDA, kernels=None),                    # 24, of which 18 already counted
        Source(CUH, kernels=("block_max",)),           # 12
    ))
    r = count_impl(impl)
    # kernel: 24 (cuda_style.cu, union of both Sources) + 12 (helpers.cuh) -> 36; host: 13
    assert r == {"kernel": 36, "host": 13, "plan": 0, "files": [CUDA, CUH]}


def test_count_impl_python_two_sources_same_helper():
    impl = FakeImpl(sources=(
        Source(TRITON, kernels=("softmax_kernel",), host=("softmax",)),  # 16 / 16
        Source(TRITON, kernels=("_row_max",), host=("_check",)),          # 6 / 7, all shared
    ))
    assert count_impl(impl) == {"kernel": 16, "host": 16, "plan": 0, "files": [TRITON]}


def test_count_impl_without_sources():
    assert count_impl(FakeImpl()) == {"kernel": None, "host": None, "plan": None, "files": []}


def test_count_impl_on_a_registered_implementation_object():
    from harness.registry import Implementation

    impl = Implementation(problem="softmax", layer="triton", name="x", prepare=lambda *a: None,
                          sources=(Source(TRITON, kernels=("other_kernel",)),))
    assert count_impl(impl) == {"kernel": 3, "host": 0, "plan": 0, "files": [TRITON]}


def test_absolute_path_and_custom_root(tmp_path):
    dst = tmp_path / "sub" / "cuda_style.cu"
    dst.parent.mkdir()
    shutil.copy(REPO_ROOT / CUDA, dst)
    r = count_source(Source(str(dst), kernels=None, host=("launch_row_max",)))
    assert (r["kernel"], r["host"]) == (24, 13)
    r = count_source(Source("sub/cuda_style.cu", kernels=None), root=tmp_path)
    assert (r["kernel"], r["file"]) == (24, "sub/cuda_style.cu")


def test_edit_is_seen(tmp_path):
    f = tmp_path / "e.py"
    f.write_text("import triton\n@triton.jit\ndef k():\n    pass\n")
    assert count_source(Source(str(f)))["kernel"] == 3
    f.write_text("import triton\n@triton.jit\ndef k():\n    x = 1\n    pass\n")
    assert count_source(Source(str(f)))["kernel"] == 4


# -- errors ------------------------------------------------------------------------------------
def test_missing_file_names_it():
    with pytest.raises(FileNotFoundError, match="no_such_file.cu"):
        count_source(Source(f"{FIX}/no_such_file.cu"))
    impl = FakeImpl(sources=(Source(TRITON), Source("triton_src/missing_kernel.py")))
    with pytest.raises(FileNotFoundError, match="missing_kernel.py"):
        count_impl(impl)


@pytest.mark.parametrize("src, name", [
    (Source(TRITON, kernels=("no_such_kernel",)), "no_such_kernel"),
    (Source(TRITON, kernels=None, host=("no_such_wrapper",)), "no_such_wrapper"),
    (Source(CUTE, kernels=("AddOp.missing",)), "AddOp.missing"),
    (Source(CUDA, kernels=("no_such_global",)), "no_such_global"),
    (Source(CUDA, host=("launch_missing",)), "launch_missing"),
])
def test_unknown_name_is_a_value_error_naming_it(src, name):
    with pytest.raises(ValueError, match=repr(name).replace(".", r"\.")) as e:
        count_source(src)
    assert Path(src.path).name in str(e.value)


def test_unknown_language_and_bad_python(tmp_path):
    f = tmp_path / "k.rs"
    f.write_text("fn main() {}\n")
    with pytest.raises(ValueError, match="unknown language"):
        count_source(Source(str(f)))
    g = tmp_path / "bad.py"
    g.write_text("def broken(:\n")
    with pytest.raises(ValueError, match="bad.py"):
        count_source(Source(str(g)))


def test_bad_names_type():
    with pytest.raises(TypeError, match="Source.kernels"):
        count_source(Source(TRITON, kernels=(3,)))


# -- one rule in every language: helpers in other files count, once, and only when reached ----
def test_cpp_helpers_from_an_included_header():
    r = count_source(Source(f"{FIX}/cross_kernel.cu", kernels=("scale_kernel",), host=("scale",)))
    # kernel: scale_kernel 5-9 (5 lines); block_max 10-16 of helpers.cuh (7); twice, its
    #   __host__ __device__ overload 18 (1); ceil_div 4, constexpr (1); Vec4 6-8 (3) -> 17
    #   (the plain host overload `inline int twice` is not device code: not counted)
    assert r["kernel"] == 17
    # host: scale 11-13 (3); ceil_div is already kernel code                         -> 3
    assert r["host"] == 3
    assert r["files"] == [f"{FIX}/cross_kernel.cu", CUH]


def test_python_helpers_from_an_imported_module():
    r = count_source(Source(f"{FIX}/cross_kernel.py", kernels=("norm_kernel",), host=("norm",)))
    # kernel: norm_kernel 9-14 (6: decorator, def, 4 body lines); row_sum in
    #   cross_helpers.py 6-8 (3: decorator, def, return); unused_here not reached      -> 9
    assert r["kernel"] == 9
    # host: norm 17-19 (3); grid_of in cross_helpers.py 16-17 (2); never_called not reached -> 5
    assert r["host"] == 5
    assert r["files"] == [f"{FIX}/cross_kernel.py", f"{FIX}/cross_helpers.py"]
    assert "tests/fixtures/loc/cross_helpers.py:row_sum" in r["kernel_units"]


# -- one kernel of each layer, counted by hand (the same rule everywhere) -----------------------
def test_triton_teaching_twin_counted_by_hand():
    r = count_source(Source("triton_src/vector_add.py", kernels=("vector_add_kernel",), host=()))
    # vector_add_kernel 19-25: 19 @triton.jit, 20 def, 21 offs, 22 mask, 23 x, 24 y, 25 store -> 7
    assert r["kernel"] == 7 and r["kernel_units"] == ["vector_add_kernel"]


def test_cuda_teaching_twin_counted_by_hand():
    r = count_source(Source("cuda_src/vector_add.cu", kernels=("vector_add_simple_kernel",), host=()))
    # vector_add.cu 11-17: template, __global__ ..., `i64 n) {`, stride, for, store, `}`  = 7
    # common.cuh (reached through #include "common.cuh"): to_float, its three overloads 31-33 = 3;
    #   from_float's three specialisations 36, 37, 38-40 (the declaration on 35 is no definition) = 5
    #   (none of the other helpers of common.cuh: the kernel does not call them)          -> 15
    assert r["kernel"] == 15
    assert sorted(r["kernel_units"]) == ["from_float", "to_float", "vector_add_simple_kernel"]
    assert r["files"] == ["cuda_src/vector_add.cu", "cuda_src/common.cuh"]


def test_cute_teaching_twin_counted_by_hand():
    r = count_source(Source("cutlass_src/vector_add.py", kernels=("VectorAddSimple.kernel",), host=()))
    # VectorAddSimple.kernel 23-33: 23 @cute.kernel, 24 def, 25 t, 26 b, 27 tv, 28 tiles, 29 gX..,
    #   30 index, 31 for, 32 if, 33 store                                                  -> 11
    # + the module's table lines it reads: 18 THREADS, PER_THREAD = ...; 19 TILE = ...      -> 13
    assert r["kernel"] == 13 and r["kernel_units"][0] == "VectorAddSimple.kernel"
    assert set(r["kernel_units"][1:]) == {"PER_THREAD", "TILE", "THREADS"}


# -- one language per layer row (issue 29) ------------------------------------------------------
import re as _re

# what marks a language in a counted line or in an import of a counted file
LANGUAGE_MARKERS = {
    "gluon": (r"triton\.experimental\.gluon", r"\bgluon\.jit\b", r"\bttgl\.", r"\bgl\.(?:constexpr|jit|arange)\b"),
    "triton": (r"^\s*import triton\b", r"^\s*from triton\b(?!\.experimental)", r"\btl\.\w", r"@triton\.jit"),
    "cute": (r"\bcutlass\b", r"\bcute\.\w", r"#\s*include\s*[<\"]cute/"),
    "tilelang": (r"\btilelang\b", r"\bT\.Kernel\b"),
    "cutile": (r"\bcuda\.tile\b", r"\bimport cuda\.tile\b"),
    "helion": (r"\bhelion\b", r"\bhl\.\w"),
}
# the languages a layer's counted sources may hold (its own; a DSL's host glue may import its base)
LAYER_LANGUAGES = {
    "triton": {"triton"}, "gluon": {"gluon", "triton"}, "cute": {"cute"}, "cuda": set(), "cupy": set(),
    "tilelang": {"tilelang"}, "cutile": {"cutile"}, "helion": {"helion", "triton"},
}


def _counted_text(impl):
    """(file, line number, text) of every counted line of ``impl`` and of every import line of the
    files it counts lines in."""
    from harness.loc import REPO_ROOT
    c = count_impl(impl, explain=True)
    per_file: dict[str, set[int]] = {}
    for f, first, last, *_ in c.get("spans", []):
        per_file.setdefault(f, set()).update(range(first, last + 1))
    for f, lines in per_file.items():
        text = (REPO_ROOT / f).read_text().splitlines()
        for k, line in enumerate(text, 1):
            code = line.split("//")[0] if not f.endswith(".py") else line.split("#")[0]   # no comments
            if k in lines or _re.match(r"(from|import)\s", line) or _re.match(r"\s*#\s*include", line):
                yield f, k, (line if _re.match(r"\s*#\s*include", line) else code)


def foreign_language(impl) -> list[str]:
    allowed = LAYER_LANGUAGES.get(impl.layer)
    if allowed is None:
        return []
    bad = []
    for f, k, text in _counted_text(impl):
        for lang, pats in LANGUAGE_MARKERS.items():
            if lang in allowed:
                continue
            if lang == "triton" and impl.layer in ("gluon", "helion"):
                continue
            if any(_re.search(p, text) for p in pats):
                bad.append(f"{f}:{k}: {lang}: {text.strip()[:80]}")
    return bad


def test_every_layer_row_holds_only_its_language():
    from harness import registry
    bad = {}
    for impl in registry.all_impls():
        if impl.layer in LAYER_LANGUAGES and impl.sources:
            found = foreign_language(impl)
            if found:
                bad[impl.id] = found[:3]
    assert not bad, bad


def test_language_check_catches_a_planted_foreign_kernel(tmp_path):
    """A Gluon kernel counted under triton, CuTe under cuda and Triton under cute all fail."""
    from harness.loc import REPO_ROOT
    d = REPO_ROOT / "tests" / "fixtures" / "loc"

    class Impl:
        role = "default"
        problem = "softmax"

        def __init__(self, layer, src):
            self.layer, self.id, self.sources = layer, f"{layer}:planted", (src,)

    gl = Impl("triton", Source(f"tests/fixtures/loc/lang_gluon.py", kernels=("k",), host=()))
    assert any("gluon" in b for b in foreign_language(gl))
    cu = Impl("cuda", Source(f"tests/fixtures/loc/lang_cute.cu", kernels=("k",), host=()))
    assert any("cute" in b for b in foreign_language(cu))
    tc = Impl("cute", Source(f"tests/fixtures/loc/lang_triton.py", kernels=("k",), host=()))
    assert any("triton" in b for b in foreign_language(tc))
    assert (d / "lang_gluon.py").is_file()


# -- the rule on a planted layer (issue 29): an unreachable kernel, a helper in another file, a
# table, a planner; in each layer's style --------------------------------------------------------
DEMO = "tests/fixtures/loc/demo_src"
PLAN_SRC = Source(f"{DEMO}/dispatch.py", kernels=(), host=("plan",))


class _Planted:
    def __init__(self, sources, role="default"):
        self.sources, self.role, self.id, self.problem, self.layer = tuple(sources), role, "demo:x", "softmax", "demo"


@pytest.mark.parametrize("style,variants,kernel,host", [
    # Triton: softmax_a_kernel 10-15 (6) + LOG2E (1) + helpers.row_max 6-8 (3); bind_launch 18-19
    ("triton", {"a": Source(f"{DEMO}/softmax_a.py", kernels=("softmax_a_kernel",), host=("bind_launch",)),
                "b": Source(f"{DEMO}/softmax_b.py", kernels=("softmax_b_kernel",), host=("bind_launch",))}, 10, 2),
    # CUDA C++: k_a 4-7 (4) + common.cuh twice 4-6 (3), not thrice; launch_a 9-11
    ("cuda", {"a": Source(f"{DEMO}/k_a.cu", kernels=("k_a",), host=("launch_a",)),
              "b": Source(f"{DEMO}/k_b.cu", kernels=("k_b",), host=())}, 7, 3),
    # CuTe DSL: SoftmaxA.kernel 11-14 (4) + cute_helpers.scale 5-7 (3); __call__ 16-18 (3) + THREADS
    ("cute", {"a": Source(f"{DEMO}/cute_a.py", kernels=("SoftmaxA.kernel",), host=("SoftmaxA.__call__",)),
              "b": Source(f"{DEMO}/cute_a.py", kernels=("SoftmaxB.kernel",), host=())}, 7, 4),
])
def test_planted_layer_counts_only_what_the_planner_reaches(style, variants, kernel, host):
    from harness import planned_sources
    from harness.loc import is_planner
    assert is_planner(f"{DEMO}/dispatch.py") and is_planner("cuda_src/dispatch_softmax.py")
    assert not is_planner(f"{DEMO}/softmax_a.py") and not is_planner("backends/dispatch.py")
    import importlib.util
    from harness.loc import REPO_ROOT
    spec = importlib.util.spec_from_file_location("demo_dispatch", REPO_ROOT / DEMO / "dispatch.py")
    planner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(planner)
    reach = planner.reachable("softmax")         # the planner says which variants it can choose
    impl = _Planted(planned_sources(variants, reach, [PLAN_SRC]))
    c = count_impl(impl, explain=True)
    # plan: plan() 14-15 (2) + TABLE 3-6 (4); UNUSED and reachable() are not reached
    assert (c["kernel"], c["host"], c["plan"]) == (kernel, host, 6), c
    # b is reachable nowhere: none of its lines; every span names its column and why
    b_file = variants["b"].path
    assert not any(sp[0] == b_file and ("b_kernel" in sp[4] or sp[4] in ("k_b", "SoftmaxB.kernel"))
                   for sp in c["spans"])
    assert {sp[3] for sp in c["spans"]} == {"kernel", "host", "plan"}
    assert any("variant 'a'" in sp[5] for sp in c["spans"])
    # every variant reachable: b's kernel counted on top (its own lines, the shared helper once)
    both = count_impl(_Planted(planned_sources(variants, ("a", "b"), [PLAN_SRC])))
    assert both["kernel"] > c["kernel"] and both["plan"] == 6
    # the twin (role simple) has no plan column
    twin = count_impl(_Planted([variants["a"], PLAN_SRC], role="simple"))
    assert twin["plan"] == 0 and twin["kernel"] == kernel and twin["host"] == host


def test_planned_sources_checks_its_arguments():
    from harness import planned_sources
    a = Source(f"{DEMO}/softmax_a.py", kernels=("softmax_a_kernel",), host=())
    with pytest.raises(ValueError, match="'c'"):
        planned_sources({"a": a}, ("a", "c"))
    with pytest.raises(TypeError, match="variants"):
        planned_sources([a], ("a",))
    with pytest.raises(ValueError, match="reachable"):
        planned_sources({"a": a}, ())
    assert [s.variant for s in planned_sources({"a": a}, "a", [PLAN_SRC])] == ["a", None]


#: layer -> its planner's package (the CuPy rows plan with the CUDA C++ planner)
PLANNERS = {"cuda": "cuda_src", "cupy": "cuda_src", "triton": "triton_src", "gluon": "gluon_src",
            "cute": "cutlass_src", "helion": "helion_src", "tilelang": "tilelang_src", "cutile": "cutile_src"}


def _planner(layer):
    import importlib
    try:
        return importlib.import_module(f"{PLANNERS[layer]}.dispatch")
    except ImportError as e:
        pytest.skip(f"{layer}: its planner does not import here ({e})")


def test_defaults_count_exactly_the_variants_their_planner_chooses():
    """Every kernel layer's default derives its Sources from its planner (harness.planned): the
    variants ``plan`` answers over every case of every suite, no more, no fewer -- no list by hand."""
    from harness import problems, registry
    from harness.loc_plan import PlannedSources
    from harness.meta_inputs import case_facts
    from harness.problems import SUITES
    checked = 0
    for impl in registry.all_impls():
        if impl.role != "default" or impl.layer not in PLANNERS:
            continue
        d = _planner(impl.layer)
        assert isinstance(impl.sources, PlannedSources), impl.id
        chosen = {d.plan(impl.problem, case_facts(c)).variant for s in SUITES for c in problems.get(impl.problem).cases(s)}
        assert {s.variant for s in impl.sources if s.variant} == chosen, impl.id
        checked += 1
    assert checked >= 3 * len(PLANNERS)   # every layer's three problems, attention where it has one


def _planted(layer, planner_file, extra=(), planted_word=None, problem="softmax"):
    """count_impl of a default whose planner is ``planner_file`` (tests/fixtures/loc/planted/)
    wrapping ``layer``'s own plan; ``extra``: Sources every plan adds; ``planted_word``: a
    variant word added to the layer's VARIANTS that no plan answers."""
    import importlib.util
    import sys
    from types import SimpleNamespace

    from harness import planned
    d = _planner(layer)
    path = REPO_ROOT / "tests/fixtures/loc/planted" / planner_file
    name = f"kl_planted_{layer}_{path.stem}_{len(sys.modules)}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    variants = {p: dict(w) for p, w in d.VARIANTS.items()}
    if planted_word:
        variants[problem][planted_word] = (Source("tests/fixtures/loc/planted/kernel_dead.py",
                                                  kernels=("dead_kernel",), host=("bind_dead",)),)
    mod.LAYER_PLAN, mod.EXTRA, mod.VARIANTS = d.plan, tuple(extra), variants
    impl = SimpleNamespace(layer=layer, role="default", problem=problem, id=f"{layer}:planted",
                           sources=planned(mod.plan, problem))
    c = count_impl(impl, explain=True)
    return c["kernel"], c["host"], c["plan"]


def _kernel(file):
    return Source(f"tests/fixtures/loc/planted/{file}", kernels=("planted_kernel",), host=("bind_planted",))


@pytest.mark.parametrize("layer", sorted(PLANNERS))
def test_planted_dead_code_counts_nowhere_and_a_used_line_once(layer):
    """On each layer's own planner: a kernel no plan selects and a branch never taken leave the
    count as it was; one more line that runs -- in the planner, a kernel, a binding -- adds one."""
    base = _planted(layer, "plan_base.py", [_kernel("kernel_base.py")])
    assert base[2] > 0 and base[0] > 0, base
    assert _planted(layer, "plan_base.py", [_kernel("kernel_base.py")], planted_word="planted") == base
    assert _planted(layer, "plan_dead.py", [_kernel("kernel_base.py")]) == base
    k, h, p = base
    assert _planted(layer, "plan_used.py", [_kernel("kernel_base.py")]) == (k, h, p + 1)
    assert _planted(layer, "plan_base.py", [_kernel("kernel_more.py")]) == (k + 1, h, p)
    assert _planted(layer, "plan_base.py", [_kernel("host_more.py")]) == (k, h + 1, p)


def test_no_default_counts_another_variants_kernel_as_host():
    """The kernels other ids of the layer name are never host lines of its default (TileLang's
    16-byte softmax kernels, built in the same adapter function as the default's)."""
    from harness import registry
    from harness.loc import explain_text
    text = explain_text(registry.get("softmax", "tilelang:softmax"))
    assert "_vec_kernel" not in text, text


def test_interpreter_and_compile_plumbing_count_nowhere():
    """Code marked with kltools.loc_marks -- run only under the CPU interpreter, or compiling and
    keeping compiled kernels -- and the branches the interpreter flag guards count in no column."""
    from harness import registry
    from harness.loc import explain_text
    tri = explain_text(registry.get("softmax", "triton:softmax"))
    assert "interpret_concurrently" not in tri and "MAX_SPIN_INTERPRETER" not in tri
    assert "interpreting" in tri   # the flag itself runs on a GPU too (it answers False)
    cute = explain_text(registry.get("softmax", "cute:softmax"))
    assert "compile_kernel" not in cute and "_load_from_disk" not in cute
    assert "_cached_compile" not in explain_text(registry.get("softmax", "cupy:softmax"))


def test_the_cuda_launcher_counts_for_cuda_as_cupys_for_cupy():
    from harness import registry
    from harness.loc import explain_text
    assert "cuda_src/bindings.cpp" in explain_text(registry.get("softmax", "cuda:softmax"))
    assert "backends/cupy_layer.py" in explain_text(registry.get("softmax", "cupy:softmax"))




def test_explain_lists_every_counted_line_with_its_reason():
    """``loc IMPL --explain --lines``: every counted line is printed, under the span (and reason)
    that counts it, and the printed lines add up to the columns."""
    from harness import registry
    from harness.loc import explain_text
    impl = registry.get("softmax", "cutile:softmax")
    c = count_impl(impl, explain=True)
    text = explain_text(impl, lines=True)
    counted = [ln for ln in text.splitlines() if ln.startswith("      ")]
    assert len(counted) == c["kernel"] + c["host"] + c["plan"]
    assert "plan() over every suite's case: online" in text
    assert any("def softmax_online_kernel" in ln for ln in counted)


def test_import_time_code_counts_as_no_planner_line(tmp_path, monkeypatch):
    """A module the planner imports on its first call runs its top level once per process: those
    lines (and what they call) are no planner line, so the plan column is the same whether the
    module was imported before the trace or during it."""
    import importlib
    import sys

    from harness import loc_plan
    (tmp_path / "kl_planted_lazy.py").write_text(
        "def helper():\n"
        "    return 1\n"
        "VALUE = helper()\n"
        "def plan():\n"
        "    return VALUE + 1\n")
    monkeypatch.setattr(loc_plan, "REPO_ROOT", tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "kl_planted_lazy", raising=False)
    run = lambda: importlib.import_module("kl_planted_lazy").plan()   # noqa: E731
    out, first = loc_plan._traced(run)        # imported inside the trace
    _, again = loc_plan._traced(run)          # imported before it
    f = (tmp_path / "kl_planted_lazy.py").resolve()
    assert out == 2
    assert first == again == {f: {5}}


def test_a_parameter_named_like_a_function_is_not_that_function(tmp_path):
    """A name a function binds (a parameter, an assignment) is its own: ``pack(plan)`` reaches
    no module function ``plan``; a function passed as an argument is counted where it is named
    (the caller's argument, a default value), not through the callee's parameter name."""
    f = tmp_path / "launch.py"
    f.write_text(
        "def plan(problem):\n"                      # 1  never called: the planner
        "    return problem * 2\n"                  # 2
        "def fn(x):\n"                              # 3  never called: shares the parameter's name
        "    return x\n"                            # 4
        "def helper(x):\n"                          # 5  passed as fn: counts
        "    return x + 1\n"                        # 6
        "def fallback(x):\n"                        # 7  a default value: counts
        "    return x - 1\n"                        # 8
        "def pack(plan, fn, cb=fallback):\n"        # 9  counts
        "    def inner(v):\n"                       # 10
        "        return fn(v) + cb(v)\n"            # 11
        "    return inner(plan.args)\n"             # 12
        "def launch(plan):\n"                       # 13 host
        "    fn = helper\n"                         # 14
        "    return pack(plan, fn)\n")              # 15
    r = count_source(Source(str(f), kernels=(), host=("launch",)), root=tmp_path)
    # launch 13-15 (3) + helper 5-6 (2) + pack 9-12 (4) + fallback 7-8 (2); plan and fn: none -> 11
    assert sorted(r["host_units"]) == ["fallback", "helper", "launch", "pack"]
    assert r["host"] == 11


def test_the_attention_default_counts_no_other_problems_planner():
    """cuda:attention and cupy:attention derive their Sources from ``dispatch_attention.plan``:
    their columns hold no line of the other problems' planners (reached before only through the
    launcher's parameter named ``plan``)."""
    from harness import registry
    from harness.loc import REPO_ROOT
    registry.load_backends()
    others = {REPO_ROOT / f"cuda_src/dispatch_{p}.py" for p in ("vector_add", "softmax", "gemm")}
    ids = {"cuda:attention", "cupy:attention"}
    impls = [i for i in registry.all_impls() + registry.candidates() if i.id in ids]
    assert {i.id for i in impls} == ids
    for impl in impls:
        c = count_impl(impl, explain=True)
        bad = [sp for sp in c["spans"] if (REPO_ROOT / sp[0]).resolve() in others or sp[4].endswith(":plan")]
        assert not bad and c["plan"] > 0, (impl.id, bad)
