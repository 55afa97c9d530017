"""The README and docs/*.md, read as a user reads them: every command they show parses with the script's own
flags (--help-level: parsed, never run), and the README's Python example runs as written."""
import re
import shlex
from pathlib import Path

import pytest

import common

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SCRIPTS = {p.name for p in ROOT.glob("*.py")}


def commands(text: str) -> list:
    """Every `python SCRIPT.py ...` or `torchrun ... SCRIPT.py ...` of a page, for the project's own scripts: in
    code blocks (backslash continuations joined, comments dropped) and in inline code spans."""
    found = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        found += block.replace("\\\n", " ").splitlines()
    found += re.findall(r"`([^`\n]*\.py[^`\n]*)`", re.sub(r"```.*?```", "", text, flags=re.S))
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
        at = next((i for i, w in enumerate(words) if w in SCRIPTS), None)
        if at is None or (words[0] == "python" and at != 1):
            continue
        out.append((words[at], words[at + 1:]))
    return out


class Parsed(Exception):
    """Raised in place of running a script once its flags have parsed."""


def test_the_pages_show_commands_of_every_script():
    seen = {script for page in PAGES for script, _ in commands(page.read_text())}
    assert seen >= {"probe.py", "seedprint.py", "sink.py", "train.py", "theory.py", "model.py"}, seen


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_on_the_page_parses(page, monkeypatch):
    import importlib
    parse = common.ArgumentParser.parse_args

    def parse_only(self, args=None, namespace=None):
        raise Parsed(parse(self, args, namespace))
    monkeypatch.setattr(common.ArgumentParser, "parse_args", parse_only)
    cmds = commands(page.read_text())
    for script, argv in cmds:
        main = importlib.import_module(script[:-3]).main
        with pytest.raises(Parsed):           # a refused flag is SystemExit(2), and fails here naming the command
            try:
                main(argv)
            except SystemExit as e:
                raise AssertionError(f"{page.name}: `{script} {' '.join(argv)}` does not parse (exit {e.code})")


def test_the_readme_example_runs_as_written(tmp_path, monkeypatch):
    """The README's Python example (the block after "In Python"), run in a fresh namespace."""
    text = (ROOT / "README.md").read_text()
    example = re.search(r"## In Python.*?```python\n(.*?)```", text, flags=re.S)
    assert example, "the README has no Python example under 'In Python'"
    code = example.group(1)
    assert len(code.strip().splitlines()) <= 12
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})
