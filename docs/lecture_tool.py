"""
docs/lecture_tool.py: the lecture's outputs and its notebook, made from docs/lecture.md, the one source.

A lecturer edits docs/lecture.md only, then runs this tool from anywhere:

    python docs/lecture_tool.py              # run the page at the lecture's size (CHECK = False), in order, in one
                                             # namespace, in a fresh directory; rewrite its outputs, quoted numbers
                                             # and figures, then the notebook (about a minute on 2 CPU cores)
    python docs/lecture_tool.py --notebook   # only docs/lecture.ipynb (and the map), after an edit of prose alone
    python docs/lecture_tool.py --check      # write nothing: say what is not current (exit 1), as the suite does

What it reads and writes in docs/lecture.md:
  ```python blocks        the lecture's code, run in order from the repository's root (or a fresh directory that
                          holds its code)
  <!-- output KEY -->     a generated line, followed by a ``` block: what the python block above printed (train.py's
                          progress lines left out, see `shown`). KEY hashes the project files the page imports
                          (directly or through each other: one hash for the whole page), the code up to that block,
                          that output and the figures the block saved, so the suite can tell a block, or a project
                          file the page runs, edited since its output was made (tests/test_lecture.py) without
                          running the page at its full size
  <!--{EXPR:FMT}-->V<!--/--> a number quoted in prose: V is the f-string field {EXPR:FMT} evaluated right after the
                          python block above it, so prose and output cannot disagree; the page's last line,
                          <!-- values KEY -->, hashes the project files the page imports, every code block, every
                          quoted field and value
  figures                 a block that saves f"{FIGURES}/NAME.png" has it copied to docs/lecture/NAME.png

docs/lecture.ipynb is a function of the page alone (and docs/lecture/map.png, which this tool draws): a set-up cell
(which finds a clone's root, or unpacks a copy uploaded to Colab, and installs only missing requirements, never over
a torch already there), then one markdown cell per stretch of prose and one code cell per python block. A block in a
folded answer (<details>) is a code cell whose source Jupyter shows collapsed (cell metadata "jupyter":
{"source_hidden": true}), runnable in place, and the answer's prose a markdown cell folded under the same summary.
Outputs and figures are left to the kernel. Cell ids are numbered, JSON is written as nbformat writes it: the suite
compares the file byte for byte with what this tool makes.
"""
import argparse
import ast
import base64
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PAGE = os.path.join(HERE, "lecture.md")
NOTEBOOK = os.path.join(HERE, "lecture.ipynb")
FIGURE_DIR = os.path.join(HERE, "lecture")
MAP = "map.png"

# A fence opens at the start of a line with ``` and a language (or none) and closes at the next ``` line.
FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```\n", flags=re.S | re.M)
OUTPUT_MARK = re.compile(r"^<!-- output ([0-9a-f]+) -->\n$")
VALUE = re.compile(r"<!--(\{[^>]*?\})-->(.*?)<!--/-->", flags=re.S)
VALUES_MARK = re.compile(r"<!-- values ([0-9a-f]+) -->\n")
SAVED = re.compile(r"\{FIGURES\}/([\w.-]+\.png)")
# train.py's progress lines, which depend on the machine (times, tokens/s) and say nothing the lecture discusses
TRAIN_LOG = re.compile(r"^(step +\d|resuming |[\d,]+ parameters \||\w+: [\d,]+ bytes from |wrote )")


def parse(text: str) -> list:
    """The page as a list of parts: ("text", s), ("python", code), ("output", key, body) -- an output block being a
    generated mark line and the ``` block after it. Joining the parts' source gives the page back exactly."""
    parts, at = [], 0
    for m in FENCE.finditer(text):
        before = text[at:m.start()]
        lines = before.splitlines(keepends=True)
        mark = OUTPUT_MARK.match(lines[-1]) if lines else None
        if m.group(1) == "" and mark:
            parts.append(("text", "".join(lines[:-1])))
            parts.append(("output", mark.group(1), m.group(2)))
        else:
            parts.append(("text", before))
            parts.append((m.group(1) or "plain", m.group(2)))
        at = m.end()
    parts.append(("text", text[at:]))
    return [p for p in parts if p != ("text", "")]


