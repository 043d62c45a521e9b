"""The README's library example, taken from the README itself so the two cannot drift, harvests the test web."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from harvester.testing.sites import HostSpec

README = Path(__file__).resolve().parents[1] / "README.md"


def library_example() -> str:
    section = README.read_text().split("## Use it as a library", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the section has one program"
    return blocks[0]


def test_the_readme_program_harvests_the_site_and_reads_its_pages(make_web, tmp_path, monkeypatch, capsys):
    program = library_example()
    assert len(program.strip().splitlines()) <= 14  # a short program, as the README promises
    web = make_web([HostSpec("a", pages=15), HostSpec("b", pages=10)], seed=5)
    monkeypatch.chdir(tmp_path)  # its database, sqlite:///pages.db, lands here
    monkeypatch.setattr(sys, "argv", ["example.py", *web.seeds])
    exec(compile(program, "README.md", "exec"), {"__name__": "__main__"})
    lines = capsys.readouterr().out.splitlines()
    assert (tmp_path / "pages.db").is_file()
    pages = {}
    for line in lines[1:]:
        status, url, *rest = line.split(" ")
        pages[url] = (status, rest[-1])
    for name in ("a", "b"):
        for url in web.truth[name].allowed_detail_urls():
            status, words = pages[url]
            assert status == "200" and int(words) > 0, (url, status, words)  # the callable extractor's field
    assert "'state:done'" in lines[0]  # the counters of the extraction


def command_lines() -> list[str]:
    """Every `harvester ...` line of the README's indented command blocks, without its comment."""
    lines = [line.strip() for line in README.read_text().splitlines() if line.startswith("    ")]
    return [line.split("  #", 1)[0].strip() for line in lines if line.startswith("harvester ")]


def test_every_readme_command_and_option_exists():
    """A renamed command or option fails here, not in a newcomer's shell."""
    from typer.testing import CliRunner

    from harvester.cli import app

    lines = command_lines()
    assert len(lines) >= 12 and "harvester --version" in lines and "harvester demo" in lines
    for line in lines:
        words = line.split()[1:]
        command = [w for w in words[:2] if not w.startswith(("-", "[", "http"))]
        command = command[:1] if command[:1] != ["db"] else command  # `db upgrade` is a group and its command
        helped = CliRunner().invoke(app, [*command, "--help"], terminal_width=200)
        assert helped.exit_code == 0, (line, helped.output)
        text = helped.output.replace("│", " ")
        for option in re.findall(r"(?<![\w/])(--?[a-zA-Z][\w-]*)", line.replace("|", " ")):
            assert f" {option} " in text or f" {option}," in text, (line, option)


def test_the_install_section_names_the_distribution_pyproject_builds():
    import tomllib

    pyproject = tomllib.loads((README.parent / "pyproject.toml").read_text())
    name = pyproject["project"]["name"]
    install = README.read_text().split("## Install", 1)[1].split("\n## ", 1)[0]
    assert f"pipx install {name}" in install and f"pip install {name}" in install
    assert name != "harvester"  # on PyPI that is another project's
    assert "harvester" in pyproject["project"]["scripts"]
