"""The README and docs/*.md, read as a user reads them: every command they show -- a script's (`python probe.py`,
`torchrun ... train.py`) or a study's (`python -m studies.lineage_fpr`) -- parses with its own flags (--help-level:
parsed, never run), and the README's Python example runs as written. The lecture has its own tests (test_lecture.py)."""
import re
import shlex
from pathlib import Path

import pytest

from studies import HELPERS

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FILES = sorted([*ROOT.glob("*.py"), *(ROOT / "studies").glob("*.py")])         # their docstrings show commands too
SCRIPTS = {p.name for p in ROOT.glob("*.py")}
STUDIES = {f"studies.{p.stem}" for p in (ROOT / "studies").glob("*.py") if p.stem not in ("__init__", *HELPERS)}


def commands(text: str) -> list:
    """Every `python SCRIPT.py ...`, `torchrun ... SCRIPT.py ...` or `python -m studies.NAME ...` of a page, for the
    project's own scripts and studies: in code blocks (backslash continuations joined, comments dropped) and in
    inline code spans. -> [(module to import, argv)]"""
    found = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        found += block.replace("\\\n", " ").splitlines()
    found += re.findall(r"`((?:python|torchrun|[A-Z_]+=)[^`\n]*)`", re.sub(r"```.*?```", "", text, flags=re.S))
    out = []
    for line in found:
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):          # VAR=value prefixes
            words = words[1:]
        if not words or words[0] not in ("python", "torchrun"):
            continue
        if words[0] == "python" and words[1:2] == ["-m"] and len(words) > 2 and words[2] in STUDIES:
            out.append((words[2], words[3:]))
            continue
        at = next((i for i, w in enumerate(words) if w in SCRIPTS), None)
        if at is None or (words[0] == "python" and at != 1):
            continue
        out.append((words[at][:-3], words[at + 1:]))
    return out


class Parsed(Exception):
    """Raised in place of running a script once its flags have parsed."""


def test_the_pages_show_commands_of_every_script():
    seen = {script for page in PAGES for script, _ in commands(page.read_text())}
    missing = ({"probe", "seedprint", "sink", "train", "init"} | STUDIES) - seen
    assert not missing, f"no page shows a command of {sorted(missing)}"


def page_text(page: Path) -> str:
    """A page's text; a Python file's docstring, read as one code block."""
    if page.suffix != ".py":
        return page.read_text()
    import ast
    return f"```\n{ast.get_docstring(ast.parse(page.read_text())) or ''}\n```"


@pytest.mark.parametrize("page", PAGES + FILES, ids=lambda p: p.name)
def test_every_command_on_the_page_parses(page, monkeypatch):
    import argparse
    import importlib
    parse = argparse.ArgumentParser.parse_args      # the scripts' parser (common.ArgumentParser) and hf.py's

    def parse_only(self, args=None, namespace=None):
        raise Parsed(parse(self, args, namespace))
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_only)
    cmds = commands(page_text(page))
    for script, argv in cmds:
        main = importlib.import_module(script).main
        with pytest.raises(Parsed):           # a refused flag is SystemExit(2), and fails here naming the command
            try:
                main(argv)
            except Parsed:
                raise
            except SystemExit as e:
                raise AssertionError(f"{page.name}: `{script} {' '.join(argv)}` does not parse (exit {e.code})")
            except Exception as e:            # a moved --exp, a script without a command line, ...
                raise AssertionError(f"{page.name}: `{script} {' '.join(argv)}` is refused: {e}")


def test_the_readme_example_runs_as_written(tmp_path, monkeypatch):
    """The README's Python example (the block after "In Python"), run in a fresh namespace."""
    text = (ROOT / "README.md").read_text()
    example = re.search(r"## In Python.*?```python\n(.*?)```", text, flags=re.S)
    assert example, "the README has no Python example under 'In Python'"
    code = example.group(1)
    assert len(code.strip().splitlines()) <= 12
    monkeypatch.chdir(tmp_path)
    import contextlib
    import io
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})
    lines = printed.getvalue().splitlines()
    says = [line.split("#")[-1].strip() for line in code.splitlines() if line.startswith("print(")]
    assert len(lines) == len(says), lines
    # what the comments say it prints: a verdict line that says unrelated, True, and a percentage
    assert lines[0].startswith("unrelated") and says[0].endswith("unrelated")
    assert lines[1] == "True" and says[1] == "True"
    assert 0 <= float(lines[2]) <= 100
