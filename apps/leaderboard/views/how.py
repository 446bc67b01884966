"""/how/: how the numbers on the boards and under a rating are computed, with their symbols and formulas
(the pages people read speak in words and link here)."""

from django.shortcuts import render
from django.utils.safestring import mark_safe

from apps.chain.ledger import deployment_lambda
from lib import metaeval, weighted

from .. import boards


def how_computed(request):
    """The formulas behind R, a rating's weight, the R band, the ranks and the arena scores."""
    lambda_wad, from_chain = deployment_lambda()
    return render(request, "leaderboard/how.html", {
        "weight_text": mark_safe(boards.weight_formula_text(lambda_wad, from_chain)), "band_text": boards.BAND_TEXT,
        "rule": boards.rule_text(boards.min_evaluations()), "arena_text": boards.arena_text(),
        "lambda": boards.format_lambda(lambda_wad), "min_human": weighted.MIN_HUMAN,
        "rounds": f"{metaeval.BOOTSTRAP_ROUNDS:,}",
        "rounds_until": f"{metaeval.BOOTSTRAP_DRAWS // metaeval.BOOTSTRAP_ROUNDS:,}",
        "draws": f"{metaeval.BOOTSTRAP_DRAWS // 10**6} million", "min_rounds": metaeval.MIN_BOOTSTRAP_ROUNDS,
        "min_rounds_from": f"{metaeval.BOOTSTRAP_DRAWS // metaeval.MIN_BOOTSTRAP_ROUNDS:,}"})
