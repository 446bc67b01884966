"""The job machine (apps/chain/work.py): claims, retries within a budget, and the worker loop.
Evidence pins stand for every kind of work row here."""

from __future__ import annotations

import os
import signal
import threading
from datetime import timedelta

import pytest
from django.db.models import Q
from django.utils import timezone

from apps.chain import work
from apps.chain.client import ChainError, ChainUnavailable, RpcError
from apps.chain.ipfs import IpfsError, IpfsUnavailable
from apps.chain.models import EvidencePin
from apps.chat.gateway import BadResponse, EndpointRefused, EndpointUnavailable
from lib.errors import ServiceError, is_permanent

PENDING = [EvidencePin.Status.PENDING]


def pins(n: int) -> list[EvidencePin]:
    return [EvidencePin.objects.create(cid=f"bafy{i:04d}", data=b"x", size=1) for i in range(n)]


@pytest.mark.django_db
def test_two_workers_never_hold_the_same_row_and_each_claim_counts_as_an_attempt():
    made = pins(5)
    first = work.claim(EvidencePin, PENDING, 3, lease_s=60)
    second = work.claim(EvidencePin.objects.all(), PENDING, 3, lease_s=60)
    assert first == [p.pk for p in made[:3]] and second == [p.pk for p in made[3:]]
    assert work.claim(EvidencePin, PENDING, 3, lease_s=60) == []
    assert set(EvidencePin.objects.values_list("attempts", flat=True)) == {1}


@pytest.mark.django_db
def test_of_two_workers_that_saw_the_same_free_rows_only_the_first_takes_them():
    made = pins(2)
    now = timezone.now()
    free = Q(claimed_until=None)
    seen = [p.pk for p in made]  # both workers read the same rows as free
    assert work.take(EvidencePin.objects, seen, free, claimed_until=now) == seen
    assert work.take(EvidencePin.objects, seen, free, claimed_until=now) == []


@pytest.mark.django_db
def test_a_claim_whose_lease_ran_out_is_taken_again():
    pin, = pins(1)
    assert work.claim(EvidencePin, PENDING, 1, lease_s=-1) == [pin.pk]  # its worker died at once
    assert work.claim(EvidencePin, PENDING, 1, lease_s=60) == [pin.pk]
    pin.refresh_from_db()
    assert pin.attempts == 2


@pytest.mark.django_db
def test_a_transient_failure_is_tried_again_after_a_doubling_backoff():
    pin, = pins(1)
    for wait in (1, 2, 4):
        work.claim(EvidencePin, PENDING, 1, lease_s=60)
        pin.refresh_from_db()
        before = timezone.now()
        assert work.retry_later(pin, IpfsUnavailable("the node is down"), cap=300) is True
        pin.refresh_from_db()
        assert pin.status == "pending" and pin.last_error == "the node is down" and pin.claimed_until is None
        assert before + timedelta(seconds=wait) <= pin.next_attempt_at <= timezone.now() + timedelta(seconds=wait)
        assert work.claim(EvidencePin, PENDING, 1, lease_s=60) == []  # not before its backoff
        EvidencePin.objects.update(next_attempt_at=timezone.now())
    assert pin.attempts == 3


@pytest.mark.django_db
def test_a_permanent_failure_fails_the_row_at_once():
    pin, = pins(1)
    work.claim(EvidencePin, PENDING, 1, lease_s=60)
    pin.refresh_from_db()
    assert work.retry_later(pin, IpfsError("IPFS add failed (400): bad request"), cap=300) is False
    pin.refresh_from_db()
    assert pin.status == "failed" and "bad request" in pin.last_error and pin.claimed_until is None


@pytest.mark.django_db
def test_a_row_that_used_its_attempts_fails_with_its_last_error():
    pin, = pins(1)
    outcomes = []
    for _ in range(3):
        EvidencePin.objects.update(next_attempt_at=timezone.now())
        if not work.claim(EvidencePin, PENDING, 1, lease_s=60):
            break
        pin.refresh_from_db()
        outcomes.append(work.retry_later(pin, TimeoutError(), message="no answer within 5 s", cap=1,
                                         max_attempts=2))
    pin.refresh_from_db()
    assert outcomes == [True, False]
    assert pin.status == "failed" and pin.last_error == "no answer within 5 s" and pin.attempts == 2


def test_the_backoff_doubles_from_its_base_up_to_its_cap():
    assert [work.backoff(n, cap=60).total_seconds() for n in (0, 1, 2, 3, 7, 50, 10**6)] == [1, 1, 2, 4, 60, 60, 60]
    assert [work.backoff(n, base=60, cap=1800).total_seconds() for n in (1, 2, 5, 6)] == [60, 120, 960, 1800]


@pytest.mark.parametrize("error, permanent", [
    (ChainUnavailable("cannot reach the node"), False), (RpcError(-32000, "server busy, try again"), False),
    (RpcError(-32000, "invalid sender"), True), (ChainError("bad answer"), True),
    (IpfsUnavailable("unreachable"), False), (IpfsError("refused"), True),
    (EndpointUnavailable("503"), False), (EndpointRefused("401"), True), (BadResponse("not JSON"), True),
    (TimeoutError(), False), (ConnectionResetError(), False), (ValueError("a bug"), True),
])
def test_every_adapter_says_whether_a_failure_is_permanent_with_one_flag(error, permanent):
    assert is_permanent(error) is permanent
    if isinstance(error, ServiceError):
        assert error.permanent is permanent and not hasattr(error, "retryable")


def test_the_worker_loop_sleeps_when_idle_and_stops_on_sigterm():
    calls = []
    before = signal.getsignal(signal.SIGTERM)

    def step():
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return 0

    work.run_worker(step, idle_sleep=0.01)
    assert len(calls) == 3
    assert signal.getsignal(signal.SIGTERM) is before  # the command's handler is put back


def test_the_worker_loop_survives_an_outage_and_says_so_once_each_way():
    said, stop = [], threading.Event()
    results = iter([ChainUnavailable("node down"), ChainUnavailable("node down"), 5, 0])

    def step():
        result = next(results, None)
        if result is None:
            stop.set()
            return 0
        if isinstance(result, Exception):
            raise result
        return result

    work.run_worker(step, idle_sleep=0.01, pause=0.01, pause_max=0.02, name="chain", say=said.append, stop=stop)
    assert said == ["chain failing: node down; retrying in 0.01 s, then less often", "chain working again after 0 s"]


def test_a_permanent_error_ends_the_worker_loop_and_until_ends_it_when_its_work_is_done():
    def refused():
        raise EndpointRefused("401: bad key")

    with pytest.raises(EndpointRefused):
        work.run_worker(refused, idle_sleep=0.01, say=None)
    left = [3, 2, 1]
    work.run_worker(lambda: left.pop(), idle_sleep=0.01, until=lambda: not left)
    assert left == []


def test_in_turns_lets_each_kind_of_work_go_in_turn_while_both_have_some():
    from apps.chain.work import in_turns

    done = []
    debates, qualifications = iter(range(10)), iter(range(2))

    def debate():
        n = next(debates, None)
        if n is not None:
            done.append("debate")
        return int(n is not None)

    def qualify():
        n = next(qualifications, None)
        if n is not None:
            done.append("qualify")
        return int(n is not None)

    step = in_turns(debate, qualify)
    while step():
        pass
    # Both queues were full from the start: the qualifications go second and fourth, not after all ten debates.
    assert done[:4] == ["debate", "qualify", "debate", "qualify"]
    assert done.count("debate") == 10 and done.count("qualify") == 2
    assert step() == 0  # nothing left in either
