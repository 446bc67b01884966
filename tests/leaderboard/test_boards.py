import csv
import io
import subprocess
import sys

import pytest
from django.test import override_settings

from apps.chain.models import Context
from apps.leaderboard import boards, entries
from apps.leaderboard.models import BoardEntry

pytestmark = pytest.mark.django_db
GLOBAL = "0x" + "00" * 32
CTX = "0x" + "ab" * 32
WAD = 10**18


def mid(n: int) -> str:
    return "0x" + f"{n:02x}" * 32


def rep(model: int, r: float, *, ra=0.5, rh=0.5, n_auto=5, n_human=0, block=10, context=CTX, name=None,
        band=None, spark=()):
    """A board entry as the indexer derives it (name: from the model's metadata; else its short id)."""
    return BoardEntry.objects.create(model_id=mid(model), context_id=context, name=name or entries.short_id(mid(model)),
                                     ra=int(ra * WAD), rh=int(rh * WAD), r=int(r * WAD), n_auto=n_auto,
                                     n_human=n_human, block_number=block, spark=list(spark),
                                     band_lo=band[0] if band else None, band_hi=band[1] if band else None,
                                     band_n=n_human if band else 0)


@pytest.fixture
def board_data():
    """Four ranked models (alpha and bravo cannot be told apart) and two not ranked, in the `math` context."""
    Context.objects.create(context_id=CTX, name="math", block_number=1)
    rep(1, 0.7, ra=0.9, rh=0.1, n_auto=5, n_human=3, block=30, name="alpha", band=(0.61, 0.78), spark=(0.5, 0.6, 0.7))
    rep(2, 0.7, ra=0.2, rh=0.8, n_auto=9, n_human=3, block=10, name="bravo", band=(0.66, 0.74))
    rep(3, 0.9, ra=0.5, rh=0.6, n_auto=2, n_human=4, block=20, name="charlie", band=(0.85, 0.93))
    rep(4, 0.2, ra=0.3, rh=0.3, n_auto=5, n_human=3, block=40, band=(0.1, 0.3))  # no metadata: its short id
    rep(5, 0.99, ra=0.99, rh=0.0, n_auto=4, n_human=0, block=50)  # not ranked: 4 evaluations < 5
    rep(6, 0.5, ra=0.4, rh=0.5, n_auto=9, n_human=0, block=60, name="delta")  # not ranked: nobody rated it


def names(rows):
    return [r.name for r in rows]


def test_models_whose_bands_overlap_share_a_rank_and_models_without_ratings_are_not_ranked(board_data):
    board = boards.build_board(CTX)
    assert board.context_name == "math" and board.sort == "r" and board.direction == "desc"
    assert names(board.ranked) == ["charlie", "alpha", "bravo", boards.short_id(mid(4))]
    assert [r.rank for r in board.ranked] == [1, 2, 2, 4]
    assert [r.rank_text for r in board.ranked] == ["1", "=2", "=2", "4"]
    # Not ranked, listed by their automatic score (their R never moved), with no rank.
    assert [r.model_id for r in board.provisional] == [mid(5), mid(6)]
    assert [r.rank_text for r in board.provisional] == ["–", "–"]
    assert board.ranked[0].url == f"/reputation/{mid(3)}/"
    assert "share a rank" in board.order_text and "0.133 wide on average" in board.order_text
    assert "2 of the 4 ranked models share one" in board.order_text


def test_a_rank_needs_rated_answers_however_many_automatic_scores_a_model_has(board_data):
    rep(7, 0.95, n_auto=500, n_human=2, name="echo", band=(0.94, 0.96))  # two ratings: below the minimum of 3
    board = boards.build_board(CTX)
    assert "echo" not in names(board.ranked) and "echo" in names(board.provisional)
    assert "rated at least 3 of its answers" in board.rule
    with override_settings(LLMCHAIN_BOARD_MIN_RATED=2):
        board = boards.build_board(CTX)
        assert names(board.ranked)[0] == "echo" and board.ranked[0].rank_text == "1"


