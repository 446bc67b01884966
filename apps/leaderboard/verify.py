"""Rebuild the boards from the chain alone, and compare a served board with them cell by cell.

The chain side touches no database: it reads the Reputation contract's events and state over
JSON-RPC and each model's latest metadata record from IPFS (checked against its CID), and folds
them through the same `lib.boardstats.summarize` the indexer feeds from its tables. It also reads
the contract's state at the same block: every pair's `reputation(modelId, contextId)` must equal
its last ReputationUpdated event, and every context's `contextStats` the sums of those.

The arena columns are rebuilt from the BattleOpened and Voted events through the same
`arena.compute` the site's refresh uses, with the bootstrap rounds the served board states; the
style-controlled ones also need each voted answer's text, read from its evidence record on IPFS
(the AutoEvaluated event's evidenceCid, checked against the CID). `style=False` skips those reads,
and the style columns are then not compared (the report says so).

How far the automatic score agrees with people here (the board's validity figures) and the weighted
score are rebuilt from the same votes: each voted answer's Sa from its AutoEvaluated event (with a
reference) and its length from its evidence record, counted and bootstrapped by `lib.weighted` as the
site does; the weighted score from the rebuilt rows with the weight those figures give. They need the
answers' lengths, so `style=False` leaves them unchecked too. A differing figure is named in plain words
("the agreement figure of the automatic score in coding differs: served 71%, rebuilt 64%").

How alike people's ratings and the automatic score rank the answers here is rebuilt the same way: each
rated answer's Sa from its AutoEvaluated event (with a reference), its Sh from its last HumanEvaluated
event and its length from its evidence record, through the site's `lib.weighted.rating_validity`
(again not with `style=False`).

The served side is this site's board table (`boards.build_board`) or another site's JSON API
(`GET <site>/api/boards/<context_id>`), so anyone can check a site they do not run.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone as dt_timezone
from typing import Any

import httpx
from django.conf import settings
from django.core.cache import cache

from apps.chain.client import ChainClient, Reverted, RpcError, from_hex, to_hex
from apps.chain.evidence import EvidenceStore, LocalBlobStore, evidence_answer, kubo_client
from apps.chain.indexer import fetch_all
from apps.chain.ipfs import KuboClient
from apps.chain.ledger import Deployment, Ledger
from apps.chain.weights import WeightCheck, check_weights
from lib import outbound
from lib.boardstats import Change, Evaluation, summarize
from lib.ids import b32, hex32
from lib.reputation import GLOBAL_CONTEXT_ID, WAD
from lib.weighted import VoteCounts, rating_validity, vote_outcome, vote_validity

from . import arena, boards, weighting
from .boards import BoardRow, arena_fields
from .entries import metadata_name, short_id

BAND_TOLERANCE = 1e-6
ARENA_TOLERANCE = 1e-6  # Elo points, interval ends and win rates: the same recipe gives the same floats
# (key, label) of the cells compared for each model, in table order.
REPUTATION_COLUMNS = (("rank", "Rank"), ("name", "Name"), ("r", "R"), ("ra", "Ra"), ("rh", "Rh"),
                      ("n_auto", "n auto"), ("n_human", "n human"), ("block_number", "Block"),
                      ("changed_at", "Changed at (UTC)"), ("band_lo", "Band low"), ("band_hi", "Band high"))
ARENA_COLUMNS = (("arena_rank", "Arena rank"), ("arena_elo", "Arena Elo"), ("arena_ci_low", "Arena low"),
                 ("arena_ci_high", "Arena high"), ("battles", "Battles"), ("arena_win_rate", "Win rate"))
STYLE_COLUMNS = (("style_rank", "Style rank"), ("style_elo", "Style Elo"), ("style_ci_low", "Style low"),
                 ("style_ci_high", "Style high"))
# The weighted score: a mean of values rounded to 1e-6 (lib.weighted), of inputs compared at 1e-6.
WEIGHTED_COLUMNS = (("weighted", "Weighted"), ("weighted_low", "Weighted low"), ("weighted_high", "Weighted high"),
                    ("weighted_rank", "Weighted rank"))
WEIGHTED_TOLERANCE = 2e-6
COLUMNS = REPUTATION_COLUMNS + ARENA_COLUMNS + STYLE_COLUMNS + WEIGHTED_COLUMNS
FLOAT_COLUMNS = {"band_lo": BAND_TOLERANCE, "band_hi": BAND_TOLERANCE,
                 **{key: ARENA_TOLERANCE for key, _ in ARENA_COLUMNS + STYLE_COLUMNS
                    if key not in ("arena_rank", "battles", "style_rank")},
                 **{key: WEIGHTED_TOLERANCE for key, _ in WEIGHTED_COLUMNS if key != "weighted_rank"}}
FIGURE_TOLERANCE = 1e-9  # the same counts give the same figures: rounded shares and weights compare as equal
ANSWER_TIMEOUT_S = 5
ABSENT = "absent"  # a cell of a model that one side does not list


class VerifyError(Exception):
    """The chain, IPFS or the served site could not be read as needed; the message says which."""


# --- reading IPFS without the database ---------------------------------------------------------

class CidReader(EvidenceStore):
    """The evidence store without its pin rows: verified bytes of a CID from a local blob directory
    and/or a Kubo-compatible node, so a rebuild needs nothing but a node, IPFS and the addresses."""

    def __init__(self, local: LocalBlobStore | None = None, kubo: KuboClient | None = None):
        super().__init__(local, kubo, read_pins=False)


def default_reader() -> CidReader:
    """This site's IPFS as configured: the local blob directory, and the node with the kubo backend."""
    return CidReader(LocalBlobStore(settings.LLMCHAIN_IPFS_DIR),
                     kubo_client() if settings.LLMCHAIN_IPFS_BACKEND == "kubo" else None)


