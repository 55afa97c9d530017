"""docs/lecture.md, the lecture, and docs/lecture.ipynb, the notebook made from it (docs/lecture_tool.py):
  - the page runs as written at its CHECK size: its asserts are each step's claims; each block prints lines of the
    shape its output block shows, each quoted number evaluates to one of the shape the page shows, every figure
    the page shows is committed and is one its code draws;
  - the page is current: each output block, quoted number and figure is the one its code made (the keys the tool
    wrote match the code, the project files it imports, outputs and figures as they are now), and an edit of any of
    them is caught; the tool's rewrite gives the page back from its own outputs and numbers;
  - the notebook is current (byte for byte what the tool makes from the page) and holds the page's code, answers
    and solutions as code cells hidden by Jupyter's convention, their prose folded; its set-up cell finds a clone,
    unpacks an upload, reruns and never installs over a torch that is there;
  - each write-the-code exercise checks itself: unfilled it says so, wrong it stops with a message, and its solution
    prints the reference beside it;
  - the class fits: the timing table leaves at least 10 minutes of slack, and the after-class reading is marked;
  - where nbclient and ipykernel are installed, the notebook runs top to bottom in a kernel started in docs/."""
import ast
import contextlib
import importlib.util
import io
import json
import os
import re
import sys
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
    """The page's python blocks inside a <details> answer, or the others (page_blocks, below)."""
    return [code for code, inside in page_blocks(text) if inside == folded]


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


def page_blocks(text: str) -> list:
    """(code, folded) of every python block of the page, in order, found independently of the tool."""
    found, depth = [], 0
    for piece in re.split(r"(<details>|</details>|^```python\n.*?^```$)", text, flags=re.S | re.M):
        if piece == "<details>":
            depth += 1
        elif piece == "</details>":
            depth -= 1
        elif piece and piece.startswith("```python\n"):
            found.append((piece[len("```python\n"):-3], depth > 0))
    return found


def test_the_notebook_is_current_and_holds_the_pages_code():
    text = page()
    made = tool.notebook(text, committed_figure(tool.MAP))
    assert (DOCS / "lecture.ipynb").read_text() == made, "run `python docs/lecture_tool.py --notebook`"
    nb = json.loads(made)
    assert nb["nbformat"] == 4 and nb["nbformat_minor"] >= 5
    ids = [cell["id"] for cell in nb["cells"]]
    assert len(set(ids)) == len(ids) and all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", i) for i in ids)
    code = [cell for cell in nb["cells"] if cell["cell_type"] == "code"]
    # the set-up cell, then every python block of the page, in order: an answer's or a solution's is a code cell
    # too, runnable where it stands, its source hidden by Jupyter's own convention; the others are shown
    blocks = page_blocks(text)
    assert ["".join(cell["source"]) for cell in code[1:]] == [block.rstrip("\n") for block, _ in blocks]
    hidden = [cell["metadata"].get("jupyter", {}).get("source_hidden", False) for cell in code]
    assert hidden == [False] + [folded for _, folded in blocks]
    assert any(folded for _, folded in blocks) and not all(folded for _, folded in blocks)
    markdown = ["".join(cell["source"]) for cell in nb["cells"] if cell["cell_type"] == "markdown"]
    assert not any(tool.VALUE.search(m) or "<!-- output" in m for m in markdown)   # values shown as values
    assert any("attachment:map.png" in m for m in markdown)
    assert not any("```python" in m for m in markdown)            # no code left to copy out of the prose
    # an answer's prose stays folded: every <details> opens and closes in its cell, and the text the page folds
    # is, in the notebook, inside a fold
    for m in markdown:
        assert m.count("<details>") == m.count("</details>"), m[:80]
    folded_prose = [piece for fold in re.findall(r"<details>.*?</details>", text, flags=re.S)
                    for piece in re.split(r"^```python\n.*?^```\n|^<!-- output [0-9a-f]+ -->\n```\n.*?^```\n",
                                          fold, flags=re.S | re.M)]
    sentences = [line for piece in folded_prose for line in tool.VALUE.sub(lambda m: m.group(2), piece).splitlines()
                 if len(line) > 40]
    assert sentences
    inside = "\n".join(fold for m in markdown for fold in re.findall(r"<details>.*?</details>", m, flags=re.S))
    outside = "\n".join(re.sub(r"<details>.*?</details>", "", m, flags=re.S) for m in markdown)
    for line in sentences:
        assert line in inside and line not in outside, line


def setup_cell() -> str:
    """The notebook's set-up cell as plain Python: its one IPython line (%matplotlib) left out."""
    nb = json.loads((DOCS / "lecture.ipynb").read_text())
    cell = "".join(next(c for c in nb["cells"] if c["cell_type"] == "code")["source"])
    assert "%matplotlib inline" in cell
    return "\n".join(line for line in cell.splitlines() if not line.startswith("%"))


def fake_repository(folder: Path, requirements: str) -> Path:
    (folder / "docs").mkdir(parents=True)
    (folder / "model.py").write_text("")
    (folder / "requirements.txt").write_text(requirements)
    return folder