def test_a_board_where_nobody_rated_ranks_nothing_and_says_so():
    Context.objects.create(context_id=CTX, name="math", block_number=1)
    for k, ra in enumerate((0.3, 0.8, 0.5), start=1):
        rep(k, 0.5, ra=ra, n_auto=9, name=f"m{k}")
    board = boards.build_board(CTX)
    assert board.ranked == [] and names(board.provisional) == ["m2", "m3", "m1"]  # by automatic score
    assert board.order_text.startswith("No model is ranked here yet")
    assert board.unranked_order_text == "Listed by their automatic score (Ra)."


def test_models_whose_automatic_scores_never_moved_are_said_to_be_listed_by_name(client):
    """A metric that earned no weight leaves every Ra at its start: the list is by name and says so."""
    Context.objects.create(context_id=CTX, name="math", block_number=1)
    for k, name in enumerate(("zulu", "alpha", "mike"), start=1):
        rep(k, 0.5, ra=0.5, n_auto=6, name=name)
    board = boards.build_board(CTX)
    assert names(board.provisional) == ["alpha", "mike", "zulu"]
    assert board.unranked_order_text.startswith("Listed by name: their automatic scores (Ra) are all the same")
    page = client.get(f"/?context={CTX}").content.decode()
    assert "Listed by name" in page and "Listed by their automatic score" not in page


@pytest.mark.parametrize("sort, direction, expected", [
    ("r", "asc", ["0x04", "bravo", "alpha", "charlie"]),
    ("ra", "desc", ["alpha", "charlie", "0x04", "bravo"]),
    ("ra", "asc", ["bravo", "0x04", "charlie", "alpha"]),
    ("rh", "desc", ["bravo", "charlie", "0x04", "alpha"]),
    ("n_auto", "desc", ["bravo", "0x04", "alpha", "charlie"]),  # 0x04 and alpha tie on 5: by name
    ("n_human", "desc", ["charlie", "0x04", "alpha", "bravo"]),
    ("block", "asc", ["bravo", "charlie", "alpha", "0x04"]),
    ("name", "asc", ["0x04", "alpha", "bravo", "charlie"]),
    ("name", "desc", ["charlie", "bravo", "alpha", "0x04"]),
])
def test_each_sort_order_keeps_the_rank_by_r(board_data, sort, direction, expected):
    board = boards.build_board(CTX, sort, direction)
    assert [n[:4] if n.startswith("0x") else n for n in names(board.ranked)] == expected
    ranks = {r.name: r.rank_text for r in board.ranked}
    assert ranks["charlie"] == "1" and ranks["alpha"] == "=2" and ranks["bravo"] == "=2"


def test_defaults_and_bad_sort_parameters(board_data):
    assert boards.build_board(CTX, "name").direction == "asc"
    lenient = boards.build_board(CTX, "bogus", "sideways")
    assert (lenient.sort, lenient.direction) == ("r", "desc")
    with pytest.raises(boards.BoardError):
        boards.build_board(CTX, "bogus", strict=True)
    with pytest.raises(boards.BoardError):
        boards.build_board(CTX, "r", "sideways", strict=True)
    with pytest.raises(boards.BoardError):
        boards.build_board("0xnope")
    with pytest.raises(boards.UnknownContext):
        boards.build_board("0x" + "ee" * 32)


def test_the_threshold_comes_from_settings(board_data):
    with override_settings(LLMCHAIN_BOARD_MIN_EVALUATIONS=7):
        board = boards.build_board(CTX)
        assert names(board.ranked) == ["alpha", "bravo", boards.short_id(mid(4))]  # 8, 12 and 8 evaluations
        assert len(board.provisional) == 3 and board.min_evaluations == 7
    with override_settings(LLMCHAIN_BOARD_MIN_EVALUATIONS=0):
        assert len(boards.build_board(CTX).ranked) == 4, "without ratings, no rank, whatever the minimum"


def test_global_board_needs_no_context_row():
    rep(1, 0.5, context=GLOBAL, n_human=3, band=(0.4, 0.6))
    board = boards.build_board(None)
    assert board.context_id == GLOBAL and board.context_name == "Global" and len(board.ranked) == 1


# --- the page ------------------------------------------------------------------------------------