# --- the chain side ----------------------------------------------------------------------------

@dataclass(frozen=True)
class StateIssue:
    """The contract's state disagrees with what its events say."""

    context_id: str
    model_id: str | None  # None: the context's running sums (contextStats)
    text: str


@dataclass(frozen=True)
class ChainBoards:
    """Every board as the chain alone gives it, at block `head`."""

    chain_id: int
    reputation: str  # the Reputation contract's address
    from_block: int
    head: int
    events: int
    contexts: dict[str, str]  # context id -> name: the global context first, then in chain order
    rows: dict[str, list[BoardRow]]  # context id -> its models' rows (not ranked)
    issues: tuple[StateIssue, ...]
    last: dict[tuple[str, str], tuple[int, int, int, int, int]]  # pair -> (ra, rh, r, nAuto, nHuman) last emitted
    lambda_wad: int | None = None  # the contract's lambda of F_D at `head` (None: it has no lambdaWad)
    built_at: float = field(default_factory=time.time)
    # The arena: each context's counted votes (ArenaVote, in battle id order), the style of the voted answers
    # read from IPFS (interaction id -> (length, Markdown density)), and how many could not be read.
    votes: dict[str, list[ArenaVote]] = field(default_factory=dict)
    answers: dict[str, tuple[int, float]] = field(default_factory=dict)
    answers_unreadable: int = 0
    style_checked: bool = True
    weights: WeightCheck = field(default_factory=WeightCheck)  # every wA against its evidence (IPFS)
    scores: dict[str, int] = field(default_factory=dict)  # voted answer -> its Sa, where it had a reference
    # Rated answer with a reference -> (its context, Sa, Sh); their lengths are in `answers` where read.
    rated: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    _arenas: dict = field(default_factory=dict, compare=False, repr=False)  # (context, rounds) -> ArenaResult

    @property
    def ok(self) -> bool:
        return not self.issues

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        return COLUMNS if self.style_checked else REPUTATION_COLUMNS + ARENA_COLUMNS

    @property
    def counted_votes(self) -> int:
        return sum(len(v) for c, v in self.votes.items() if c != GLOBAL_CONTEXT_ID)

    def arena(self, context_id: str, bootstrap: int, style_bootstrap: int) -> arena.ArenaResult:
        """The board's arena from the events, with the served board's rounds (computed once per rounds)."""
        key = (context_id, bootstrap, style_bootstrap)
        if key not in self._arenas:
            self._arenas[key] = arena.compute(context_id, vote_columns(self.votes.get(context_id, []), self.answers),
                                              bootstrap=bootstrap, style_bootstrap=style_bootstrap)
        return self._arenas[key]

    def vote_counts(self, context_id: str) -> VoteCounts:
        """The board's counted votes that preferred one answer, by whether Sa and the length rule picked
        the voted one (`apps.annotate.site_validity.vote_counts` on the site's tables): a vote with an
        answer lacking Sa (no reference) or a readable text counts as without scores."""
        outcomes, decided, unscored = [], 0, 0
        for v in self.votes.get(context_id, []):
            if v.outcome not in (1, 2):
                continue
            decided += 1
            sa, sb = self.scores.get(v.interaction_a), self.scores.get(v.interaction_b)
            a, b = self.answers.get(v.interaction_a), self.answers.get(v.interaction_b)
            if None in (sa, sb, a, b):
                unscored += 1
            else:
                outcomes.append(vote_outcome(v.outcome, sa, sb, a[0], b[0]))
        return VoteCounts.of(outcomes, decided, unscored)

    def validity(self, context_id: str) -> dict | None:
        """The board's validity figures (lib.weighted.vote_validity) from the votes; None when the voted
        answers were not read (`style=False`): they need their lengths."""
        if not self.style_checked:
            return None
        key = ("validity", context_id)
        if key not in self._arenas:
            self._arenas[key] = vote_validity(self.vote_counts(context_id))
        return self._arenas[key]

    def ratings(self, context_id: str) -> dict | None:
        """The board's figures of people's ratings against the automatic score (lib.weighted.rating_validity)
        over the rated answers whose text was read (every context's on the global board); None when the
        answers were not read (`style=False`): the figures stand beside the answers' lengths."""
        if not self.style_checked:
            return None
        key = ("ratings", context_id)
        if key not in self._arenas:
            self._arenas[key] = rating_validity(
                (iid, sa, sh, self.answers[iid][0]) for iid, (context, sa, sh) in self.rated.items()
                if iid in self.answers and context_id in (GLOBAL_CONTEXT_ID, context))
        return self._arenas[key]

    def rated_unread(self, context_id: str) -> int:
        """Rated answers of the board whose evidence record could not be read (left out of its figures)."""
        return sum(1 for iid, (context, _, _) in self.rated.items()
                   if iid not in self.answers and context_id in (GLOBAL_CONTEXT_ID, context))

    def issues_of(self, context_id: str) -> list[StateIssue]:
        return [i for i in self.issues if i.context_id == context_id]


