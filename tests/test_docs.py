"""The README is the start (issue 29): short, its two commands are what CI runs, and every page it
links to exists."""

import re

from conftest import ROOT


def test_readme_fits_and_ci_runs_its_test_command():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    commands = re.findall(r"^python3 -m venv \.venv && .*$", readme, re.M)
    assert len(commands) == 2 and commands[0].endswith("distprof demo")
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1] in ci.splitlines()


def test_every_linked_doc_exists_and_links_back():
    readme = (ROOT / "README.md").read_text()
    links = set(re.findall(r"\]\((docs/[^)#]+)\)", readme))
    assert len(links) >= 10
    for link in links:
        page = ROOT / link
        assert page.exists(), link
        assert "README.md" in page.read_text().splitlines()[0]
    for page in (ROOT / "docs").glob("*.md"):
        for target in re.findall(r"\]\(([^)#:]+\.md)\)", page.read_text()):
            assert (page.parent / target).exists() or (ROOT / target).exists(), (page.name, target)
