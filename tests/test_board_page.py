import pytest

from apps.chain.models import Context
from apps.leaderboard.models import BoardEntry

pytestmark = pytest.mark.django_db
GLOBAL = "0x" + "00" * 32


def test_the_board_ranks_models_by_r_in_the_chosen_context(client):
    """Both rated three times, with bands apart: ranked 1 and 2 by R."""
    ctx = "0x" + "ab" * 32
    Context.objects.create(context_id=ctx, name="math", block_number=1)
    Context.objects.create(context_id=GLOBAL, name="global", block_number=1)
    for model, r in (("0x" + "01" * 32, 4 * 10**17), ("0x" + "02" * 32, 9 * 10**17)):
        BoardEntry.objects.create(model_id=model, context_id=ctx, name=model[:10], ra=5 * 10**17, rh=5 * 10**17,
                                  r=r, n_auto=4, n_human=3, block_number=3, band_lo=r / 10**18 - 0.05,
                                  band_hi=r / 10**18 + 0.05, band_n=3)
    page = client.get("/", {"context": ctx}).content.decode()
    assert "math reputation board" in page
    assert page.index("0.9000") < page.index("0.4000")
    assert page.count(">Global<") == 1, "the global context is listed once"


def test_a_context_name_is_escaped(client):
    ctx = "0x" + "cd" * 32
    Context.objects.create(context_id=ctx, name="<script>alert(1)</script>", block_number=1)
    page = client.get("/", {"context": ctx}).content.decode()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_board_says_how_much_a_rating_weighs_under_the_deployment_s_lambda(client, settings, tmp_path):
    """With no deployment to read (the chain away), the board says λ is the value the site deploys with."""
    settings.LLMCHAIN_DEPLOYMENT = tmp_path / "none.json"
    settings.LLMCHAIN_DECAY_LAMBDA = "0.01"
    ctx = "0x" + "ef" * 32
    Context.objects.create(context_id=ctx, name="math", block_number=1)
    page = client.get("/", {"context": ctx}).content.decode()
    assert "How much does a rating weigh?" in page
    assert "λ" not in page and "F_D" not in page, "the formula is on the page that explains it"
    assert "an hour after the last counts for 0.291" in page and "a day after the last counts for 1.000" in page
    how = client.get("/how/").content.decode()
    assert "λ = 0.01 per minute, the value this site deploys with" in how and "F<sub>D</sub>" in how
    board = client.get(f"/api/boards/{ctx}").json()
    assert board["lambda_per_minute"] == "0.01" and "0.291" in board["weight"]
