"""A hand-in holding the reference's code is flagged for the instructor (checker/likeness.py)."""
import shutil

from checker import likeness
from conftest import ROOT


def test_the_reference_is_flagged_in_every_region_and_a_starter_in_none():
    for folder in ("lab1_baseline", "lab2_ddp", "lab3_sharding"):
        ref = ROOT / "solutions" / folder
        regions = [(f, w) for f in ref.rglob("*.py") for w, code in likeness.regions(f.read_text())
                   if len(likeness.tokens(code)) >= likeness.MIN_TOKENS]
        assert regions and len(likeness.copied(ref, ref)) == len({(f.stem, w) for f, w in regions}), folder
        assert likeness.copied(ROOT / "labs" / folder, ref) == [], folder  # the starter holds none of it


def test_comments_and_layout_do_not_hide_a_copy_and_a_rewrite_is_not_one(tmp_path):
    ref = ROOT / "solutions" / "lab1_baseline"
    mine = tmp_path / "lab1_baseline"
    shutil.copytree(ROOT / "labs" / "lab1_baseline", mine)
    code = next(code for w, code in likeness.regions((ref / "state.py").read_text()) if w == "save_checkpoint")
    body = "\n".join("        " + line + "  # mine, honest" for line in code.splitlines())
    step = mine / "state.py"
    text = step.read_text()
    start = text.index("    raise NotImplementedError(", text.index("def save_checkpoint"))
    end = text.index("\n", text.index(")\n", start) + 1)
    step.write_text(text[:start] + "    if True:\n" + body + text[end:])
    assert likeness.copied(mine, ref) == ["state.save_checkpoint"]
    step.write_text(step.read_text().replace("torch.save", "torch . save").replace("model", "net"))
    assert likeness.copied(mine, ref) == []  # renamed: not the reference's text (the flag is for copies, not style)