def boards_from_events(events: list[dict], reader) -> tuple[dict, dict, dict]:
    """(contexts, rows per context, last emitted REP per pair) from the events alone.

    The same inputs the indexer folds into its tables: per pair its ReputationUpdated events in
    chain order, and the human-rated interactions of the model (all of them for the global
    context, else those of the context); names from each model's latest metadata CID."""
    contexts = {GLOBAL_CONTEXT_ID: boards.GLOBAL_NAME}
    metadata: dict[str, str] = {}  # model -> its latest metadata CID
    autos: dict[str, tuple[str, str, bool, int, int]] = {}  # interaction -> (model, context, ref, sA, wA)
    humans: dict[str, tuple[int, int]] = {}  # interaction -> (sH, wH)
    changes: dict[tuple[str, str], list[Change]] = defaultdict(list)
    for e in events:
        a, name = e["args"], e["event"]
        if name == "ContextAdded":
            contexts.setdefault(hex32(a["contextId"]), a["name"])  # the global one keeps its board name
        elif name in ("ModelAdded", "ModelMetadataUpdated"):
            metadata[hex32(a["modelId"])] = a["metadataCid"]
        elif name == "AutoEvaluated":
            autos[hex32(a["interactionId"])] = (hex32(a["modelId"]), hex32(a["contextId"]), bool(a["hasReference"]),
                                                int(a["sA"]), int(a["wA"]))
        elif name == "HumanEvaluated":
            humans[hex32(a["interactionId"])] = (int(a["sH"]), int(a["wH"]))
        elif name == "ReputationUpdated":
            pair = (hex32(a["modelId"]), hex32(a["contextId"]))
            changes[pair].append(Change(hex32(a["interactionId"]), int(a["rA"]), int(a["rH"]), int(a["r"]),
                                        int(a["nAuto"]), int(a["nHuman"]), e["block"], e.get("timestamp")))
    rated: dict[str, dict[str, list[Evaluation]]] = defaultdict(lambda: defaultdict(list))  # model -> context -> evs
    for iid, (sh, wh) in humans.items():
        if iid in autos:
            model, context, ref, sa, wa = autos[iid]
            rated[model][context].append(Evaluation(iid, ref, sa, wa, sh, wh))
    names = {m: (metadata_name(metadata[m], reader) if m in metadata else None) or short_id(m)
             for m in {m for m, _ in changes}}
    rows: dict[str, list[BoardRow]] = {c: [] for c in contexts}
    last = {}
    for (model, context), history in sorted(changes.items()):
        if context == GLOBAL_CONTEXT_ID:
            evaluations = {ev.interaction_id: ev for evs in rated[model].values() for ev in evs}
        else:
            evaluations = {ev.interaction_id: ev for ev in rated[model][context]}
        s = summarize(model, context, history, evaluations)
        rows.setdefault(context, []).append(BoardRow(
            model_id=model, name=names[model], r=s.r, ra=s.ra, rh=s.rh, n_auto=s.n_auto, n_human=s.n_human,
            block_number=s.block, changed_at=s.changed_at, spark=tuple(s.spark), band_lo=s.band_lo,
            band_hi=s.band_hi, band_n=s.band_n))
        last[(model, context)] = (s.ra, s.rh, s.r, s.n_auto, s.n_human)
        contexts.setdefault(context, short_id(context))
    return contexts, rows, last


@dataclass(frozen=True)
class ArenaVote:
    """A counted vote as the BattleOpened and Voted events give it."""

    battle_id: str
    model_a: str
    model_b: str
    outcome: int  # 1 A better, 2 B better, 3 tie, 4 both bad
    interaction_a: str
    interaction_b: str
    vote_block: int


def scores_from_events(events: list[dict], interaction_ids: set[str]) -> dict[str, int]:
    """Sa of these interactions, from their AutoEvaluated events, where it was scored against references."""
    out = {}
    for e in events:
        if e["event"] == "AutoEvaluated" and e["args"]["hasReference"]:
            iid = hex32(e["args"]["interactionId"])
            if iid in interaction_ids:
                out[iid] = int(e["args"]["sA"])
    return out


def rated_from_events(events: list[dict]) -> dict[str, tuple[str, int, int]]:
    """(context, Sa, Sh) of every interaction scored against references and rated by people: its
    AutoEvaluated event with a reference and its last HumanEvaluated event."""
    autos: dict[str, tuple[str, int]] = {}
    humans: dict[str, int] = {}
    for e in events:
        a, name = e["args"], e["event"]
        if name == "AutoEvaluated" and a["hasReference"]:
            autos[hex32(a["interactionId"])] = (hex32(a["contextId"]), int(a["sA"]))
        elif name == "HumanEvaluated":
            humans[hex32(a["interactionId"])] = int(a["sH"])
    return {iid: (*autos[iid], sh) for iid, sh in humans.items() if iid in autos}


def votes_from_events(events: list[dict]) -> tuple[dict[str, list[ArenaVote]], dict[str, str]]:
    """(each board's counted votes in battle id order, the global board's being every context's; the
    evidence CID of every interaction, from its AutoEvaluated event)."""
    battles: dict[str, dict] = {}
    cids: dict[str, str] = {}
    votes: dict[str, list[ArenaVote]] = defaultdict(list)
    for e in events:
        a, name = e["args"], e["event"]
        if name == "AutoEvaluated":
            cids[hex32(a["interactionId"])] = a["evidenceCid"]
        elif name == "BattleOpened":
            battles[hex32(a["battleId"])] = a
        elif name == "Voted" and a["counted"]:
            battle_id = hex32(a["battleId"])
            b = battles[battle_id]  # the contract takes no vote on a battle it does not hold
            votes[hex32(b["contextId"])].append(ArenaVote(
                battle_id, hex32(b["modelA"]), hex32(b["modelB"]), int(a["outcome"]), hex32(b["interactionA"]),
                hex32(b["interactionB"]), e["block"]))
    if votes:
        votes[GLOBAL_CONTEXT_ID] = [v for vs in votes.values() for v in vs]
    return {c: sorted(vs, key=lambda v: v.battle_id) for c, vs in votes.items()}, cids


def read_answers(interaction_ids: set[str], cids: dict[str, str], reader) -> dict[str, tuple[int, float]]:
    """The style (length, Markdown density) of each answer whose evidence record can be read."""
    out = {}
    for iid in sorted(interaction_ids):
        text = evidence_answer(cids[iid], iid, reader) if iid in cids else None
        if text is not None:
            out[iid] = arena.answer_style(text)
    return out


