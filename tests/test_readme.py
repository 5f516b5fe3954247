"""The README's figures come from committed results, through `python -m harness report`."""
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