def source(part) -> str:
    if part[0] == "text":
        return part[1]
    if part[0] == "output":
        return f"<!-- output {part[1]} -->\n```\n{part[2]}```\n"
    return f"```{'' if part[0] == 'plain' else part[0]}\n{part[1]}```\n"


def shown(printed: str) -> str:
    """What a block's output block shows of what it printed: every line but train.py's progress log."""
    return "".join(line for line in printed.splitlines(keepends=True) if not TRAIN_LOG.match(line))


def digest(*pieces) -> str:
    h = hashlib.sha256()
    for piece in pieces:
        h.update(piece if isinstance(piece, bytes) else piece.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


def output_key(sources: str, codes: list, output: str, figures: list) -> str:
    """The key of a python block's output: the project's files the page runs (`sources`, sources_key), every code
    block up to it (later blocks reuse earlier ones' names), the output itself and the bytes of each figure the
    block saved."""
    return digest(sources, *codes, output, *figures)


def values_key(sources: str, codes: list, values: list) -> str:
    return digest(sources, *codes, *(f"{field}={value}" for field, value in values))


def imported(code: str) -> list:
    """The modules a piece of Python imports by absolute name (`from a.b import c` may import the module a.b.c)."""
    names = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def project_sources(text: str, root: str = ROOT) -> list:
    """The project's files (paths relative to root) that the page's code runs: those its python blocks import, and
    those these import in turn, packages' __init__.py included. A page's number can change with any of them."""
    parts = parse(text)
    todo = [name for i in blocks(parts) for name in imported(parts[i][1])]
    found = set()
    while todo:
        pieces = todo.pop().split(".")
        for n in range(1, len(pieces) + 1):          # importing a.b runs a/__init__.py first
            stem = os.path.join(*pieces[:n])
            for rel in (f"{stem}.py", os.path.join(stem, "__init__.py")):
                if rel not in found and os.path.isfile(os.path.join(root, rel)):
                    found.add(rel)
                    with open(os.path.join(root, rel)) as fh:
                        todo += imported(fh.read())
    return sorted(found)


def sources_key(text: str, root: str = ROOT) -> str:
    """One hash of the project's files the page runs, each with its name."""
    pieces = []
    for rel in project_sources(text, root):
        with open(os.path.join(root, rel), "rb") as fh:
            pieces += [rel, fh.read()]
    return digest(*pieces)


def figure_names(code: str) -> list:
    return SAVED.findall(code)


def blocks(parts) -> list:
    """Indices of the python parts, in order."""
    return [i for i, p in enumerate(parts) if p[0] == "python"]


def quoted(parts, i: int) -> list:
    """(part index, match) of the quoted values in the prose after python part i, up to the next python part."""
    out = []
    for j in range(i + 1, len(parts)):
        if parts[j][0] == "python":
            break
        if parts[j][0] == "text":
            out += [(j, m) for m in VALUE.finditer(parts[j][1])]
    return out


def evaluate(field: str, namespace: dict) -> str:
    """A quoted value: the f-string field, e.g. {top / baseline[0]:.1f}, in the lecture's namespace."""
    return eval("f" + repr(field), namespace)


def run_page(text: str, check: bool, on_block=None, figures_from: str = None) -> dict:
    """Run the page's python blocks in order in one namespace, from the current directory (the repository's root or
    a copy of it), CHECK set as asked. Returns {part index: printed}, {part index: [(field, value)]} and the
    namespace. on_block(i, printed, seconds) is called after each block."""
    import matplotlib
    matplotlib.use("Agg")
    parts = parse(text)
    namespace = {"__name__": "lecture"}
    printed, values = {}, {}
    for n, i in enumerate(blocks(parts)):
        code = parts[i][1]
        if n == 0:
            assert "CHECK = False" in code, "the first python block must set CHECK = False"
            code = code.replace("CHECK = False", f"CHECK = {check}", 1)
        out, start = io.StringIO(), time.time()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"docs/lecture.md, python block {n + 1}", "exec"), namespace)
        printed[i] = out.getvalue()
        values[i] = [(m.group(1), evaluate(m.group(1), namespace)) for _, m in quoted(parts, i)]
        if on_block:
            on_block(i, printed[i], time.time() - start)
    return dict(printed=printed, values=values, namespace=namespace)


