"""The broker-delay probe's pure parts: when a delay is flagged, what the warning says,
where the probe's topics lie, and how `streamlearn status` shows it."""

from __future__ import annotations

import logging
import threading

from streamlearn.contract.names import Names
from streamlearn.observe.broker_delay import SLOW_MS, BrokerProbe, advice, probe_topics
from streamlearn.observe.status_text import actor_line, broker_lines
from streamlearn.stack.embedded import free_port


def test_a_delay_over_the_threshold_is_flagged_with_its_fix():
    assert advice(None) is None, "not measured: nothing to say"
    assert advice(1.2) is None and advice(SLOW_MS) is None
    warning = advice(43.7)
    assert warning is not None
    assert "44 ms" in warning and "set_tcp_nodelay true" in warning and "QoS 1" in warning


def test_the_probe_topics_are_the_actors_own_under_the_model():
    names = Names("m", "p")
    ping, echo = probe_topics(names, "actor-1")
    assert (ping, echo) == ("p/m/probe/actor-1", "p/m/probe/actor-1/echo")
    # Not where `streamlearn status` reads the actors' statuses (`actors/+`), nor a device's
    for topic in (ping, echo):
        assert not topic.startswith(names.topic("actors/"))
        assert not topic.startswith(names.topic("replies/"))


def test_status_shows_each_actors_delay_and_warns_once_for_a_slow_broker():
    fast = {"id": "a1", "version": 3, "broker_delay_ms": 0.6}
    slow = {"id": "a2", "version": 3, "broker_delay_ms": 42.0}
    unknown = {"id": "a3", "version": 3}
    assert "broker delay 0.6 ms" in actor_line(fast)
    assert "broker delay - ms" in actor_line(unknown)
    broker = {"dropped_messages": 0, "uptime_s": 5}
    rows = [{"actors": [fast, slow, unknown], "broker": broker}]
    lines = broker_lines(rows)
    assert [line for line in lines if "set_tcp_nodelay" in line] == [f"WARNING: {advice(42.0)}"]
    assert lines[-1].startswith("broker: 0 messages dropped")
    tuned = broker_lines([{"actors": [fast, unknown], "broker": broker}])
    assert not any("set_tcp_nodelay" in line for line in tuned)


def test_a_probe_that_cannot_measure_says_so_once_and_goes_on(caplog):
    """No broker where it points: the delay stays unknown, one warning however many tries,
    and the probe's thread ends when stopped (serving never waits on it)."""
    port = free_port()  # nothing listens there: each connect is refused at once
    probe = BrokerProbe(f"mqtt://127.0.0.1:{port}", Names("m"), "a1", every_s=0.01)
    tries, tried_thrice = [], threading.Event()
    measure = probe.measure

    def counted() -> float | None:
        tries.append(1)
        if len(tries) == 3:
            tried_thrice.set()
        return measure()

    probe.measure = counted
    with caplog.at_level(logging.WARNING, logger="streamlearn.observe.broker_delay"):
        probe.start()
        assert tried_thrice.wait(10), "the probe goes on after a failure"
        probe.stop()
    assert len(tries) >= 3 and probe.latest() is None
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning.startswith("broker delay not measured: StreamlearnError"), warning
