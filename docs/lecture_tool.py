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

docs/lecture.ipynb is a function of the page alone (and docs/lecture/map.png, which this tool draws): a set-up cell,
then one markdown cell per stretch of prose and one code cell per python block outside a folded answer; outputs and
figures are left to the kernel, folded answers stay folded. Cell ids are numbered, JSON is written as nbformat
writes it: the suite compares the file byte for byte with what this tool makes.
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

SETUP = '''# Set-up: run this cell first. In a clone of the repository it only finds the clone's root; anywhere
# else (Colab) it clones the repository and installs its requirements.txt, which pins torch==2.13.0 (a few minutes).
import os, subprocess, sys
REPO_URL = "{url}"   # where the repository is published
here = os.getcwd()
root = next((d for d in (here, os.path.dirname(here)) if os.path.isfile(os.path.join(d, "model.py"))), None)
if root is None:
    if not REPO_URL:
        raise SystemExit("set REPO_URL above to the repository's address, or open this notebook in a clone")
    subprocess.run(["git", "clone", "--depth", "1", REPO_URL, "born-biased"], check=True)
    root = os.path.abspath("born-biased")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", os.path.join(root, "requirements.txt")],
                   check=True)
os.chdir(root)                    # the lecture runs from the repository's root, as `python` started there would
sys.path.insert(0, root)
%matplotlib inline'''
REPO_URL = ""       # the published repository's address, for Colab's clone; empty until the project names one

SETUP_TEXT = ("## Set-up\n\nRun the next cell once. In Jupyter started in `docs/` (or at the repository's root) it "
              "needs nothing else; in Colab it clones the repository and installs its requirements (torch 2.13.0, "
              "pinned){colab}, then figures appear under each cell.\n")
# Colab can clone only an address the cell names: until the project names one, the text says what to fill in
COLAB = "" if REPO_URL else " once you set its `REPO_URL` to the repository's address"


def notebook_cells(text: str) -> list:
    """(kind, source) cells of the notebook: prose as markdown (quoted values as their values, generated marks
    dropped, figure links dropped: the code cell draws the figure), each top-level python block as code, the set-up
    cell before the first; output blocks outside folded answers are the kernel's to make, so they are left out."""
    parts = parse(text)
    cells, md, folded, first = [], [], 0, True

    def flush():
        body = "".join(md).strip("\n")
        if body.strip():
            cells.append(("markdown", body))
        md.clear()

    for part in parts:
        if part[0] == "text":
            body = VALUE.sub(lambda m: m.group(2), VALUES_MARK.sub("", part[1]))
            body = re.sub(r"^!\[[^\]]*\]\(lecture/(?!map)[^)]+\)\n", "", body, flags=re.M)
            body = body.replace("](lecture/map.png)", "](attachment:map.png)")
            for n, piece in enumerate(re.split(r"^(?=## )", body, flags=re.M)):
                if n and not folded:                   # a section heading starts a cell of its own
                    flush()
                md.append(piece)
                folded += piece.count("<details>") - piece.count("</details>")
        elif part[0] == "python" and not folded:
            flush()
            if first:
                cells.append(("markdown", SETUP_TEXT.replace("{colab}", COLAB).strip("\n")))
                cells.append(("code", SETUP.replace("{url}", REPO_URL)))
                first = False
            cells.append(("code", part[1].rstrip("\n")))
        elif part[0] == "output" and not folded:
            continue
        else:                                           # inside a folded answer: it stays markdown, as on the page
            md.append(source(("plain", part[2]) if part[0] == "output" else part))
    flush()
    return cells


def notebook(text: str, map_png: bytes = None) -> str:
    """docs/lecture.ipynb's text: nbformat 4.5, ids numbered, as nbformat.write would lay it out."""
    cells = []
    for n, (kind, body) in enumerate(notebook_cells(text)):
        lines = body.splitlines(keepends=True)
        cell = dict(cell_type=kind, id=f"cell-{n:03d}", metadata={}, source=lines)
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
    """One figure: the mechanism as a chain of boxes (top: the bias; bottom: the first position), and a pre-norm
    block with where each probe of the lecture reads."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    fig = plt.figure(figsize=(12, 6.2))
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set(xlim=(0, 12), ylim=(0, 6.2))
    ax.axis("off")

    def box(x, y, w, h, label, color, size=8.5, step=None):
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.04", fc=color, ec="0.3", lw=0.8))
        ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=size, wrap=True)
        if step:
            ax.text(x + w - 0.05, y + h - 0.05, step, ha="right", va="top", fontsize=7, color="0.35", style="italic")

    def arrow(x0, y0, x1, y1, style="-|>", ls="-"):
        ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle=style, mutation_scale=12, color="0.3", ls=ls,
                                     lw=1.0))

    ax.text(0.2, 5.95, "The mechanism", fontsize=11, weight="bold")
    top = [("MLP: an asymmetric\nnonlinearity (ReLU, GELU)", "Step 2"),
           ("every output shares\na positive mean:\na common component", "Step 2"),
           ("attention averages\npositions: the common\npart stays, the rest\nshrinks", "Step 3"),
           ("every sequence's last\nstate contracts toward\none seed-set direction", "Step 4"),
           ("the LM head reads that\ndirection as one token:\nthe favourite", "Step 1")]
    for n, (label, step) in enumerate(top):
        box(0.2 + n * 2.35, 4.15, 2.05, 1.45, label, "#dbe9f6", step=step)
        if n:
            arrow(0.2 + n * 2.35 - 0.3, 4.87, 0.2 + n * 2.35 - 0.02, 4.87)
    box(7.25, 2.55, 4.05, 1.05, "survives training: a model's lineage\nfingerprint (SeedPrint)", "#e3f1dc",
        step="Step 5")
    arrow(8.3, 4.1, 8.3, 3.65)
    bottom = [("attention is a running\naverage of positions 1..t", "Step 3"),
              ("variance of position t\nfalls as 1/t (Eq. 2)", "Step 3"),
              ("position 1 averages\nnothing: a variance\noutlier at birth", "Step 6"),
              ("attention sinks after\ntraining? (the paper's\nclaim; open here)", "Step 6")]
    for n, (label, step) in enumerate(bottom):
        box(0.2 + n * 1.75, 2.55, 1.6, 1.05, label, "#f8e3d4", size=7.5, step=step)
        if n:
            arrow(0.2 + n * 1.75 - 0.13, 3.07, 0.2 + n * 1.75 - 0.02, 3.07, ls="--" if n == 3 else "-")
    arrow(4.1 + 1.0, 4.1, 1.0, 3.65)

    ax.text(0.2, 2.15, "Where each probe reads, in one pre-norm block (the lecture's gpt2-nano: LayerNorm, GELU, RoPE)",
            fontsize=11, weight="bold")
    y = 0.95
    chain = [("residual\nstream x", "#eeeeee"), ("LayerNorm", "#eeeeee"), ("q, k, v\n(RoPE on q, k)", "#eeeeee"),
             ("softmax\nattention", "#fde9b5"), ("heads'\naggregated\noutput", "#fde9b5"), ("W_O, + x", "#eeeeee"),
             ("LayerNorm,\nMLP (GELU),\n+ x", "#eeeeee"), ("next block ...\nfinal norm", "#eeeeee"),
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
