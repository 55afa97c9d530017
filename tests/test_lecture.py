"""docs/lecture.md, the lecture, and docs/lecture.ipynb, the notebook made from it (docs/lecture_tool.py):
  - the page runs as written at its CHECK size: its asserts are each step's claims; each block prints lines of the
    shape its output block shows, each quoted number evaluates to one of the shape the page shows, every figure
    the page shows is committed and is one its code draws;
  - the page is current: each output block, quoted number and figure is the one its code made (the keys the tool
    wrote match the code, the project files it imports, outputs and figures as they are now), and an edit of any of
    them is caught; the tool's rewrite gives the page back from its own outputs and numbers;
  - the notebook is current (byte for byte what the tool makes from the page) and holds the page's code;
  - where nbclient and ipykernel are installed, the notebook runs top to bottom in a kernel started in docs/."""
import importlib.util
import json
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def load_tool():
    spec = importlib.util.spec_from_file_location("lecture_tool", DOCS / "lecture_tool.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tool = load_tool()


def page() -> str:
    return (DOCS / "lecture.md").read_text()


committed_figure = tool.committed_figure


def shape(line: str) -> str:
    """A printed line with its numbers blanked and its spacing collapsed: what a size does not change."""
    line = re.sub(r"[-+]?\d+(,\d{3})*(\.\d*)?(e[-+]?\d+)?", "#", line)
    return re.sub(r"\s+", " ", line).replace("[ ", "[").replace(" ]", "]").strip()


def offline_corpora(monkeypatch, tmp_path=None) -> bool:
    """tiny-shakespeare without a download (tests never need the network): the offline copy BORN_BIASED_DATA
    points at, where it holds one; else, given tmp_path, the repository's own docs standing in for it, under its
    name and with their own sha256 (at CHECK size the page checks its claims, which hold on any text, and its lines'
    shapes). Whether the real text is at hand."""
    offline = os.environ.get("BORN_BIASED_DATA")
    if offline and (Path(offline) / "tinyshakespeare.txt").is_file():
        return True
    if tmp_path is not None:
        import hashlib
        import data
        text = "\n\n".join((DOCS / name).read_text() for name in ("reproduce.md", "seedprint.md", "sinks.md"))
        (tmp_path / "corpora").mkdir()
        (tmp_path / "corpora" / "tinyshakespeare.txt").write_text(text)
        sha = hashlib.sha256(text.encode()).hexdigest()
        monkeypatch.setitem(data.CORPORA, "shakespeare", dict(data.CORPORA["shakespeare"], sha256=sha))
        monkeypatch.setenv("BORN_BIASED_DATA", str(tmp_path / "corpora"))
    return False


def python_fences(text: str, folded: bool) -> list:
    """The page's python blocks, found independently of the tool: those inside a <details> answer, or the others."""
    found, depth = [], 0
    for piece in re.split(r"(<details>|</details>|^```python\n.*?^```$)", text, flags=re.S | re.M):
        if piece == "<details>":
            depth += 1
        elif piece == "</details>":
            depth -= 1
        elif piece and piece.startswith("```python\n") and (depth > 0) == folded:
            found.append(piece[len("```python\n"):-3])
    return found


def test_the_lecture_runs_at_check_size(tmp_path, monkeypatch):
    text = page()
    parts = tool.parse(text)
    offline_corpora(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)
    run = tool.run_page(text, check=True)                # the page's asserts: each step's claims, at CHECK size
    for n, i in enumerate(tool.blocks(parts)):
        got = [shape(line) for line in tool.shown(run["printed"][i]).splitlines()]
        following = parts[i + 2] if i + 2 < len(parts) and parts[i + 2][0] == "output" else None
        want = [shape(line) for line in following[2].splitlines()] if following else []
        assert got == want, f"python block {n + 1} prints {got}, its output block shows {want}"
        on_page = [m.group(2) for _, m in tool.quoted(parts, i)]
        values = [value for _, value in run["values"][i]]
        assert [shape(v) for v in values] == [shape(v) for v in on_page], (n + 1, values, on_page)
    figures = re.findall(r"!\[[^]]*\]\(lecture/([^)]+)\)", text)
    drawn = [name for i in tool.blocks(parts) for name in tool.figure_names(parts[i][1])]
    assert figures and set(figures) - {tool.MAP} == set(drawn)
    for name in figures:
        assert (DOCS / "lecture" / name).is_file(), f"docs/lecture/{name} is not committed"
    for name in drawn:
        assert (tmp_path / "out" / "lecture" / name).is_file(), f"the lecture's code does not draw {name}"


def test_the_lecture_is_current():
    """Every output block, quoted number and figure is the one the page's code made at the lecture's size."""
    problems = tool.stale(page(), committed_figure)
    assert not problems, "; ".join(problems) + ". Run `python docs/lecture_tool.py` (a full run of the page)"


def test_an_edit_the_outputs_were_not_made_from_is_caught():
    """The currency check fails on each kind of edit a lecturer could make without running the tool."""
    text = page()
    first_code = python_fences(text, folded=False)[1]        # Step 1's block
    edited_code = text.replace(first_code, first_code.replace("manual_seed(1234)", "manual_seed(1235)"), 1)
    output = re.search(r"<!-- output [0-9a-f]+ -->\n```\n(seed 42: token )(\d+)", text)
    edited_output = text[:output.start(2)] + str(int(output.group(2)) + 1) + text[output.end(2):]
    value = tool.VALUE.search(text)
    edited_value = text[:value.start(2)] + value.group(2) + "0" + text[value.end(2):]
    figure = lambda name: committed_figure(name) + (b"\0" if name == "step2_mlp0.png" else b"")
    assert not tool.stale(text, committed_figure)
    for edited, figures in ((edited_code, committed_figure), (edited_output, committed_figure),
                            (edited_value, committed_figure), (text, figure)):
        assert tool.stale(edited, figures), "an edit went unnoticed"


def test_an_edit_of_a_project_file_the_page_runs_is_caught(tmp_path):
    """The page's numbers come from the project's code as much as from its own: its keys cover the files its blocks
    import and those these import in turn (read here from the imports the blocks and the files spell out)."""
    text = page()
    direct = set(re.findall(r"^(?:import|from) (\w+)", "".join(python_fences(text, False) + python_fences(text, True)),
                            flags=re.M))
    assert {"probe", "seedprint", "theory", "init", "model", "studies"} <= direct
    names = tool.project_sources(text)
    assert {"probe.py", "seedprint.py", "theory.py", "init.py", "model.py", "studies/edits.py"} <= set(names)
    assert "common.py" in names                                  # through probe.py, which the page imports
    assert "studies/gpu_check.py" not in names                   # nothing the page runs imports it
    for name in names:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    assert tool.stale(text, committed_figure, root=tmp_path) == tool.stale(text, committed_figure)
    with open(tmp_path / "theory.py", "a") as fh:
        fh.write("\n# an edit that could move a number\n")
    edited = tool.stale(text, committed_figure, root=tmp_path)
    assert any("numbers quoted" in problem for problem in edited) and any("python block" in p for p in edited)


def test_rewriting_the_page_from_its_own_outputs_and_numbers_gives_it_back():
    """rewrite (what a full run ends with) puts each output block and quoted number back where it was, under keys
    the currency check accepts: the page's outputs and numbers, read off the page, in; the page, byte for byte, out
    (its keys too, where the page is current, as another test requires)."""
    text = page()
    parts = tool.parse(text)
    printed, values = {}, {}
    for i in tool.blocks(parts):
        following = parts[i + 2] if i + 2 < len(parts) and parts[i + 2][0] == "output" else None
        printed[i] = following[2] if following else ""
        values[i] = [(m.group(1), m.group(2)) for _, m in tool.quoted(parts, i)]
    made = tool.rewrite(text, printed, values, committed_figure)
    keys = re.compile(r"(<!-- (?:output|values) )[0-9a-f]+( -->)")
    assert keys.sub(r"\1KEY\2", made) == keys.sub(r"\1KEY\2", text)
    assert tool.stale(made, committed_figure) == []
    assert made == text


def test_the_notebook_is_current_and_holds_the_pages_code():
    text = page()
    made = tool.notebook(text, committed_figure(tool.MAP))
    assert (DOCS / "lecture.ipynb").read_text() == made, "run `python docs/lecture_tool.py --notebook`"
    nb = json.loads(made)
    assert nb["nbformat"] == 4 and nb["nbformat_minor"] >= 5
    ids = [cell["id"] for cell in nb["cells"]]
    assert len(set(ids)) == len(ids) and all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", i) for i in ids)
    code = ["".join(cell["source"]) for cell in nb["cells"] if cell["cell_type"] == "code"]
    # the set-up cell, then every python block outside a folded answer, in order; the folded ones stay markdown
    pin = re.search(r"^torch==([\d.]+)$", (ROOT / "requirements.txt").read_text(), flags=re.M).group(1)
    assert "requirements.txt" in code[0] and f"torch=={pin}" in code[0]     # the pin the set-up cell installs,
    assert f"torch {pin}, pinned" in text and f"torch {pin}, pinned" in made  # and the one the page and notebook name
    assert code[1:] == [block.rstrip("\n") for block in python_fences(text, folded=False)]
    markdown = "\n".join("".join(cell["source"]) for cell in nb["cells"] if cell["cell_type"] == "markdown")
    for block in python_fences(text, folded=True):
        assert block in markdown
    assert not tool.VALUE.search(markdown) and "<!-- output" not in markdown   # values shown as values
    assert "attachment:map.png" in markdown


def test_the_notebook_runs_top_to_bottom_in_a_kernel_started_in_docs(tmp_path, monkeypatch):
    """At CHECK size, in a copy of the repository's code (so that its outputs land in the copy)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    for path in [*ROOT.glob("*.py"), ROOT / "studies", ROOT / "requirements.txt"]:
        (tmp_path / path.name).symlink_to(path)
    (tmp_path / "docs").mkdir()
    nb = nbformat.reads((DOCS / "lecture.ipynb").read_text(), as_version=4)
    first = next(cell for cell in nb.cells if cell.cell_type == "code" and "CHECK = False" in cell.source)
    first.source = first.source.replace("CHECK = False", "CHECK = True", 1)
    if not offline_corpora(monkeypatch):                 # the kernel is another process: no stand-in reaches it
        pytest.skip("the notebook's kernel needs tiny-shakespeare offline (BORN_BIASED_DATA)")
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path / "docs")}})
    client.execute()                                    # raises CellExecutionError on the first failing cell
    printed = "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs)
    assert "seed 42: token" in printed and "trained model vs its own init: RELATED" in printed
    for cell in nb.cells:                               # each figure inline, under the cell that draws it
        if cell.cell_type == "code" and "savefig" in cell.source:
            kinds = [(out.output_type, sorted(out.get("data", {}))) for out in cell.outputs]
            assert any("image/png" in out.get("data", {}) for out in cell.outputs), (cell.source[:60], kinds)
