"""`check_weights` on events as the chain gives them: a reference's R must be one the chain emitted for
that model in that context before the evaluation, or, where the oracle's indexed tables had no REP of
it yet (they follow the chain a few blocks behind), the context's mean after some earlier event (0.5
before any). The store is the one outside system replaced here: the records are real and checked."""

from __future__ import annotations

from apps.chain.weights import check_weights
from lib import records
from lib.weighting import INITIAL_R, weighting

WAD = 10**18
CTX = "0x" + "c" * 64
A, B, C, SCORED = ("0x" + ch * 64 for ch in "abde")


class Store:
    def __init__(self):
        self.data: dict[str, bytes] = {}

    def put(self, data: bytes) -> str:
        cid = f"cid{len(self.data)}"
        self.data[cid] = data
        return cid

    def get(self, cid: str, timeout: float) -> bytes:
        return self.data[cid]


def b(x: str) -> bytes:
    return bytes.fromhex(x[2:])


def rep(model: str, r: int) -> dict:
    return {"event": "ReputationUpdated", "args": {"modelId": b(model), "contextId": b(CTX), "r": r}}


def auto(store: Store, n: int, refs: dict[str, int]) -> dict:
    iid = "0x" + f"{n:064x}"
    w = weighting(rule="paper", evaluator="bertscore-ref", reference_r=list(refs.values()), factor=WAD,
                  qualification=None, reason="")
    record = records.interaction_evidence(
        interaction_id=iid, context_id=CTX, context_name="general", prompt="q", model_id=SCORED, answer="a",
        references=[{"model": m, "text": "t", "score": WAD // 2} for m in refs], metric={"name": "m", "params": {}},
        sa=WAD // 2, wa=int(w["meanR"]), weighting=w)
    return {"event": "AutoEvaluated", "args": {"interactionId": b(iid), "modelId": b(SCORED), "contextId": b(CTX),
                                               "hasReference": True, "wA": int(w["meanR"]),
                                               "evidenceCid": store.put(records.canonical(record))}}


def test_an_r_the_model_held_passes_even_an_older_one():
    store = Store()
    report = check_weights([rep(A, 6 * WAD // 10), rep(A, 7 * WAD // 10), auto(store, 1, {A: 6 * WAD // 10})], store)
    assert (report.checked, report.fallback, report.issues) == (1, 0, [])


def test_a_model_not_indexed_yet_given_the_mean_of_the_time_is_a_fallback_not_a_mismatch():
    """The topology run's case: the chain emitted A's REP a block before the oracle scored, its index
    did not have it, and the oracle gave A the 0.5 of an empty context; or B's mean of the time."""
    store = Store()
    events = [rep(A, 8 * WAD // 10), auto(store, 1, {A: INITIAL_R}),
              rep(B, 6 * WAD // 10), auto(store, 2, {C: 8 * WAD // 10}),  # the mean when only A had one
              auto(store, 3, {C: 7 * WAD // 10})]  # A and B's mean, after B's event
    report = check_weights(events, store)
    assert (report.checked, report.fallback, report.issues) == (3, 3, [])


def test_an_r_neither_held_nor_a_mean_of_the_context_is_caught():
    store = Store()
    events = [rep(A, 8 * WAD // 10), rep(B, 6 * WAD // 10), auto(store, 1, {A: 9 * WAD // 10}),
              auto(store, 2, {C: 75 * WAD // 100})]
    report = check_weights(events, store)
    assert report.fallback == 0
    assert [i["interaction"][-1] for i in report.issues] == ["1", "2"]
    assert "neither a value the chain held" in report.issues[0]["text"]


def test_a_mean_from_after_the_evaluation_does_not_count():
    store = Store()
    events = [rep(A, 8 * WAD // 10), auto(store, 1, {C: 7 * WAD // 10}), rep(B, 6 * WAD // 10)]
    report = check_weights(events, store)
    assert len(report.issues) == 1
