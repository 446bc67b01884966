"""The built-in model's page says plainly where it stands as a judge before its qualification has
finished: not queued yet, queued, running (and since when) or failed, each "Not qualified as a judge
yet", with what the project measured of it earlier (G-Eval with it as the judge: a margin over the
longer answer from -22 to +56 points, not above 0), named as the project's and not the site's. Once the
site's own qualification is done, its figures replace the earlier ones. The judge is a fake at the
evaluator registry; nothing calls the built-in model."""

from __future__ import annotations

import re
from datetime import datetime, timezone as dt_timezone
from html import unescape
from pathlib import Path

import pytest

from apps.annotate.models import Qualification
from apps.annotate.qualify import PROJECT_MEASURED, ROLES, enqueue_judges, judge_evaluator, qualify
from apps.chat.builtin import BUILTIN_NAME, ensure_builtin_model
from lib.evaluators import register_evaluator
from tests.annotate.test_qualification import PrefersLonger, data_dir, judge_model  # noqa: F401  (fixture)
from tests.chat.test_registration import dead_url
from tests.evaluator_registry import isolated_evaluator_registry  # noqa: F401  (autouse fixture)

pytestmark = pytest.mark.django_db

MEASURED = ("What the project measured for it earlier, on its developers' machine rather than on this site "
            "(November 2026): G-Eval with this model as the judge, on a sample of 3 pairs from each of the 6 "
            "labelled sets, agreed with people on 61% of 18 decided pairs (between 39% and 83%), while preferring "
            "the longer answer agreed 44%. Its lead over that, +17 points, could be anywhere from -22 to +56 "
            "points: not above 0, so with these figures it would not qualify.")


@pytest.fixture
def builtin(settings):
    settings.LLMCHAIN_BUILTIN_MODEL_URL = dead_url()
    return ensure_builtin_model()


def judging(client, model) -> str:
    """The text of the model page's part on judging, as a visitor reads it."""
    html = client.get(f"/models/{model.pk}/judging").content.decode()
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def test_the_built_in_judge_says_it_is_not_qualified_yet_and_what_the_project_measured_at_each_step(
        builtin, client, data_dir, settings):  # noqa: F811
    assert builtin.is_judge
    page = client.get(f"/models/{builtin.pk}/").content.decode()
    assert f'hx-get="/models/{builtin.pk}/judging"' in page  # the part loads after the page

    text = judging(client, builtin)
    assert ("Not qualified as a judge yet: its qualification on labelled pairs has not been queued yet. The site "
            "queues one for every judge when its debate worker next looks for work.") in text
    assert MEASURED in text

    settings.LLMCHAIN_QUALIFY_SAMPLE = 4
    assert enqueue_judges() == len(ROLES)  # one in each role; this part shows the G-Eval one
    row = Qualification.objects.get(evaluator=judge_evaluator(BUILTIN_NAME))
    queued = datetime(2026, 11, 28, 13, 47, tzinfo=dt_timezone.utc)
    Qualification.objects.filter(pk=row.pk).update(created_at=queued)
    text = judging(client, builtin)
    assert ("Not qualified as a judge yet: its qualification on labelled pairs is queued (since 2026-11-28 13:47 "
            "UTC): the site's debate worker runs it when it has no debate to hold and the model is not answering "
            "anyone. It judges a sample of 4 pairs "
            "from each of the 6 labelled sets, pairs of answers that people have already compared") in text
    assert MEASURED in text

    Qualification.objects.filter(pk=row.pk).update(status=Qualification.Status.RUNNING,
                                                    started_at=datetime(2026, 11, 28, 14, 2, tzinfo=dt_timezone.utc))
    text = judging(client, builtin)
    assert "Not qualified as a judge yet: its qualification on labelled pairs is running (started 2026-11-28 14:02 " \
           "UTC). It judges a sample of 4 pairs" in text
    assert MEASURED in text and "Qualified to judge" not in text

    Qualification.objects.filter(pk=row.pk).update(status=Qualification.Status.FAILED,
                                                    error="LLMBar Natural: the judge did not answer in time")
    text = judging(client, builtin)
    assert ("Not qualified as a judge yet: its qualification on labelled pairs could not be finished: LLMBar "
            "Natural: the judge did not answer in time") in text
    assert MEASURED in text

    # The site's own qualification done: its figures, and no longer the project's earlier ones.
    register_evaluator("geval", lambda name: PrefersLonger(), takes_argument=True)
    done = qualify(judge_evaluator(BUILTIN_NAME), per_set=10)
    text = judging(client, builtin)
    pooled = done.figures["pooled"]
    assert (f"Not qualified to judge: on {pooled['pairs_non_tie']} pairs of answers people had compared, it agreed "
            f"with them {round(100 * pooled['accuracy_non_tie'])}% of the time") in text
    assert "does not use its judgements" in text
    assert "What the project measured" not in text and "Not qualified as a judge yet" not in text


def test_another_judge_has_no_earlier_measurement_and_a_model_that_is_no_judge_says_so(client, builtin):
    other = judge_model("fair-judge")
    text = judging(client, other)
    assert "Not qualified as a judge yet: its qualification on labelled pairs has not been queued yet." in text
    assert "What the project measured" not in text
    type(builtin).objects.filter(pk=builtin.pk).update(is_judge=False)
    text = judging(client, builtin)
    assert "This model is not registered as a judge." in text and MEASURED in text


def test_the_earlier_measurement_shown_is_the_pooled_row_of_the_meta_evaluation_table():
    table = (Path(__file__).resolve().parents[2] / "docs" / "metaeval.md").read_text(encoding="utf-8")
    row = next(line for line in table.splitlines() if line.startswith("| geval (built-in, 3 per set) | pooled |"))
    numbers = [float(x) for x in re.findall(r"-?\d+\.\d+|\b\d+\b", row.split("| pooled |")[1])]
    m = PROJECT_MEASURED[judge_evaluator(BUILTIN_NAME)]
    assert numbers[:8] == [m["accuracy_non_tie"], m["accuracy_ci_low"], m["accuracy_ci_high"],
                           m["length_accuracy_non_tie"], m["margin_over_length"], m["margin_over_length_ci_low"],
                           m["margin_over_length_ci_high"], m["pairs_non_tie"]]
    assert m["per_set"] == 3 and m["margin_over_length_ci_low"] <= 0