def vote_columns(votes: list[ArenaVote], answers: dict[str, tuple[int, float]]) -> arena.VoteColumns:
    unknown = (None, None)
    return arena.VoteColumns.of(
        (v.model_a, v.model_b, v.outcome, *answers.get(v.interaction_a, unknown),
         *answers.get(v.interaction_b, unknown), v.vote_block) for v in votes)


def _wad(x: int) -> str:
    return f"{x // WAD}.{x % WAD:018d}"


def check_state(ledger: Ledger, last: dict, contexts, block: int) -> tuple[StateIssue, ...]:
    """The contract's state at `block` against the last emitted REP of every pair and the sums of
    every context (one JSON-RPC batch of eth_calls)."""
    abi = ledger.abis["reputation"]
    rep_fn, stats_fn = abi.fn("reputation"), abi.fn("contextStats")
    to, at = ledger.deployment.reputation, hex(block)
    pairs, contexts = sorted(last), sorted(contexts)
    calls = [("eth_call", [{"to": to, "data": to_hex(rep_fn.encode(b32(m), b32(c)))}, at]) for m, c in pairs]
    calls += [("eth_call", [{"to": to, "data": to_hex(stats_fn.encode(b32(c)))}, at]) for c in contexts]
    replies = ledger.client.batch(calls) if calls else []
    for reply in replies:
        if isinstance(reply, RpcError):
            raise VerifyError(f"the node could not read the contract's state at block {block}: {reply}")
    issues = []
    for (m, c), reply in zip(pairs, replies):
        state = tuple(rep_fn.decode_output(from_hex(reply)))
        if state != last[(m, c)]:
            issues.append(StateIssue(c, m, f"reputation({short_id(m)}, {short_id(c)}) on-chain is "
                                           f"{_rep_text(state)}, its last ReputationUpdated event says "
                                           f"{_rep_text(last[(m, c)])}"))
    for c, reply in zip(contexts, replies[len(pairs):]):
        exists, n, sra, srh, sr = stats_fn.decode_output(from_hex(reply))
        mine = [v for (m, cc), v in last.items() if cc == c]
        expected = (True, len(mine), sum(v[0] for v in mine), sum(v[1] for v in mine), sum(v[2] for v in mine))
        if (exists, n, sra, srh, sr) != expected:
            issues.append(StateIssue(c, None, f"contextStats({short_id(c)}) on-chain is (exists {exists}, {n} "
                                              f"models, sums Ra {_wad(sra)}, Rh {_wad(srh)}, R {_wad(sr)}); the "
                                              f"events give ({expected[1]} models, sums Ra {_wad(expected[2])}, "
                                              f"Rh {_wad(expected[3])}, R {_wad(expected[4])})"))
    return tuple(issues)


def weight_issues(weights: WeightCheck) -> tuple[StateIssue, ...]:
    return tuple(StateIssue(i["context"], i["model"], f"interaction {short_id(i['interaction'])}: {i['text']}")
                 for i in weights.issues)


def _rep_text(v: tuple) -> str:
    return f"(Ra {_wad(v[0])}, Rh {_wad(v[1])}, R {_wad(v[2])}, nAuto {v[3]}, nHuman {v[4]})"


def rebuild_from_chain(ledger: Ledger, store=None, *, to_block: int | None = None, style: bool = True) -> ChainBoards:
    """Every board from the contract's events and state up to `to_block` (the head by default),
    names and the voted answers (unless `style` is False) from IPFS through `store` (anything with
    `get(cid, timeout=...)`; by default this site's IPFS, read without the database). Raises ChainError
    when the node cannot be read, VerifyError when it cannot give the state at that block."""
    reader = store if store is not None else default_reader()
    head = ledger.client.block_number() if to_block is None else to_block
    start = ledger.deployment.deployBlock
    events = fetch_all(ledger, start, head)
    contexts, rows, last = boards_from_events(events, reader)
    votes, cids = votes_from_events(events)
    voted = {iid for v in votes.get(GLOBAL_CONTEXT_ID, []) for iid in (v.interaction_a, v.interaction_b)}
    rated = rated_from_events(events)
    answers = read_answers(voted | set(rated), cids, reader) if style else {}
    weights = check_weights(events, reader)
    issues = check_state(ledger, last, contexts, head) + weight_issues(weights)
    try:  # the weights in the events were computed with it; a contract from before it has none
        lambda_wad = ledger.view("reputation", "lambdaWad", block=head)[0]
    except (Reverted, RpcError, ValueError):
        lambda_wad = None
    return ChainBoards(chain_id=ledger.deployment.chainId, reputation=ledger.deployment.reputation, from_block=start,
                       head=head, events=len(events), contexts=contexts, rows=rows, issues=issues, last=last,
                       lambda_wad=lambda_wad, votes=votes, answers=answers, weights=weights,
                       scores=scores_from_events(events, voted), rated=rated,
                       answers_unreadable=sum(1 for iid in voted if iid not in answers) if style else 0,
                       style_checked=style)


# The verify page rebuilds once per block: visitors of the same block share the rebuild, and a block
# reached without any event of the contracts only re-reads the state.
CHAIN_CACHE_S = 600
REBUILD_MAX_AGE_S = 60  # names (IPFS) are re-read at least this often


def chain_at_block(ledger: Ledger, block: int, store=None) -> ChainBoards:
    """`rebuild_from_chain` up to `block`, kept in the cache per block; from the last rebuild when no
    event of the contracts came since (the state is read again at `block`)."""
    d = ledger.deployment
    where = f"{d.chainId}:{d.reputation.lower()}:{d.deployBlock}"
    chain = cache.get(f"verify:chain-at:{where}:{block}")
    if chain is not None:
        return chain
    previous: ChainBoards | None = cache.get(f"verify:chain-last:{where}")
    if previous is not None and previous.head < block and time.time() - previous.built_at < REBUILD_MAX_AGE_S \
            and not ledger.client.logs([d.identity, d.reputation], previous.head + 1, block):
        chain = replace(previous, head=block, issues=check_state(ledger, previous.last, previous.contexts, block)
                        + weight_issues(previous.weights))
    else:
        chain = rebuild_from_chain(ledger, store, to_block=block)
    cache.set(f"verify:chain-at:{where}:{block}", chain, CHAIN_CACHE_S)
    if previous is None or previous.head <= block:
        cache.set(f"verify:chain-last:{where}", chain, CHAIN_CACHE_S)
    return chain


