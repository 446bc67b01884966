"""The README stays a front door and the manual in docs/ stays reachable: CI and every new session
read the README's first code block for the two commands, and a link to a page or section that was
renamed away sends a reader nowhere."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for a Markdown file's headings: lower case, punctuation dropped, spaces as dashes."""
    out = set()
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def test_the_readme_starts_with_the_two_commands():
    lines = README.read_text().splitlines()
    assert lines[0] == "# LLMChain"
    block = lines[lines.index("```sh") + 1:lines.index("```")]
    assert [line.split()[:2] for line in block] == [["make", "run"], ["make", "test"]]


def test_the_readme_is_short_enough_to_read_first():
    assert len(README.read_text().splitlines()) <= 200


def test_every_docs_page_is_linked_from_the_readme():
    linked = {target.split("#")[0] for target in LINK.findall(README.read_text())}
    pages = {f"docs/{page.name}" for page in DOCS.glob("*.md")}
    assert pages and pages <= linked, sorted(pages - linked)


def test_every_relative_link_reaches_a_file_and_its_section():
    broken = []
    for source in markdown_files():
        for target in LINK.findall(source.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (source.parent / path).resolve() if path else source
            if not dest.exists():
                broken.append(f"{source.name}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{source.name}: {target} (no such section)")
    assert not broken, broken


def test_every_setting_read_from_the_environment_is_documented():
    settings = (ROOT / "llmchain_site" / "settings.py").read_text()
    read = set(re.findall(r"[\"'](LLMCHAIN_[A-Z0-9_]+)[\"']", settings))
    documented = set(re.findall(r"LLMCHAIN_[A-Z0-9_]+", (DOCS / "operating.md").read_text()))
    missing = sorted(read - documented)
    assert read and not missing, f"say what {missing} are for in docs/operating.md, 'Settings (environment)'"


def test_no_comment_cites_an_issue_a_seed_or_a_stop():
    """A reader has none of the session notes: a comment says why, not which issue, seed document or stop."""
    cites = re.compile(r"\b(issue [0-9]|seed[ -]0[0-9]{2}|stop [0-9])", re.I)
    found = []
    for folder in ("apps", "lib", "ops", "bench", "modelserver", "llmchain_site", "templates", "static", "tests"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".html", ".js") and "vendor" not in path.parts and path.is_file():
                for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
                    if cites.search(line) and path.name != "test_docs.py":
                        found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}")
    assert not found, found
