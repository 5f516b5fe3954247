"""The README's figures come from committed results, through `python -m harness report`."""
import os
import re
from pathlib import Path

from harness import report_cmd

ROOT = Path(__file__).resolve().parent.parent


def test_every_readme_figure_is_generated_from_its_json():
    bad = report_cmd.readme_problems((ROOT / "README.md").read_text())
    assert not bad, "\n".join(bad)


def test_a_typed_or_stale_figure_is_caught():
    text = (ROOT / "README.md").read_text()
    blocks = list(report_cmd.BLOCK.finditer(text))
    assert blocks, "the README quotes no generated block"
    # a figure typed into the prose
    assert report_cmd.readme_problems(text + "\nTriton reaches 97.3 % of copy.\n")
    # a figure edited inside a block
    m = next(b for b in blocks if "%" in b.group("body"))
    body = m.group("body")
    i = body.index("%")
    j = i - 1
    while body[j].isdigit() or body[j] == ".":
        j -= 1
    tampered = text.replace(body, body[:j + 1] + "99.9" + body[i:], 1)
    assert any("differs" in p for p in report_cmd.readme_problems(tampered))


def test_readme_is_short_and_ci_runs_its_test_command():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250, "the README is for users: at most 250 lines"
    fences = re.findall(r"```bash\n(.*?)```", text, re.S)
    commands = [ln for block in fences for ln in block.splitlines() if ln.startswith("python3 -m pip install")]
    test_cmd = next((c for c in commands if "pytest" in c), None)
    assert test_cmd, "the README shows no test command"
    assert test_cmd in (ROOT / ".ci" / "run").read_text().splitlines(), \
        "CI must run the README's test command verbatim (.ci/run)"


CITATION = re.compile(r'docs/performance\.md,\s*"([^"]+)"')
OLD_NOTES = "perf" + "-notes"          # the dated notebook docs/performance.md replaced
SKIP_DIRS = {".git", ".device", "results", "build", "dist", "node_modules", "__pycache__"}


def _sources():
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".") and "venv" not in d]
        for f in filenames:
            if f.endswith((".py", ".cu", ".cuh", ".h")):
                yield Path(dirpath) / f


def test_code_cites_sections_of_performance_md_that_exist():
    headings = {m.group(1).strip() for m in re.finditer(r"^#{2,3} (.+)$",
                                                        (ROOT / "docs" / "performance.md").read_text(), re.M)}
    bad = []
    for path in _sources():
        rel = path.relative_to(ROOT)
        text = path.read_text(errors="replace")
        for m in CITATION.finditer(text):
            if m.group(1) not in headings:
                bad.append(f"{rel}: cites \"{m.group(1)}\", not a section of docs/performance.md")
        if OLD_NOTES in text:
            bad.append(f"{rel}: cites the replaced notebook ({OLD_NOTES}); cite a docs/performance.md section")
    assert not bad, "\n".join(bad)