def served_at_block(context_id: str, cursor: str, tries: int = 5) -> tuple[int | None, ServedBoard]:
    """This site's board of `context_id` and the block it was folded up to (the indexer's cursor, None
    before anything was indexed): the indexer moves its cursor in the transaction that folds, so a
    board read between two equal readings of the cursor is the board at that block."""
    from apps.chain.models import IndexerCursor

    def block() -> int | None:
        return IndexerCursor.objects.filter(name=cursor).values_list("last_block", flat=True).first()

    at = block()
    for _ in range(tries):
        served = SiteBoards().board(context_id)
        after = block()
        if after == at:
            return at, served
        at = after
    return at, SiteBoards().board(context_id)


def check_at_block(ledger: Ledger, context_id: str, served: ServedBoard, block: int, store=None) -> dict:
    """The served board (at `block`) against the chain's rebuild at that very block: what the verify
    page shows. The rebuild is shared between contexts and visitors of the same block; it touches no
    database, so it may run in a background thread."""
    chain = chain_at_block(ledger, block, store)
    if served.context_name is None and context_id not in chain.contexts:
        return {"unknown": True}
    contexts = [(c, name) for c, name in chain.contexts.items() if c != GLOBAL_CONTEXT_ID]
    return {"report": check_board(context_id, served, chain), "chain": chain,
            "contexts": sorted(contexts, key=lambda c: c[1].casefold())}


def visitor_ledger(rpc_url: str, reputation: str, identity: str | None = None, from_block: int = 0,
                   poa: bool = False) -> Ledger:
    """A ledger from nothing but a node and the contract addresses. Boards need only the Reputation
    contract's events; without the Identity address only those are read."""
    client = ChainClient(rpc_url, poa=poa, retries=1)
    deployment = Deployment(chainId=client.chain_id, identity=identity or reputation, access="",
                            reputation=reputation, deployBlock=from_block)
    return Ledger(client, deployment)


# --- the served side ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ServedBoard:
    context_id: str
    context_name: str | None  # None: the site serves no board for this context
    min_evaluations: int
    rows: list[BoardRow]  # ranked ones with their served rank, then provisional ones (rank None)
    arena_rounds: tuple[int, int] | None = None  # the bootstrap rounds the served arena states (None: none yet)
    arena_stale: bool = False  # the site says newer votes were being counted
    validity: dict | None = None  # the automatic score's validity figures it serves (None: it serves none)
    ratings: dict | None = None  # its figures of people's ratings against the automatic score (None: none)


class SiteBoards:
    """This site's boards, as `boards.build_board` serves them from the board table."""

    label = "this site's board table"

    def context_ids(self) -> list[str]:
        return [GLOBAL_CONTEXT_ID] + [c.context_id for c in boards.board_contexts()]

    def board(self, context_id: str) -> ServedBoard:
        try:
            # The table as it is now, not the standing this process keeps for the board's version: a row
            # changed behind the indexer's back is what this check is for.
            board = boards.build_board(context_id, kept=False)
        except boards.UnknownContext:
            return ServedBoard(context_id, None, boards.min_evaluations(), [])
        a = board.arena
        return ServedBoard(context_id, board.context_name, board.min_evaluations, board.rows,
                           (a.bootstrap, a.style_bootstrap) if a else None, a.stale if a else False,
                           board.validity["ra"], board.ratings)