def rewrite(text: str, printed: dict, values: dict, figure_bytes, root: str = ROOT) -> str:
    """The page with each python block's output block, each quoted value and the values key made anew."""
    parts = parse(text)
    sources = sources_key(text, root)
    codes, out, fill = [], [], iter(())
    for i, part in enumerate(parts):
        if part[0] == "output" or (part[0] == "text" and not part[1].strip() and i + 1 < len(parts)
                                   and parts[i + 1][0] == "output"):
            continue                                    # an output block (and the blank line before it): made anew
        if part[0] == "text":
            part = ("text", VALUE.sub(lambda m: f"<!--{m.group(1)}-->{next(fill)}<!--/-->", part[1]))
        out.append(part)
        if part[0] == "python":
            codes.append(part[1])
            fill = iter([value for _, value in values[i]])
            output = shown(printed[i])
            if output:
                key = output_key(sources, codes, output, [figure_bytes(name) for name in figure_names(part[1])])
                out += [("text", "\n"), ("output", key, output)]
    page = VALUES_MARK.sub("", "".join(source(p) for p in out)).rstrip("\n") + "\n"
    every = [v for i in sorted(values) for v in values[i]]
    return page + f"\n<!-- values {values_key(sources, codes, every)} -->\n"


# ----------------------------------------------------------------------------- checks the suite makes

def stale(text: str, figure_bytes, root: str = ROOT) -> list:
    """What in the page is not what its code made: output blocks whose key does not match the project's files the
    page runs (under root), the code up to their block, the output and the committed figures; quoted values whose
    key does not match. [] when current."""
    parts = parse(text)
    sources = sources_key(text, root)
    problems, codes, values = [], [], []
    last_python = None
    for i, part in enumerate(parts):
        if part[0] == "python":
            codes.append(part[1])
            last_python = i
        elif part[0] == "output":
            if last_python is None or parts[i - 1][0] != "text" or parts[i - 1][1].strip():
                problems.append(f"an output block (part {i}) does not follow a python block")
                continue
            figures = [figure_bytes(name) for name in figure_names(parts[last_python][1])]
            if part[1] != output_key(sources, codes, part[2], figures):
                problems.append(f"the output of python block {len(codes)} is not what its code (a block before it, "
                                f"or a project file the page imports) printed when it was made, or a figure it "
                                f"saves changed")
        elif part[0] == "text":
            values += [(m.group(1), m.group(2)) for m in VALUE.finditer(part[1])]
    mark = VALUES_MARK.search(text)
    if not mark or mark.group(1) != values_key(sources, codes, values):
        problems.append("the numbers quoted in prose (<!--{...}-->) are not those the code made")
    return problems


# ----------------------------------------------------------------------------- the notebook

SETUP = '''# Set-up: run this cell first, and again after a restart. In a copy of the repository (Jupyter started at its root
# or in docs/) it finds the root. Elsewhere (Colab) give it a copy first: upload the repository as a .zip into the
# working folder, or clone it there, and run this cell again: it unpacks the zip once and moves to the copy's root.
# It installs only the requirements that are missing: a torch already installed (Colab's, a GPU build) is kept.
import glob, importlib, importlib.util, os, re, subprocess, sys, zipfile

def is_root(folder):
    return all(os.path.isfile(os.path.join(folder, name)) for name in ("model.py", "requirements.txt"))

here = os.getcwd()
root = next((d for d in (here, os.path.dirname(here)) if is_root(d)), None)
if root is None:
    for archive in glob.glob("*.zip"):
        folder = os.path.splitext(archive)[0]
        if not os.path.isdir(folder):                 # unpacked once: a second run finds the folder
            zipfile.ZipFile(archive).extractall(folder)
    root = next((os.path.abspath(d) for d in sorted(glob.glob("*/") + glob.glob("*/*/")) if is_root(d)), None)
if root is None:
    raise SystemExit(f"no copy of the repository in {here}: upload it here as a .zip (or git clone it here), "
                     "then run this cell again")
wanted = [line.split("#")[0].strip() for line in open(os.path.join(root, "requirements.txt"))]
missing = [r for r in wanted if r and importlib.util.find_spec(re.match(r"[\\w.]+", r).group()) is None]
if missing:                       # torch among them only where none is installed: then requirements.txt's pin
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing], check=True)
    importlib.invalidate_caches()
os.chdir(root)                    # the lecture runs from the repository's root, as `python` started there would
if root not in sys.path:
    sys.path.insert(0, root)
%matplotlib inline'''