def test_the_setup_cell_finds_a_clone_unpacks_an_upload_reruns_and_keeps_a_working_torch(tmp_path, monkeypatch):
    """Run as Jupyter would run it (pip replaced by a recorder): in a clone's docs/ it finds the root and installs
    nothing present; a missing requirement is installed, a torch already there never is (where torch is missing,
    requirements.txt's pin is); with no copy at hand it says in one line what to upload; an uploaded zip is unpacked
    once, and every case runs again without failing."""
    import importlib.util
    import subprocess
    import zipfile
    code = setup_cell()
    assert "http" not in code and "git clone" not in code.replace("or git clone it here", "")   # no address invented
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda args, **kw: calls.append(list(args)))
    monkeypatch.setattr(sys, "path", list(sys.path))

    def run_cell(cwd):
        monkeypatch.chdir(cwd)
        namespace = {}
        exec(compile(code, "set-up cell", "exec"), namespace)
        return namespace

    clone = fake_repository(tmp_path / "clone", "torch==0.0.1  # a pin unlike the installed torch\nnumpy>=1\n")
    for _ in range(2):                                  # a second run, now from the root itself
        ns = run_cell(clone / "docs")
        assert ns["root"] == str(clone) and os.getcwd() == str(clone) and calls == []
    assert sys.path.count(str(clone)) == 1

    other = fake_repository(tmp_path / "other", "torch==0.0.1\nnumpy>=1\nsurely_not_a_module_xyz>=1\n")
    run_cell(other)
    assert len(calls) == 1 and calls[0][-1:] == ["surely_not_a_module_xyz>=1"]
    assert not any(arg.startswith("torch") for arg in calls[0])     # a working torch is never replaced
    calls.clear()
    find_spec = importlib.util.find_spec
    with monkeypatch.context() as m:                    # where torch is missing, requirements.txt's pin goes in
        m.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else find_spec(name, *a))
        run_cell(clone)
    assert len(calls) == 1 and "torch==0.0.1" in calls[0] and "numpy>=1" not in calls[0]
    calls.clear()

    colab = tmp_path / "content"
    colab.mkdir()
    with pytest.raises(SystemExit) as stop:
        run_cell(colab)
    message = str(stop.value)
    assert "\n" not in message and ".zip" in message and "run this cell again" in message
    with zipfile.ZipFile(colab / "born-biased-main.zip", "w") as z:   # as a repository host's "download zip" lays it
        z.writestr("born-biased-main/model.py", "")
        z.writestr("born-biased-main/requirements.txt", "numpy>=1\n")
    unpacked = colab / "born-biased-main" / "born-biased-main"
    assert run_cell(colab)["root"] == str(unpacked)
    (unpacked / "model.py").write_text("# edited after unpacking\n")
    assert run_cell(colab)["root"] == str(unpacked)     # again from the upload's folder: the zip is not unpacked again
    assert (unpacked / "model.py").read_text() == "# edited after unpacking\n"
    assert run_cell(unpacked)["root"] == str(unpacked) and calls == []


def exercise(text: str, name: str):
    """(the stub block, the solution block) of a write-the-code exercise, by the function its check calls."""
    blocks = page_blocks(text)
    stub = next(code for code, folded in blocks if not folded and f"def check_exercise_{name}()" in code)
    solution = next(code for code, folded in blocks if folded and f"check_exercise_{name}()" in code)
    return stub, solution


def definitions(code: str) -> str:
    """The imports and function definitions of a block, without its top-level statements."""
    tree = ast.parse(code)
    kept = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef))]
    return ast.unparse(ast.Module(body=kept, type_ignores=[]))


def run_block(code: str, namespace: dict) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "lecture block", "exec"), namespace)
    return out.getvalue()


def numbers(line: str) -> list:
    return [float(x) for x in re.findall(r"[-+]?\d+\.\d+(?:e[-+]?\d+)?", line)]


def lecture_names() -> dict:
    import math
    import numpy as np
    import torch
    import theory
    return dict(math=math, np=np, torch=torch, theory=theory)


def checked(stub: str, solution: str, ns: dict, unfilled: str, mistake: tuple, stops_with: str) -> list:
    """An exercise run three ways in namespace ns: the stub as given (it must say `unfilled`), the solution with
    `mistake` (old, new) made in it (its check must stop with an AssertionError matching `stops_with`), then the
    solution itself: the lines it prints."""
    assert unfilled in run_block(stub, ns)
    wrong = solution.replace(*mistake)
    assert wrong != solution
    with pytest.raises(AssertionError, match=stops_with):
        run_block(wrong, ns)
    return run_block(solution, ns).splitlines()


