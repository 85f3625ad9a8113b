"""The learner's lease keeper without a server: waiting, the local deadline, a lost lease.

The fence itself (a publish with a lost token writes nothing) runs in Redis:
tests/integration/test_learner_lease.py.
"""

from __future__ import annotations

import logging
import threading

import pytest
import redis
from pydantic import ValidationError

from streamlearn.config.policies import LeasePolicy
from streamlearn.errors import LeaseLost
from streamlearn.learner.lease import LeaseKeeper
from streamlearn.store.lease import Holder

FAST = LeasePolicy(ttl_s=1.0, renew_s=0.01)


class FakeLease:
    """A lease whose answers the test sets: `takes` in turn, then `renewed`."""

    key = "sl:{m}:learner:lease"
    token = "here/1/aa"

    def __init__(self, takes: list[bool], renewed: bool | Exception = True) -> None:
        self.takes = takes
        self.renewed = renewed
        self.renewals = threading.Event()
        self.released = 0
        self.other = Holder("there/2/bb", 0.8)

    def take(self) -> bool:
        return self.takes.pop(0)

    def renew(self) -> bool:
        self.renewals.set()
        if isinstance(self.renewed, Exception):
            raise self.renewed
        return self.renewed

    def release(self) -> bool:
        self.released += 1
        return True

    def holder(self) -> Holder | None:
        return self.other


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_learner_waits_saying_once_who_holds_the_lease_then_takes_it(caplog):
    lease = FakeLease([False, False, False, True])
    keeper = LeaseKeeper(lease, FAST)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, "streamlearn.learner.lease"):
        assert keeper.wait(threading.Event())
    try:
        waiting = [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]
        assert len(waiting) == 1 and "held by there/2/bb" in waiting[0]
        assert keeper.held() and keeper.metrics() == {
            "lease_held": 1,
            "lease_taken_total": 1,
            "lease_lost_total": 0,
        }
        assert lease.renewals.wait(5), "renewed from its thread"
    finally:
        keeper.release()
    assert lease.released == 1 and not keeper.held()


def test_a_stopped_learner_stops_waiting():
    stop = threading.Event()
    stop.set()
    assert not LeaseKeeper(FakeLease([False]), FAST).wait(stop)  # type: ignore[arg-type]


def test_the_loop_stops_once_no_renewal_succeeded_for_the_ttl():
    clock = Clock()
    keeper = LeaseKeeper(FakeLease([True]), LeasePolicy(ttl_s=10, renew_s=4), clock)  # type: ignore[arg-type]
    keeper.valid_until = clock.now + 10  # as `wait` leaves it, without the thread
    keeper.check()
    clock.now += 9.9
    keeper.check()
    assert keeper.status() == {"holder": "here/1/aa", "held": True, "expires_in_s": 0.1}
    clock.now += 0.1  # the key has expired in Redis by now, whoever took it since
    with pytest.raises(LeaseLost, match="not renewed for 10 s"):
        keeper.check()
    assert keeper.lost and keeper.metrics()["lease_lost_total"] == 1
    with pytest.raises(LeaseLost):
        keeper.check()
    assert keeper.metrics()["lease_lost_total"] == 1, "lost once"


def test_a_refused_renewal_loses_the_lease_naming_the_taker():
    lease = FakeLease([True], renewed=False)
    keeper = LeaseKeeper(lease, FAST)  # type: ignore[arg-type]
    assert keeper.wait(threading.Event())
    assert keeper._thread is not None
    keeper._thread.join(5)  # its thread ends with the lease
    assert keeper.lost == "taken by there/2/bb"
    with pytest.raises(LeaseLost, match="taken by there/2/bb"):
        keeper.check()
    keeper.release()
    assert lease.released == 0, "a lost lease is not released: it is another's"


def test_redis_errors_are_retried_until_the_lease_would_have_expired():
    clock = Clock()
    lease = FakeLease([True], renewed=redis.ConnectionError("down"))
    keeper = LeaseKeeper(lease, FAST, clock)  # type: ignore[arg-type]
    keeper.valid_until = clock.now + 1.0
    errors = threading.Thread(target=keeper._keep)
    errors.start()
    assert lease.renewals.wait(5)
    assert keeper.lost is None, "an error within the TTL: tried again"
    clock.now += 1.0
    errors.join(5)
    assert keeper.lost is not None and "not renewed for 1 s (down)" in keeper.lost


def test_the_renewal_period_must_be_well_within_the_ttl():
    assert LeasePolicy().ttl_s == 10 and LeasePolicy().renew_s == 2
    with pytest.raises(ValidationError, match=r"renew_s must be < ttl_s / 2 \(5\), got 5"):
        LeasePolicy(ttl_s=10, renew_s=5)
