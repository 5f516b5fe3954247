"""The same word for the same algorithm in every layer (docs/DESIGN.md, "Algorithm words").

DESIGN's word table is the one list: every registered id of a kernel layer is ``<problem>`` (the
default), ``<problem>_simple`` (the teaching twin) or ``<problem>_<word>`` with a word of that
table, and the kernel of each twin and variant lives in a file named after its id
(``<layer>_src/<problem>_<word>.py|.cu``; the twin's in ``<problem>.py|.cu``).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from harness import registry

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "DESIGN.md"

#: the words issue 29 names (the GEMM and softmax algorithms every layer shares)
REQUIRED = ("rows", "block", "smem", "cluster", "split", "online", "tiled", "splitk", "tma", "ws", "pingpong")
#: layers whose implementations are not kernels of their own (the eager baseline, libraries)
NOT_KERNEL_LAYERS = ("torch", "quack", "liger")


def design_words() -> dict[str, dict[str, str]]:
    """{problem: {word: meaning}} from DESIGN's table of algorithm words (the rows
    ``| <problem> | `<word>` | <meaning> |`` after the line that introduces the table)."""
    text = DESIGN.read_text()
    start = text.index("Algorithm words")
    words: dict[str, dict[str, str]] = {}
    for line in text[start:].splitlines()[1:]:
        if words and not line.startswith("|"):
            break
        m = re.match(r"\|\s*([^|`]+?)\s*\|\s*`([a-z0-9]+)`\s*\|\s*(.*?)\s*\|\s*$", line)
        if m:
            problem = m.group(1).strip().lower().replace(" ", "_")
            problem = {"gemm": "gemm_epilogue"}.get(problem, problem)
            words.setdefault(problem, {})[m.group(2)] = m.group(3)
    return words


def _kernel_impls():
    """The built-in layers' implementations: registered by an adapter of ``backends.ADAPTERS`` (a
    plugin or a selftest's planted bug, loaded by an earlier test of the same process, is not one)."""
    import backends
    adapters = {f"backends.{m}" for m in backends.ADAPTERS}
    return [i for i in registry.all_impls() if i.origin in adapters and i.layer not in NOT_KERNEL_LAYERS
            and i.role != "library"]


def test_only_the_built_in_layers_are_checked():
    """A plugin's implementation in the registry (as after a plugin or selftest test) is not held to
    the built-in layers' naming rule, and the built-in ones still are."""
    from harness import register

    @register(problem="softmax", layer="plantedlayer", name="softmax_not_a_word")
    def _prepare(case, inputs, out):  # pragma: no cover - never launched
        raise AssertionError
    try:
        ids = {i.id for i in _kernel_impls()}
        assert "plantedlayer:softmax_not_a_word" not in ids
        assert any(i.startswith("cuda:") for i in ids) and any(i.startswith("triton:") for i in ids)
    finally:
        registry._IMPLS.pop("softmax/plantedlayer:softmax_not_a_word", None)


def test_design_word_list_is_complete_and_says_what_each_word_means():
    words = design_words()
    assert set(words) == {"vector_add", "softmax", "gemm_epilogue", "attention"}, sorted(words)
    every = {w for ws in words.values() for w in ws}
    missing = [w for w in REQUIRED if w not in every]
    assert not missing, f"docs/DESIGN.md's word table lacks {missing}"
    for problem, ws in words.items():
        for w, meaning in ws.items():
            assert len(meaning.split()) >= 4, f"{problem} / {w}: the table says too little: {meaning!r}"
    assert "persist" not in every   # a property of a variant, not an algorithm (DESIGN says why)


def test_the_word_table_parser_sees_a_planted_row(tmp_path, monkeypatch):
    """The parser reads the table it is given (a planted extra word is found, a broken row is not)."""
    text = DESIGN.read_text()
    planted = text.replace("| GEMM | `tiled` |", "| GEMM | `zigzag` | a planted word, four words at least |\n| GEMM | `tiled` |", 1)
    assert planted != text
    f = tmp_path / "DESIGN.md"
    f.write_text(planted)
    monkeypatch.setattr(sys.modules[__name__], "DESIGN", f)
    assert "zigzag" in design_words()["gemm_epilogue"]


def test_every_registered_id_is_a_word_of_the_table():
    """``<layer>:<problem>``, ``<problem>_simple`` or ``<problem>_<word>`` with a word of DESIGN's
    table for that problem; the role follows from the name."""
    words = design_words()
    bad = []
    for i in _kernel_impls():
        if i.name == i.problem:
            ok = i.role == "default"
        elif i.name == f"{i.problem}_simple":
            ok = i.role == "simple"
        else:
            suffix = i.name[len(i.problem) + 1:] if i.name.startswith(i.problem + "_") else None
            ok = i.role == "variant" and suffix in words.get(i.problem, {})
        if not ok:
            bad.append(f"{i.id} ({i.role})")
    assert not bad, ("ids whose suffix is no word of docs/DESIGN.md's table for their problem "
                     "(rename the id, or add the word with its meaning): " + ", ".join(sorted(bad)))


def test_each_twin_and_variant_lives_in_a_file_named_after_it():
    """The kernel of ``<layer>:<problem>_<word>`` is in ``<problem>_<word>.py|.cu`` of the layer's
    sources (CuPy compiles cuda_src's files: the same names), the twin's in ``<problem>.py|.cu``."""
    bad = []
    for i in _kernel_impls():
        if i.role == "default":
            continue
        stem = i.problem if i.role == "simple" else i.name
        kernel_files = [s.path for s in i.sources if Path(s.path).parts[0].endswith("_src")]
        if not any(Path(p).stem == stem for p in kernel_files):
            bad.append(f"{i.id} -> {', '.join(sorted(set(kernel_files))) or 'no kernel source'}")
    assert not bad, ("kernels not in a file named after their id (one file per id, "
                     "docs/DESIGN.md): " + "; ".join(sorted(bad)))


@pytest.mark.parametrize("name,ok", [("softmax_smem", True), ("softmax_persist", False),
                                     ("softmax_cluster2", False), ("gemm_epilogue_splitk", False)])
def test_the_id_rule_itself(name, ok):
    """The rule on planted names: a word of softmax's table passes; a property, a number glued to
    a word, or another problem's word fails."""
    words = design_words()["softmax"]
    suffix = name[len("softmax") + 1:] if name.startswith("softmax_") else None
    assert (suffix in words) is ok