def test_full_page_shows_sortable_headers_provisional_section_and_exports(client, board_data):
    response = client.get("/", {"context": CTX})
    page = response.content.decode()
    assert response.status_code == 200 and "<html" in page and "htmx.min.js" in page
    assert "math reputation board" in page
    assert page.index(">charlie<") < page.index(">alpha<") < page.index(">bravo<")
    assert f'href="/reputation/{mid(3)}/"' in page
    assert "0.6100–0.7800" in page and 'class="band"' in page and "How is the R band computed?" in page
    assert page.count('<svg class="spark"') == 1, "a sparkline where there is a history (alpha only here)"
    assert 'hx-target="#board-table"' in page and 'hx-push-url="true"' in page
    assert f"?context={CTX}&amp;sort=r&amp;dir=asc" in page, "clicking the current column reverses it"
    assert f"?context={CTX}&amp;sort=ra&amp;dir=desc" in page
    assert 'aria-sort="descending" data-sort="r"' in page
    assert "Not yet ranked" in page and "at least 5 evaluations" in page
    assert '<td class="rank">=2</td>' in page and "share a rank" in page
    assert page.index("Not yet ranked") > page.index(">bravo<")
    assert page.index(f'title="{mid(5)}"') > page.index("Not yet ranked")
    assert f'href="/api/boards/{CTX}?sort=r&amp;dir=desc"' in page
    assert f'href="/api/boards/{CTX}.csv?sort=r&amp;dir=desc"' in page


def test_htmx_header_click_gets_only_the_table(client, board_data):
    response = client.get("/", {"context": CTX, "sort": "name", "dir": "asc"},
                          headers={"HX-Request": "true", "HX-Target": "board-table"})
    page = response.content.decode()
    assert page.lstrip().startswith('<div id="board-table">')
    assert "<html" not in page and "<h1>" not in page and 'class="contexts"' not in page
    assert page.index(">alpha<") < page.index(">bravo<") < page.index(">charlie<")
    assert "HX-Request" in response["Vary"]
    assert f"/api/boards/{CTX}.csv?sort=name&amp;dir=asc" in page, "the exports follow the order"


def test_htmx_context_switch_gets_the_board(client, board_data):
    page = client.get("/", {"context": CTX}, headers={"HX-Request": "true", "HX-Target": "board"}).content.decode()
    assert page.lstrip().startswith('<div id="board">')
    assert "<html" not in page and "math reputation board" in page and 'id="board-table"' in page
    assert 'hx-target="#board"' in page
    restore = client.get("/", {"context": CTX}, headers={"HX-Request": "true", "HX-History-Restore-Request": "true"})
    assert "<html" in restore.content.decode(), "a history restore gets the whole page"


def test_every_answer_of_the_board_varies_on_the_htmx_headers_it_reads(client, board_data):
    for headers in ({}, {"HX-Request": "false"}, {"HX-Request": "true", "HX-Target": "board-table"}):
        response = client.get("/", {"context": CTX}, headers=headers)
        vary = {h.strip().lower() for h in response["Vary"].split(",")}
        assert {"hx-request", "hx-target", "hx-history-restore-request"} <= vary
    page = client.get("/", {"context": CTX}, headers={"HX-Request": "false"}).content.decode()
    assert "<html" in page, '"HX-Request: false" is not an htmx request'


def test_page_errors(client):
    assert client.get("/", {"context": "0xnope"}).status_code == 400
    assert client.get("/", {"context": "0x" + "ee" * 32}).status_code == 404


def test_empty_and_all_provisional_boards(client):
    Context.objects.create(context_id=CTX, name="math", block_number=1)
    assert "No evaluations recorded" in client.get("/", {"context": CTX}).content.decode()
    rep(1, 0.5, n_auto=1)
    page = client.get("/", {"context": CTX}).content.decode()
    assert "No model is ranked here yet" in page and "Not yet ranked" in page