class RemoteSite:
    """Another site's boards, read from its JSON API (`GET <url>/api/boards/<context_id>`), through the
    outbound guard (a loopback or private site only if LLMCHAIN_OUTBOUND_ALLOW admits it; no redirects)."""

    MAX_BOARD_BYTES = 32 * 1024 * 1024

    def __init__(self, url: str, timeout: float = 20):
        self.url = url.rstrip("/")
        self.label = self.url
        self._http = outbound.client(settings.LLMCHAIN_OUTBOUND_ALLOW, timeout=timeout,
                                     max_bytes=self.MAX_BOARD_BYTES, max_seconds=3 * timeout)

    def context_ids(self) -> list[str]:
        """The boards the site lists (`GET <url>/api/boards/`), so a board it serves for a context
        the chain does not have is reported too."""
        url = f"{self.url}/api/boards/"
        try:
            response = self._http.get(url, headers={"Accept": "application/json"})
        except (httpx.HTTPError, outbound.OutboundError) as exc:
            raise VerifyError(f"cannot read the served board list at {url}: {exc}") from exc
        if response.status_code != 200:
            raise VerifyError(f"the served board list at {url} answered HTTP {response.status_code}")
        try:
            return [str(b["context_id"]).lower() for b in response.json()["boards"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise VerifyError(f"the served board list at {url} is not a board list of this API: {exc!r}") from exc

    def board(self, context_id: str) -> ServedBoard:
        url = f"{self.url}/api/boards/{context_id}"
        try:
            response = self._http.get(url, headers={"Accept": "application/json"})
        except (httpx.HTTPError, outbound.OutboundError) as exc:
            raise VerifyError(f"cannot read the served board at {url}: {exc}") from exc
        if response.status_code == 404:
            return ServedBoard(context_id, None, 0, [])
        if response.status_code != 200:
            raise VerifyError(f"the served board at {url} answered HTTP {response.status_code}")
        try:
            return self.served_board(context_id, response.json())
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            raise VerifyError(f"the served board at {url} is not a board of this API: {exc!r}") from exc

    @classmethod
    def served_board(cls, context_id: str, data: dict) -> ServedBoard:
        """A board as the JSON API serves it (raises ValueError, KeyError, TypeError... when it is not one)."""
        rows = [cls._row(r) for r in data["ranked"] + data["provisional"]]
        a = data.get("arena")
        validity = (data.get("validity") or {}).get("columns", {}).get("ra")
        ratings = (data.get("validity") or {}).get("ratings")
        return ServedBoard(context_id, data["context"]["name"], int(data["min_evaluations"]), rows,
                           (int(a["bootstrap"]), int(a["style_bootstrap"])) if a else None,
                           bool(a["stale"]) if a else False, dict(validity) if validity is not None else None,
                           dict(ratings) if ratings is not None else None)

    @staticmethod
    def _row(r: dict) -> BoardRow:
        band = r.get("r_band")
        changed = r.get("changed_at")
        return BoardRow(model_id=str(r["model_id"]).lower(), name=str(r["name"]), r=int(r["r"]), ra=int(r["ra"]),
                        rh=int(r["rh"]), n_auto=int(r["n_auto"]), n_human=int(r["n_human"]),
                        block_number=int(r["block_number"]),
                        changed_at=datetime.fromisoformat(changed) if changed else None,
                        spark=tuple(r.get("spark") or ()), band_lo=float(band[0]) if band else None,
                        band_hi=float(band[1]) if band else None, band_n=int(r.get("r_band_n") or 0),
                        rank=None if r.get("rank") is None else int(r["rank"]),
                        **{key: _optional(r.get(key), int if key in INT_ARENA_FIELDS else float)
                           for key in (*boards.ARENA_FIELDS, *WEIGHTED_FIELDS)},
                        weighted_tied=bool(r.get("weighted_tied")))


INT_ARENA_FIELDS = ("arena_rank", "battles", "arena_wins", "arena_ties", "arena_losses", "style_rank",
                    "weighted_rank")
WEIGHTED_FIELDS = ("weighted", "weighted_low", "weighted_high", "weighted_rank")


def _optional(value, kind):
    """A served arena value: None stays None (0 for a count), anything else must be a number of its kind."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{value!r} is not a number")
    return kind(value)


# --- the comparison ----------------------------------------------------------------------------

def _text(column: str, value: Any) -> str:
    if isinstance(value, str) and value == ABSENT:
        return "—"
    if value is None:
        return "provisional" if column == "rank" else "none"
    if column in ("r", "ra", "rh"):
        return _wad(value)
    if column in FLOAT_COLUMNS:
        return f"{value:.6f}"
    if column == "changed_at":
        return value.astimezone(dt_timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return str(value)


def _equal(column: str, a: Any, b: Any) -> bool:
    # By value: a report read back from the cache holds an equal string, not the same object.
    if ABSENT in (a, b):
        return False
    if column in FLOAT_COLUMNS and a is not None and b is not None:
        return abs(a - b) <= FLOAT_COLUMNS[column]
    return a == b


@dataclass(frozen=True)
class Cell:
    column: str
    served: Any
    chain: Any

    @property
    def equal(self) -> bool:
        return _equal(self.column, self.served, self.chain)

    @property
    def served_text(self) -> str:
        return _text(self.column, self.served)

    @property
    def chain_text(self) -> str:
        return _text(self.column, self.chain)

    def to_dict(self) -> dict:
        return {"column": self.column, "served": self.served_text, "chain": self.chain_text, "equal": self.equal}


FIGURE_WORDS = {key: (label, words, kind) for key, label, words, kind in weighting.FIGURES} | {
    key: (label, words, kind) for key, _, label, words, kind in weighting.RATING_FIGURES}
STATUS_WORDS = {weighting.MEASURED: "checked against people's votes",
                weighting.NOT_ENOUGH: "not enough human signal yet"}


def _figure_text(kind: str, value: Any, other: Any = None) -> str:
    """A validity figure as a person reads it: shares in whole percents (one decimal more when the two
    sides would otherwise read the same), counts as they are, the weight to four decimals, a correlation
    to two (four when the two sides would otherwise read the same)."""
    if isinstance(value, str) and value == ABSENT:
        return "not served"
    if value is None:
        return "none"
    if kind == "status":
        return STATUS_WORDS.get(value, str(value))
    if kind == "share" and isinstance(value, (int, float)):
        return _told_apart(value, other, lambda v: f"{100 * v:.0f}%", lambda v: f"{100 * v:.2f}%")
    if kind == "weight" and isinstance(value, (int, float)):
        return f"{value:.4f}"
    if kind == "correlation" and isinstance(value, (int, float)):
        return _told_apart(value, other, lambda v: f"{v:.2f}", lambda v: f"{v:.4f}")
    return str(value)


def _told_apart(value: float, other: Any, text, finer) -> str:
    """`text(value)`, or `finer(value)` when the other side's figure would read the same though the two differ."""
    shown = text(value)
    if isinstance(other, (int, float)) and not isinstance(other, bool) and text(other) == shown \
            and abs(value - other) > FIGURE_TOLERANCE:
        return finer(value)
    return shown


@dataclass(frozen=True)
class Figure:
    """One of the board's validity figures (the automatic score against people's votes here), served and
    rebuilt from the chain."""

    key: str
    served: Any
    chain: Any

    @property
    def label(self) -> str:
        return FIGURE_WORDS[self.key][0]

    @property
    def kind(self) -> str:
        return FIGURE_WORDS[self.key][2]

    @property
    def equal(self) -> bool:
        a, b = self.served, self.chain
        if ABSENT in (a, b):
            return False
        numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
        return abs(a - b) <= FIGURE_TOLERANCE if numbers else a == b

    @property
    def served_text(self) -> str:
        return _figure_text(self.kind, self.served, self.chain)

    @property
    def chain_text(self) -> str:
        return _figure_text(self.kind, self.chain, self.served)

    def sentence(self, where: str) -> str:
        return f"{FIGURE_WORDS[self.key][1]} {where} differs: served {self.served_text}, rebuilt {self.chain_text}"

    def to_dict(self) -> dict:
        return {"figure": self.key, "served": self.served_text, "chain": self.chain_text, "equal": self.equal}


def figures(served: dict | None, chain: dict) -> tuple[Figure, ...]:
    """The automatic score's validity figures as served against the rebuilt ones (a column entry of
    `weighting.columns`), one Figure per figure `verify` compares."""
    return tuple(Figure(key, ABSENT if served is None else served.get(key, ABSENT), chain.get(key))
                 for key, *_ in weighting.FIGURES)


def rating_figures(served: dict | None, chain: dict) -> tuple[Figure, ...]:
    """The board's figures of people's ratings against the automatic score as served against the
    rebuilt ones (lib.weighted.rating_validity), one Figure each."""
    return tuple(Figure(key, ABSENT if served is None else served.get(source, ABSENT), chain.get(source))
                 for key, source, *_ in weighting.RATING_FIGURES)


# Each cell in plain words, for the sentence that names it when it differs.
CELL_WORDS = {"rank": "the rank", "name": "the name", "r": "R", "ra": "Ra", "rh": "Rh",
              "n_auto": "the number of automatic scores", "n_human": "the number of ratings",
              "block_number": "the block of the last change", "changed_at": "the time of the last change",
              "band_lo": "the low end of the R band", "band_hi": "the high end of the R band",
              "arena_rank": "the arena rank", "arena_elo": "the arena Elo",
              "arena_ci_low": "the low end of the arena Elo's interval",
              "arena_ci_high": "the high end of the arena Elo's interval", "battles": "the number of battles",
              "arena_win_rate": "the arena win rate", "style_rank": "the style-controlled rank",
              "style_elo": "the style-controlled Elo", "style_ci_low": "the low end of the style-controlled interval",
              "style_ci_high": "the high end of the style-controlled interval",
              "weighted": "the weighted score", "weighted_low": "the low end of the weighted score",
              "weighted_high": "the high end of the weighted score", "weighted_rank": "the weighted rank"}


@dataclass(frozen=True)
class RowReport:
    model_id: str
    cells: tuple[Cell, ...]
    side: str  # "both", or the only side that lists the model: "served" | "chain"

    @property
    def ok(self) -> bool:
        return all(c.equal for c in self.cells)

    @property
    def differing(self) -> int:
        return sum(not c.equal for c in self.cells)

    @property
    def short_id(self) -> str:
        return short_id(self.model_id)

    @property
    def name(self) -> str:
        """The model's name as the chain gives it (or as served, for a model only served)."""
        for c in self.cells:
            if c.column == "name":
                return c.chain if c.chain not in (None, ABSENT) else c.served if c.served not in (None, ABSENT) \
                    else self.short_id
        return self.short_id

    def to_dict(self) -> dict:
        return {"model_id": self.model_id, "side": self.side, "ok": self.ok,
                "cells": [c.to_dict() for c in self.cells]}


def _cells(served: BoardRow | None, chain: BoardRow | None, columns) -> tuple[Cell, ...]:
    return tuple(Cell(key, getattr(served, key) if served else ABSENT, getattr(chain, key) if chain else ABSENT)
                 for key, _ in columns)


def compare(served_rows: list[BoardRow], chain_rows: list[BoardRow], minimum: int,
            columns: tuple[tuple[str, str], ...] = COLUMNS) -> list[RowReport]:
    """Cell by cell, one report per model: the chain's rows ranked as the served board ranks them
    (`rank_rows` with the same minimum), in the chain's order, then the models only the served side lists."""
    ranked, provisional = boards.rank_rows(chain_rows, "r", "desc", minimum)
    served = {row.model_id: row for row in served_rows}
    out = []
    for row in ranked + provisional:
        mine = served.pop(row.model_id, None)
        out.append(RowReport(row.model_id, _cells(mine, row, columns), "both" if mine else "chain"))
    for row in served_rows:
        if row.model_id in served:
            out.append(RowReport(row.model_id, _cells(row, None, columns), "served"))
    return out


@dataclass(frozen=True)
class BoardReport:
    context_id: str
    served_name: str | None  # None: no such board served
    chain_name: str | None  # None: no such context on-chain
    min_evaluations: int
    rows: tuple[RowReport, ...]
    issues: tuple[StateIssue, ...]  # the contract's state against its events, in this context
    notes: tuple[str, ...] = ()  # what the reader should know about the arena columns checked
    figures: tuple[Figure, ...] = ()  # the automatic score's validity figures (none: not checked)

    @property
    def name_equal(self) -> bool:
        return self.served_name is not None and self.served_name == self.chain_name

    @property
    def cells_checked(self) -> int:
        return 1 + sum(len(r.cells) for r in self.rows) + len(self.figures)  # 1: the context's name

    @property
    def cells_differing(self) -> int:
        return (not self.name_equal) + sum(r.differing for r in self.rows) + sum(not f.equal for f in self.figures)

    @property
    def where(self) -> str:
        return "on the global board" if self.context_id == GLOBAL_CONTEXT_ID else f"in {self.title}"

    @property
    def named(self) -> list[str]:
        """The differing validity figures and cells (of models both sides list), each in one plain sentence."""
        out = [f.sentence(self.where) for f in self.figures if not f.equal]
        for row in self.rows:
            for c in row.cells:
                if not c.equal and row.side == "both":
                    served, chain = ((_weighted_text(c.column, c.served), _weighted_text(c.column, c.chain))
                                     if c.column in WEIGHTED_FIELDS else (c.served_text, c.chain_text))
                    out.append(f"{CELL_WORDS.get(c.column, c.column)} of {row.name} {self.where} differs: "
                               f"served {served}, rebuilt {chain}")
        return out

    @property
    def models(self) -> int:
        return len(self.rows)

    @property
    def ok(self) -> bool:
        return self.cells_differing == 0 and not self.issues

    @property
    def title(self) -> str:
        return self.chain_name or self.served_name or short_id(self.context_id)

    @property
    def verdict(self) -> str:
        models = f"{self.models} model{'' if self.models == 1 else 's'}"
        checked = f"{self.cells_checked} cell{'' if self.cells_checked == 1 else 's'} checked"
        if self.ok:
            return f"The served board matches the chain: {models}, {checked}."
        parts = []
        if self.cells_differing:
            k = self.cells_differing
            parts.append(f"{k} cell{' differs' if k == 1 else 's differ'} ({models}, {checked})")
        if self.issues:
            parts.append(f"the contract's state disagrees with its events in {len(self.issues)} "
                         f"place{'' if len(self.issues) == 1 else 's'}")
        return "The served board does not match the chain: " + "; ".join(parts) + "."

    def to_dict(self) -> dict:
        return {"context_id": self.context_id, "served_name": self.served_name, "chain_name": self.chain_name,
                "ok": self.ok, "verdict": self.verdict, "models": self.models,
                "cells_checked": self.cells_checked, "cells_differing": self.cells_differing,
                "min_evaluations": self.min_evaluations, "rows": [r.to_dict() for r in self.rows],
                "state_issues": [{"model_id": i.model_id, "text": i.text} for i in self.issues],
                "notes": list(self.notes), "figures": [f.to_dict() for f in self.figures], "named": self.named}


def _weighted_text(column: str, value: Any) -> str:
    if value is None:
        return "none (no signal from people)" if column == "weighted" else "none"
    return str(value) if column == "weighted_rank" else f"{value:.4f}"


def check_board(context_id: str, served: ServedBoard, chain: ChainBoards) -> BoardReport:
    """One context's served board against the chain's rebuild of it, the arena columns included (with
    the bootstrap rounds the served board states, or this site's when it states none)."""
    bootstrap, style_bootstrap = served.arena_rounds or (settings.LLMCHAIN_ARENA_BOOTSTRAP,
                                                         settings.LLMCHAIN_ARENA_STYLE_BOOTSTRAP)
    result = chain.arena(context_id, bootstrap, style_bootstrap)
    chain_rows = [replace(row, **arena_fields(result.line(row.model_id))) for row in chain.rows.get(context_id, [])]
    votes = chain.validity(context_id)
    if votes is not None:  # the weighted score with the weight the rebuilt figures give
        chain_rows = weighting.weigh_rows(chain_rows, votes["weight"])
    rows = compare(served.rows, chain_rows, served.min_evaluations, chain.columns)
    notes = []
    if result.votes:
        notes.append(f"Arena: {result.votes} counted vote{'' if result.votes == 1 else 's'} rebuilt from the "
                     f"chain's records of each battle and its vote, intervals from {bootstrap} bootstrap rounds "
                     f"({style_bootstrap} with style control), seed {result.seed}.")
    if not chain.style_checked:
        notes.append("The style-controlled columns were not checked (they need every voted answer's text from IPFS).")
        notes.append("How far the automatic score agrees with people here and the weighted score were not checked "
                     "(they need every voted answer's length from IPFS).")
    elif result.votes and result.style_votes < result.votes:
        notes.append(f"{result.votes - result.style_votes} of the {result.votes} votes have an answer whose evidence "
                     f"record could not be read from IPFS here: the chain side's style fit leaves them out.")
    if votes is not None:
        notes.append(f"How far the automatic score agrees with people here: rebuilt from the {votes['votes']} counted "
                     f"vote{'' if votes['votes'] == 1 else 's'} that preferred one answer, {votes['pairs_non_tie']} "
                     f"with both answers scored (each answer's automatic score from the chain's record of its "
                     f"evaluation, its length from its record on IPFS); the weighted score from the rebuilt rows "
                     f"with the weight those figures give.")
    ratings = chain.ratings(context_id)
    if not chain.style_checked:
        notes.append("How alike people's ratings and the automatic score rank answers here was not checked (it "
                     "needs every rated answer's length from IPFS).")
    elif ratings is not None:
        unread = chain.rated_unread(context_id)
        notes.append(f"How alike people's ratings and the automatic score rank answers here: rebuilt from the "
                     f"{ratings['n']} rated answer{'' if ratings['n'] == 1 else 's'} with an automatic score (each "
                     f"answer's automatic score and rating from the chain's records of its evaluations, its length "
                     f"from its record on IPFS)" + (f"; {unread} rated answer{' is' if unread == 1 else 's are'} left "
                                                    f"out, their records unreadable here" if unread else "") + ".")
    if served.arena_stale:
        notes.append("The served board said newer votes were being counted: its arena columns may lag the chain "
                     "for a moment.")
    return BoardReport(context_id=context_id, served_name=served.context_name,
                       chain_name=chain.contexts.get(context_id), min_evaluations=served.min_evaluations,
                       rows=tuple(rows), issues=tuple(chain.issues_of(context_id)), notes=tuple(notes),
                       figures=(figures(served.validity, weighting.columns(votes)["ra"]) if votes is not None else ())
                       + (rating_figures(served.ratings, ratings) if ratings is not None else ()))


def verify_boards(chain: ChainBoards, source, context_ids: list[str] | None = None) -> list[BoardReport]:
    """Reports for `context_ids`, or for every context either side knows (the global one first)."""
    if context_ids is None:
        context_ids = list(chain.contexts)
        context_ids += [c for c in source.context_ids() if c not in chain.contexts]
    return [check_board(c, source.board(c), chain) for c in context_ids]