SETUP_TEXT = ("## Set-up\n\nRun the next cell first (again after a restart). Started in `docs/` or at the repository's "
              "root, Jupyter needs nothing else. In Colab, first upload the repository as a .zip (the Files pane) or "
              "clone it into the working folder; the cell unpacks it and moves there. It installs only the "
              "requirements that are missing, and keeps a torch already installed. Figures appear under each cell. "
              "Answers and solutions are code cells whose code is hidden: run one to see what it prints, or click it "
              "to show its code; the prose that explains them stays folded.\n")
# Jupyter's own mark for a code cell shown collapsed (nbformat's cell metadata; JupyterLab and Notebook 7 honour it)
HIDDEN = {"jupyter": {"source_hidden": True}}
FOLD = re.compile(r"<details><summary>(.*?)</summary>\n?|</details>\n?")


def notebook_cells(text: str) -> list:
    """(kind, source, hidden) cells of the notebook: prose as markdown (quoted values as their values, generated
    marks dropped, figure links dropped: the code cell draws the figure), each python block as code, the set-up
    cell before the first; output blocks are the kernel's to make, so they are left out. A python block inside a
    folded answer (<details>) is a code cell with its source hidden, runnable in place; the answer's prose is a
    markdown cell folded on its own, under the answer's summary (a fold cannot span cells)."""
    parts = parse(text)
    cells, md, summary, noted, first = [], [], None, False, True

    def flush():
        body = "".join(md).strip("\n")
        if body.strip():
            if summary is not None:
                body = f"<details><summary>{summary}</summary>\n\n{body}\n</details>"
            cells.append(("markdown", body, False))
        md.clear()

    def add(prose):
        for n, piece in enumerate(re.split(r"^(?=## )", prose, flags=re.M)):
            if n and summary is None:                   # a section heading starts a cell of its own
                flush()
            md.append(piece)

    for part in parts:
        if part[0] == "text":
            body = VALUE.sub(lambda m: m.group(2), VALUES_MARK.sub("", part[1]))
            body = re.sub(r"^!\[[^\]]*\]\(lecture/(?!map)[^)]+\)\n", "", body, flags=re.M)
            body = body.replace("](lecture/map.png)", "](attachment:map.png)")
            at = 0
            for m in FOLD.finditer(body):
                add(body[at:m.start()])
                flush()                                 # a fold opens or closes: a cell ends
                summary, noted, at = m.group(1), False, m.end()    # summary None: the fold closed
            add(body[at:])
        elif part[0] == "output":
            continue                                    # the kernel's to make
        elif part[0] == "python":
            flush()
            if summary is not None and not noted:     # the first hidden cell of an answer: say what it is
                cells.append(("markdown", f"*{summary}: run the next cell (its code is hidden: click it to show the "
                                          f"code); the text under it, folded, explains.*", False))
                noted = True
            if first:
                cells.append(("markdown", SETUP_TEXT.strip("\n"), False))
                cells.append(("code", SETUP, False))
                first = False
            cells.append(("code", part[1].rstrip("\n"), summary is not None))
        else:                                           # a fence of another language: shown as it is
            md.append(source(part))
    flush()
    return cells


def notebook(text: str, map_png: bytes = None) -> str:
    """docs/lecture.ipynb's text: nbformat 4.5, ids numbered, as nbformat.write would lay it out."""
    cells = []
    for n, (kind, body, hidden) in enumerate(notebook_cells(text)):
        lines = body.splitlines(keepends=True)
        cell = dict(cell_type=kind, id=f"cell-{n:03d}", metadata=HIDDEN if hidden else {}, source=lines)
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        elif "attachment:map.png" in body and map_png is not None:
            cell["attachments"] = {"map.png": {"image/png": base64.b64encode(map_png).decode("ascii")}}
        cells.append(cell)
    nb = dict(cells=cells, nbformat=4, nbformat_minor=5,
              metadata=dict(kernelspec=dict(display_name="Python 3", language="python", name="python3"),
                            language_info=dict(name="python")))
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def map_bytes() -> bytes:
    path = os.path.join(FIGURE_DIR, MAP)
    return open(path, "rb").read() if os.path.isfile(path) else None