def test_script_names_are_escaped(client):
    Context.objects.create(context_id=CTX, name="<script>x</script>", block_number=1)
    rep(1, 0.5, name="<script>m</script>", spark=(0.1, 0.2), n_human=3, band=(0.4, 0.6))
    for headers in ({}, {"HX-Request": "true", "HX-Target": "board"}):
        page = client.get("/", {"context": CTX}, headers=headers).content.decode()
        assert "<script>x</script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page
        assert "<script>m</script>" not in page and "&lt;script&gt;m&lt;/script&gt;" in page
    data = client.get(f"/api/boards/{CTX}").json()
    assert data["context"]["name"] == "<script>x</script>" and data["ranked"][0]["name"] == "<script>m</script>"


# --- the exports ---------------------------------------------------------------------------------

def test_json_export(client, board_data):
    response = client.get(f"/api/boards/{CTX}", {"sort": "name"})
    assert response.status_code == 200 and response["Content-Type"].startswith("application/json")
    data = response.json()
    assert data["context"] == {"context_id": CTX, "name": "math"}
    assert data["sort"] == "name" and data["dir"] == "asc" and data["min_evaluations"] == 5
    assert "at least 5 evaluations" in data["rule"] and data["generated_at"]
    assert [r["name"] for r in data["ranked"]][1:] == ["alpha", "bravo", "charlie"]
    alpha = data["ranked"][1]
    assert alpha["rank"] == 2 and alpha["tied"] is True and data["ranked"][3]["tied"] is False and alpha["r"] == str(7 * 10**17) and alpha["r_decimal"] == pytest.approx(0.7)
    assert alpha["ra"] == str(9 * 10**17) and alpha["rh_decimal"] == pytest.approx(0.1)
    assert alpha["url"] == f"/reputation/{mid(1)}/"
    assert (alpha["n_auto"], alpha["n_human"], alpha["evaluations"], alpha["block_number"]) == (5, 3, 8, 30)
    assert alpha["r_band"] == [0.61, 0.78] and alpha["r_band_n"] == 3 and alpha["spark"] == [0.5, 0.6, 0.7]
    assert data["provisional"][0]["r_band"] is None and "bootstrap" in data["band"]
    assert "share a rank" in data["order"]
    assert [(r["model_id"], r["rank"]) for r in data["provisional"]] == [(mid(5), None), (mid(6), None)]


@pytest.mark.parametrize("sort, direction", [("r", "desc"), ("name", "asc"), ("n_auto", "asc")])
def test_the_json_export_is_the_boards_data_encoded_whatever_order_its_rows_were_encoded_in(board_data, sort,
                                                                                            direction):
    import json

    from apps.leaderboard.api import board_data as data_of
    from apps.leaderboard.api import board_json

    standing = boards.standing(CTX)
    board_json(boards.board_from(standing, "name", "desc"))  # the rows' JSON kept from another order first
    board = boards.board_from(standing, sort, direction)
    assert board_json(board) == json.dumps(data_of(board), separators=(",", ":")).encode()


def test_json_export_errors(client, board_data):
    bad = client.get("/api/boards/0xnope")
    assert bad.status_code == 400 and "64 hexadecimal" in bad.json()["detail"]
    missing = client.get("/api/boards/0x" + "ee" * 32)
    assert missing.status_code == 404 and "No context" in missing.json()["detail"]
    assert client.get(f"/api/boards/{CTX}", {"sort": "bogus"}).status_code == 400
    assert client.get(f"/api/boards/{CTX}", {"dir": "up"}).status_code == 400
    assert client.get(f"/api/boards/{CTX.upper().replace('0X', '0x')}").json()["context"]["context_id"] == CTX


def test_csv_export(client, board_data):
    response = client.get(f"/api/boards/{CTX}.csv", {"sort": "rh", "dir": "asc"})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == boards.CSV_HEADER
    assert [r[3] for r in rows[1:5]] == ["alpha", boards.short_id(mid(4)), "charlie", "bravo"]
    assert rows[5][1] == "provisional" and rows[5][0] == "" and rows[5][2] == mid(5)
    assert rows[6][1] == "provisional" and rows[6][3] == "delta"
    alpha = dict(zip(rows[0], rows[1]))
    assert alpha["rank"] == "2" and alpha["status"] == "ranked" and alpha["r"] == str(7 * 10**17)
    assert alpha["r_decimal"] == "0.700000" and alpha["evaluations"] == "8" and alpha["block_number"] == "30"
    assert (alpha["r_band_low"], alpha["r_band_high"]) == ("0.610000", "0.780000")
    assert len(rows) == 7


