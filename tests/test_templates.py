"""Templates show and code decides: a template loads tag libraries only from its own app or one below it
(an invisible upward dependency otherwise, which import-linter cannot see), and it holds no magic numbers
and no lists of statuses to compare against; those are constants and properties in code."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEMPLATES = REPO / "templates"
LAYERS = ("chain", "chat", "annotate", "oracle", "leaderboard")  # lowest first, as in pyproject.toml
LOAD = re.compile(r"{%\s*load\s+([^%]+?)\s*%}")
TAG = re.compile(r"{%.*?%}|{{.*?}}", re.S)


def library_owners() -> dict[str, str]:
    """Each project tag library's name -> the app that defines it."""
    return {path.stem: path.parent.parent.name for path in (REPO / "apps").glob("*/templatetags/*.py")
            if path.stem != "__init__"}


def app_templates():
    for app in LAYERS:
        for path in sorted((TEMPLATES / app).rglob("*.html")):
            yield app, path


def test_every_layer_has_a_template_folder_and_the_libraries_are_found():
    owners = library_owners()
    assert {"ledger", "markdown", "reputation"} <= set(owners)
    assert all(app in LAYERS for app in owners.values())


def test_a_template_loads_no_tag_library_of_a_higher_app():
    owners = library_owners()
    upward = []
    for app, path in app_templates():
        for names in LOAD.findall(path.read_text()):
            for name in names.split():
                owner = owners.get(name)
                if owner and LAYERS.index(owner) > LAYERS.index(app):
                    upward.append(f"{path.relative_to(REPO)} loads {name} ({owner})")
    assert not upward, upward


def test_the_base_templates_load_only_the_lowest_app_libraries():
    owners = library_owners()
    for path in [*TEMPLATES.glob("*.html"), *(TEMPLATES / "registration").rglob("*.html")]:
        for names in LOAD.findall(path.read_text()):
            assert all(owners.get(name, "chain") == "chain" for name in names.split()), path


def test_no_template_compares_against_a_magic_number_or_a_list_of_statuses():
    found = []
    for path in TEMPLATES.rglob("*.html"):
        for tag in TAG.findall(path.read_text()):
            if re.search(r"\b\d{5,}\b", tag):
                found.append(f"{path.relative_to(REPO)}: number in {tag[:80]}")
            if re.search(r"\bin\s+(['\"])[^'\"]*\s[^'\"]*\1", tag):
                found.append(f"{path.relative_to(REPO)}: list in a string in {tag[:80]}")
    assert not found, found


# A number a template decides with: compared against, or added (a limit counted down, `named|length > 12`).
# 0 and 1 are not limits (`number == 0`, `required_verdicts > 1`); numbers that format (floatformat:3,
# truncatechars:14, slice:":12" of a hash, widthratio's 100) are not decisions.
DECIDING_NUMBER = re.compile(r"(?:==|!=|<=|>=|<|>)\s*[\"']?(-?\d+)|(-?\d+)[\"']?\s*(?:==|!=|<=|>=|<|>)"
                             r"|\|add:\s*[\"']?(-?\d+)")


def deciding_numbers(text: str) -> list[str]:
    return [tag[:80] for tag in TAG.findall(text) for match in DECIDING_NUMBER.finditer(tag)
            if abs(int(next(g for g in match.groups() if g is not None))) > 1]


def test_no_template_decides_with_a_number_of_its_own():
    found = {path.relative_to(REPO).as_posix(): hits for path in TEMPLATES.rglob("*.html")
             if (hits := deciding_numbers(path.read_text()))}
    assert not found, f"pass these from the view (one constant in code): {found}"


def test_a_number_a_template_decides_with_is_caught():
    text = ('{% for s in named|slice:":12" %}{% endfor %}{% if named|length > 12 %}{{ named|length|add:"-12" }}'
            '{% endif %}{% if 3 <= n %}{% endif %}{% if number == 0 or item.required_verdicts > 1 %}{% endif %}'
            '{{ x|floatformat:3 }}{{ cid|slice:":12" }}{% widthratio a 1 100 %}')
    assert deciding_numbers(text) == ["{% if named|length > 12 %}", '{{ named|length|add:"-12" }}', "{% if 3 <= n %}"]


def test_an_evaluation_job_says_which_of_its_steps_are_done():
    from apps.oracle.models import EvaluationJob

    Status = EvaluationJob.Status
    scored = {s for s in Status if EvaluationJob(status=s).is_scored}
    pinned = {s for s in Status if EvaluationJob(status=s).is_pinned}
    assert scored == {Status.SCORED, Status.PINNED, Status.SUBMITTED, Status.ONCHAIN}
    assert pinned == {Status.PINNED, Status.SUBMITTED, Status.ONCHAIN}


def test_a_rating_within_the_hour_of_its_raters_previous_one_is_in_quick_succession():
    from apps.chain.models import LedgerInteraction
    from lib.reputation import WAD

    assert LedgerInteraction(d_minutes=59 * WAD + WAD // 2).rated_in_quick_succession
    assert not LedgerInteraction(d_minutes=60 * WAD).rated_in_quick_succession
    assert not LedgerInteraction(d_minutes=1440 * WAD).rated_in_quick_succession
    assert not LedgerInteraction(d_minutes=None).rated_in_quick_succession