# ----------------------------------------------------------------------------- the map

def draw_map(path: str) -> None:
    """One figure, three rows, each titled for what it holds: the bias, link by link (Steps 1-4); its two
    consequences (the first position, Steps 3 and 6; a lineage fingerprint that survives training, Step 5); and a
    pre-norm block with where each probe of the lecture reads."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    fig = plt.figure(figsize=(12, 6.6))
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set(xlim=(0, 12), ylim=(0, 6.6))
    ax.axis("off")

    def box(x, y, w, h, label, color, size=8.5, step=None):
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.04", fc=color, ec="0.3", lw=0.8))
        ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=size, wrap=True)
        if step:
            ax.text(x + w - 0.05, y + h - 0.05, step, ha="right", va="top", fontsize=7, color="0.35", style="italic")

    def arrow(x0, y0, x1, y1, style="-|>", ls="-"):
        ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle=style, mutation_scale=12, color="0.3", ls=ls,
                                     lw=1.0))

    ax.text(0.2, 6.3, "The mechanism: why a fresh model prefers one token (Steps 1-4)", fontsize=11, weight="bold")
    top = [("MLP: an asymmetric\nnonlinearity (ReLU, GELU)", "Step 2"),
           ("every output shares\na positive mean:\na common component", "Step 2"),
           ("attention averages\npositions: the common\npart stays, the rest\nshrinks", "Step 3"),
           ("every sequence's last\nstate contracts toward\none seed-set direction", "Step 4"),
           ("the LM head reads that\ndirection as one token:\nthe favourite", "Step 1")]
    for n, (label, step) in enumerate(top):
        box(0.2 + n * 2.35, 4.55, 2.05, 1.45, label, "#dbe9f6", step=step)
        if n:
            arrow(0.2 + n * 2.35 - 0.3, 5.27, 0.2 + n * 2.35 - 0.02, 5.27)
    # the middle row holds two consequences of the bias, each captioned under its boxes
    ax.text(0.2, 2.5, "Its consequence at the first position (Steps 3, 6)", fontsize=10, weight="bold")
    ax.text(7.25, 2.5, "... and after training: a lineage fingerprint (Step 5)", fontsize=10, weight="bold")
    box(7.25, 2.75, 4.05, 1.05, "the seed-set bias survives training:\na model's lineage fingerprint (SeedPrint)",
        "#e3f1dc", step="Step 5")
    arrow(8.3, 4.5, 8.3, 3.85)
    bottom = [("attention is a running\naverage of positions 1..t", "Step 3"),
              ("variance of position t\nfalls as 1/t (Eq. 2)", "Step 3"),
              ("position 1 averages\nnothing: a variance\noutlier at birth", "Step 6"),
              ("attention sinks after\ntraining? (the paper's\nclaim; open here)", "Step 6")]
    for n, (label, step) in enumerate(bottom):
        box(0.2 + n * 1.75, 2.75, 1.6, 1.05, label, "#f8e3d4", size=7.5, step=step)
        if n:
            arrow(0.2 + n * 1.75 - 0.13, 3.27, 0.2 + n * 1.75 - 0.02, 3.27, ls="--" if n == 3 else "-")
    arrow(5.1, 4.5, 1.0, 3.85)
    ax.text(0.2, 1.95, "Where each probe reads, in one pre-norm block (Steps 1, 4, 6: gpt2-nano, LayerNorm and GELU; "
            "Step 5: a LLaMA-style tiny model, RMSNorm and SwiGLU)", fontsize=9.5, weight="bold")
    y = 0.95
    chain = [("residual\nstream x", "#eeeeee"), ("norm", "#eeeeee"), ("q, k, v\n(RoPE on q, k)", "#eeeeee"),
             ("softmax\nattention", "#fde9b5"), ("heads'\naggregated\noutput", "#fde9b5"), ("W_O, + x", "#eeeeee"),
             ("norm, MLP\n(GELU or\nSwiGLU), + x", "#eeeeee"), ("next block ...\nfinal norm", "#eeeeee"),
             ("LM head:\nlogits", "#eeeeee")]
    for n, (label, color) in enumerate(chain):
        box(0.2 + n * 1.3, y - 0.45, 1.1, 0.9, label, color, size=7.5)
        if n:
            arrow(0.2 + n * 1.3 - 0.18, y, 0.2 + n * 1.3 - 0.02, y)
    reads = [(0.75, "hidden: the stream\nafter every block\n(Step 4)"),
             (4.45, "attn_probs:\nsink metric α₁\n(Step 6)"),
             (5.75, "head_out: variance\nby position\n(Step 6)"),
             (10.35, "hidden: the final\nnorm's state\n(SeedPrint, Step 5)"),
             (11.55, "logits: the\nfavourite token\n(Step 1)")]
    for x, label in reads:
        ax.text(x, 0.02, label, ha="center", va="bottom", fontsize=6.8, color="#7a3b00")
        arrow(x, 0.42, x, 0.5, style="-")
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


# ----------------------------------------------------------------------------- the command line

def write_whole(path: str, text: str) -> None:
    """`text` at `path`, through a temp file renamed into place: a killed run leaves the old file or the new one
    (the page is the lecture's one source)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def write_notebook() -> None:
    with open(PAGE) as fh:
        text = fh.read()
    write_whole(NOTEBOOK, notebook(text, map_bytes()))
    print(f"wrote {os.path.relpath(NOTEBOOK)}")


def committed_figure(name: str) -> bytes:
    with open(os.path.join(FIGURE_DIR, name), "rb") as fh:
        return fh.read()


def regenerate() -> None:
    """The full run: the page at the lecture's size, written back. It runs in a fresh directory that holds the
    repository's code and data/ (as a clone's root would, with an empty out/): models and prepared tokens an
    earlier run left under out/lecture/ were made by the code as it was then, and the page would reuse them."""
    with open(PAGE) as fh:
        text = fh.read()
    sys.path.insert(0, ROOT)
    start = time.time()
    parts = parse(text)
    heading = {i: next((h for h in reversed(re.findall(r"^## (.+)$", "".join(source(p) for p in parts[:i]),
                                                        flags=re.M))), "top") for i in blocks(parts)}

    def report(i, printed, seconds):
        print(f"{seconds:6.1f} s  {heading[i][:70]}", file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="lecture-") as work:
        # the code, and data/: the corpora fetched there (each checked against its sha256) are read, not made again
        for name in os.listdir(ROOT):
            if name.endswith(".py") or name in ("studies", "requirements.txt", "data"):
                os.symlink(os.path.join(ROOT, name), os.path.join(work, name))
        os.chdir(work)
        try:
            run = run_page(text, check=False, on_block=report)
            os.makedirs(FIGURE_DIR, exist_ok=True)
            for i in blocks(parts):
                for name in figure_names(parts[i][1]):
                    shutil.copyfile(os.path.join(run["namespace"]["FIGURES"], name), os.path.join(FIGURE_DIR, name))
        finally:
            os.chdir(ROOT)
    page = rewrite(text, run["printed"], run["values"], committed_figure)
    problems = stale(page, committed_figure)
    if problems:                 # the page just written would fail its own currency check: a bug here, not input
        raise RuntimeError(f"the regenerated page is not current: {problems}")
    write_whole(PAGE, page)
    print(f"ran the page in {time.time() - start:.0f} s; wrote {os.path.relpath(PAGE)}", file=sys.stderr)


def check() -> list:
    """What is not current, writing nothing: the page's outputs, quoted numbers and figures against its code and
    the project's files it runs, and the notebook against the page."""
    with open(PAGE) as fh:
        text = fh.read()
    problems = stale(text, committed_figure)
    with open(NOTEBOOK) as fh:
        if fh.read() != notebook(text, map_bytes()):
            problems.append(f"{os.path.relpath(NOTEBOOK)} is not the page's: run with --notebook")
    return problems


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip("\n"), formatter_class=argparse.RawTextHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--notebook", action="store_true", help="only draw the map and write docs/lecture.ipynb")
    mode.add_argument("--check", action="store_true", help="write nothing; list what is not current (exit 1)")
    args = p.parse_args(argv)
    if args.check:
        problems = check()
        for problem in problems:
            print(problem, file=sys.stderr)
        print("not current: run python docs/lecture_tool.py" if problems else "current", file=sys.stderr)
        sys.exit(1 if problems else 0)
    draw_map(os.path.join(FIGURE_DIR, MAP))
    if not args.notebook:
        regenerate()
    write_notebook()


if __name__ == "__main__":
    main()