def test_csv_export_errors(client):
    assert client.get("/api/boards/0xnope.csv").status_code == 400
    missing = client.get("/api/boards/0x" + "ee" * 32 + ".csv")
    assert missing.status_code == 404 and "No context" in missing.json()["detail"]


def test_schema_describes_the_exports_and_validates():
    result = subprocess.run([sys.executable, "manage.py", "spectacular", "--validate", "--fail-on-warn"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "/api/boards/{context_id}:" in result.stdout and "/api/boards/{context_id}.csv:" in result.stdout
    assert "text/csv" in result.stdout


def test_the_index_lists_every_board_global_first(client, board_data):
    rep(1, 0.5, context=GLOBAL, name="alpha")
    Context.objects.create(context_id="0x" + "cd" * 32, name="coding", block_number=2)
    data = client.get("/api/boards/").json()
    assert [(b["name"], b["models"]) for b in data["boards"]] == [("Global", 1), ("coding", 0), ("math", 6)]
    math = data["boards"][2]
    assert math["context_id"] == CTX and math["url"] == f"/api/boards/{CTX}" and math["csv_url"].endswith(".csv")
    assert client.get(math["url"]).status_code == 200


def test_a_cached_board_moves_with_its_own_version_only(client, board_data):
    other = "0x" + "cd" * 32
    Context.objects.create(context_id=other, name="coding", block_number=2)
    rep(7, 0.4, context=other, name="zulu")
    entries.bump()  # what the indexer does once it has derived entries

    def page(ctx):
        return client.get("/", {"context": ctx}).content.decode()

    assert ">alpha<" in page(CTX) and ">zulu<" in page(other)
    # Rows changed behind the indexer's back are not seen until their board's version moves.
    BoardEntry.objects.filter(context_id=CTX, model_id=mid(1)).update(name="alpha2")
    BoardEntry.objects.filter(context_id=other).update(name="zulu2")
    assert ">alpha<" in page(CTX) and ">zulu<" in page(other), "served from the cache"
    entries.bump({CTX})  # an evaluation in CTX
    assert ">alpha2<" in page(CTX) and ">zulu<" in page(other), "only the moved board is re-rendered"
    entries.bump()  # e.g. a new context: every board
    assert ">zulu2<" in page(other)


def test_one_vote_shows_an_arena_score_without_an_interval(client, board_data):
    from apps.leaderboard.models import ArenaEntry

    ArenaEntry.objects.create(model_id=mid(1), context_id=CTX, elo=1131.2, ci_low=1131.2, ci_high=1131.2, rank=1,
                              battles=1, wins=1, ties=0, losses=0, win_rate=1.0)
    ArenaEntry.objects.create(model_id=mid(2), context_id=CTX, elo=1040.0, ci_low=990.0, ci_high=1090.0, rank=1,
                              battles=12, wins=6, ties=0, losses=6, win_rate=0.5)
    page = client.get("/", {"context": CTX}).content.decode()
    alpha = page[page.index(f'<tr data-model="{mid(1)}"'):]
    alpha = alpha[:alpha.index("</tr>")]
    assert ">1131</span> <small class=\"muted\">1 vote</small>" in alpha and "1131–1131" not in alpha
    assert "too few votes for an interval" in alpha
    assert ">1040</span> <small class=\"muted\">990–1090</small>" in page


def test_a_refresh_brings_the_boards_standing_to_its_current_version_and_says_since_when(board_data):
    import time

    boards.forget_standings()
    entries.bump({CTX})
    old = boards.standing(CTX)
    entries.bump({CTX})
    assert old.version and boards.standing(CTX, within=60) is old, "the views reuse a standing for a while"
    before = time.time()
    version, since = boards.current_standing(CTX)
    assert version == entries.version(CTX) != old.version and before <= since <= time.time()
    assert boards.standing(CTX, within=60).version == version, "the views of the refresh show it"
    again = boards.current_standing(CTX)
    assert again[0] == version and again[1] >= since, "kept, and current from this later read"
    assert boards.current_standing("0x" + "ee" * 32) is None, "a board that does not exist"