def test_exercise_2_checks_itself():
    """Unfilled, the stub says so; a wrong line stops with a message; the solution's prints each value beside its
    reference (1/pi, and theory.gelu_mlp0_cosine), the ReLU pair equal."""
    stub, solution = exercise(page(), "2")
    lines = checked(stub, solution, lecture_names(), "fill in the blank",
                    ("phi(z).mean() ** 2 /", "phi(z).mean() /"), "1/pi")          # the mean, not its square
    import math
    import theory
    relu = numbers(lines[0])
    assert "yours" in lines[0] and len(relu) == 2 and relu[0] == relu[1] == round(1 / math.pi, 4)
    for line, s in zip(lines[1:], (0.55, 0.011)):
        yours, reference = numbers(line)[1:]
        assert "yours" in line and reference == float(f"{theory.gelu_mlp0_cosine(s):.2e}")
        assert abs(yours - reference) < 0.2 * reference


def test_exercise_3_checks_itself():
    """The same for Exercise 3, against the exact variance (2t - H_t) / t^2 computed here from its closed form."""
    text = page()
    stub, solution = exercise(text, "3")
    ns = lecture_names()
    step3 = next(code for code, _ in page_blocks(text) if "def attn0(" in code)
    run_block(definitions(step3), ns)                   # the page's attn0, which the exercise uses
    lines = checked(stub, solution, ns, "complete variance_by_position",
                    ("for _ in range(layers):", "for _ in range(1):"), "two Attn0 layers")   # one layer, whatever asked
    assert [line.split(":")[0] for line in lines] == ["yours", "exact", "1/t^2"]
    positions = (2, 16, 64)
    exact = [(2 * t - sum(1 / s for s in range(1, t + 1))) / t ** 2 for t in positions]
    assert numbers(lines[1]) == [round(e, 4) for e in exact]
    assert all(abs(y - e) < 0.1 * e for y, e in zip(numbers(lines[0]), exact))


def test_exercise_5b_checks_itself():
    """Exercise 5b's check on small made-up fingerprints, against the mean tau computed here the slow way (a
    softmax per input and tau-a over every pair of inputs, no ties): the solution passes, a statistic without the
    softmax is stopped with a message, the unfilled stub says what to do."""
    import types
    import numpy as np
    stub, solution = exercise(page(), "5b")
    rng = np.random.default_rng(0)
    shared = rng.normal(size=(40, 12))
    HA, HB = shared + 0.5 * rng.normal(size=(40, 12)), shared + 0.5 * rng.normal(size=(40, 12))
    S = sorted(set(np.argsort(HA.mean(0))[:5]) & set(np.argsort(HB.mean(0))[:5]))
    assert len(S) >= 2

    def softmax(H):
        e = np.exp(H[:, S] / 10)
        return e / e.sum(axis=1, keepdims=True)

    A, B = softmax(HA), softmax(HB)
    taus = [sum(np.sign(A[i, j] - A[k, j]) * np.sign(B[i, j] - B[k, j]) for i in range(40) for k in range(i))
            / (40 * 39 / 2) for j in range(len(S))]
    ns = dict(lecture_names(), HA=HA, HB=HB,
              verdicts={"its own init": types.SimpleNamespace(mean_tau=float(np.mean(taus)))})
    run_block(definitions(stub).replace("k=32", "k=5"), ns)
    assert "complete mean_tau" in run_block("check_exercise_5b()", ns)
    no_softmax = definitions(solution).replace("torch.softmax(torch.from_numpy(H[:, S]).double() / 10, dim=1)",
                                               "torch.from_numpy(H[:, S]).double()")
    assert no_softmax != definitions(solution)
    run_block(no_softmax.replace("k=32", "k=5"), ns)
    with pytest.raises(AssertionError, match="not seedprint's mean tau"):
        run_block("check_exercise_5b()", ns)
    run_block(definitions(solution).replace("k=32", "k=5"), ns)
    mine, reference = numbers(run_block("check_exercise_5b()", ns))
    assert mine == reference


def test_the_class_fits_and_marks_its_reading():
    """The timing table leaves at least 10 of the 90 minutes as slack; every step appears in it; Step 5's verdict,
    Step 6's sink testbed and every Full size paragraph are marked for after class, and Exercise 5b sits there."""
    text = page()
    rows = re.findall(r"^\| (\**\d+\**) \| ([^|]+) \|", text, flags=re.M)
    minutes = {part.strip(" *"): int(n.strip("*")) for n, part in rows}
    slack = minutes.pop("slack")
    assert slack >= 10 and sum(minutes.values()) + slack == 90, (minutes, slack)
    assert [int(m) for m in re.findall(r"^Step (\d)", "\n".join(minutes), flags=re.M)] == [1, 2, 3, 4, 5, 6]
    assert re.search(r"^\| after class \|", text, flags=re.M)
    full_size = re.findall(r"^\*\*Full size\*\*(.{0,20})", text, flags=re.M)
    assert len(full_size) == 6 and all("(after class)" in mark for mark in full_size)
    sections = re.split(r"^## ", text, flags=re.M)
    step5 = next(s for s in sections if s.startswith("Step 5."))
    step6 = next(s for s in sections if s.startswith("Step 6."))
    after5 = step5.index("### After class")
    assert step5.index("Hoeffding") > after5 and step5.index("**Exercise 5b**") > after5
    assert step5.index("**Exercise 5a**") < after5
    assert step6.index("studies.sink_testbed") > step6.index("### After class") > step6.index("**Exercise 6**")


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
