"""Presence: a dead learner's retained status must not look alive.

The learner and ingest keep a retained "online" marker that the broker's will clears when
the process dies; `streamlearn status` shows each status's age and marks the learner
offline once its marker is gone, and a status nobody refreshes as stale.
"""

from __future__ import annotations

import json
import time
import tomllib

import pytest

from streamlearn import mqtt
from streamlearn.cli.status import format_status
from streamlearn.config import Settings, parse_config
from streamlearn.contract.names import Names
from streamlearn.observe.monitor import read_status
from streamlearn.observe.presence import presence_topic
from tests.conftest import eventually, retained

TOML = """
[models.o]
inputs = 2
task = "binary"

[models.o.learner]
buckets = [256]  # one padded size, one trace before ready: batch sizes are not this test's
"""


def status_row(settings: Settings) -> tuple[dict, str]:
    """What `streamlearn status` gathers for model `o`, and the table it prints."""
    rows = read_status(parse_config(tomllib.loads(TOML)), settings, wait_s=1.0)
    return rows[0], format_status(rows)


def test_a_killed_learner_reads_as_offline(start_role, settings):
    names = Names("o", settings.topic_prefix, settings.key_prefix)
    learner = start_role("learner", TOML, instance="L")
    ingest = start_role("ingest", TOML, instance="I")
    marker = retained(settings, presence_topic(names, "learner", "L"))
    assert marker is not None and marker["online"] is True
    assert marker["pid"] == learner.proc.pid and marker["instance"] == "L"
    eventually(lambda: retained(settings, names.status_topic) is not None, 30, "a status")

    row, table = status_row(settings)
    assert row["learner_state"] == "online", table
    assert row["status_age_s"] is not None and row["status_age_s"] < 15, table
    assert "learner: online, status" in table
    assert [p["id"] for p in row["ingest_online"]] == ["I"], table
    assert "ingest: 1 online (I up" in table

    learner.stop(kill=True)  # SIGKILL: no goodbye, only the broker's will
    eventually(
        lambda: retained(settings, presence_topic(names, "learner", "L"), 0.5) is None,
        15,
        "the will cleared the learner's marker",
    )
    assert retained(settings, names.status_topic) is not None  # its last status stays...
    row, table = status_row(settings)
    assert row["learner_state"] == "offline", table  # ...but does not look alive
    assert "learner: OFFLINE (presence gone: stopped or dead), last status" in table
    print(table)

    ingest.stop()  # a clean stop leaves the session, and says so: a "gone" marker
    assert retained(settings, presence_topic(names, "ingest", "I"), 0.5)["online"] is False
    row, table = status_row(settings)
    assert row["ingest_online"] == [] and "ingest: none online" in table
    assert [p["id"] for p in row["ingest_away"]] == ["I"] and "WARNING ingest I away" in table


def test_statuses_nobody_refreshes_are_stale(settings):
    """A hung learner (still connected, marker present) and a hung actor: their retained
    statuses age, and `status` says so."""
    names = Names("o", settings.topic_prefix, settings.key_prefix)
    long_ago = time.time() - 120
    client = mqtt.connect(settings.mqtt)
    try:
        for topic, doc in [
            (names.status_topic, {"model": "o", "version": 3, "updated_at": long_ago}),
            (presence_topic(names, "learner", "L"), {"online": True, "started_at": long_ago}),
            (names.topic("actors/a1"), {"version": 3, "updated_at": long_ago}),
            (names.topic("actors/a2"), {"version": 3, "updated_at": time.time()}),
        ]:
            client.publish(topic, json.dumps(doc), qos=1, retain=True).wait_for_publish(5)
        row, table = status_row(settings)
    finally:
        for topic in (names.status_topic, names.topic("actors/a1"), names.topic("actors/a2")):
            client.publish(topic, b"", qos=1, retain=True).wait_for_publish(5)
        client.publish(presence_topic(names, "learner", "L"), b"", qos=1, retain=True)
        mqtt.close(client)
    assert row["learner_state"] == "stale" and row["status_age_s"] >= 120, table
    assert "learner: STALE: status 12" in table
    stale = {a["id"]: a["stale"] for a in row["actors"]}
    assert stale == {"a1": True, "a2": False}, table
    lines = table.splitlines()
    assert next(line for line in lines if "actor a1" in line).endswith("STALE")
    assert not next(line for line in lines if "actor a2" in line).endswith("STALE")


def test_an_ingest_worker_away_is_a_warning_until_its_session_expires(start_role, settings):
    """A stopped or killed ingest worker leaves its persistent session, where the broker
    queues its share of the samples for an hour and then drops them: `streamlearn status`
    says so, with how long it has been away and how long is left, until it comes back."""
    names = Names("o", settings.topic_prefix, settings.key_prefix)
    start_role("ingest", TOML, instance="I1")
    gone = start_role("ingest", TOML, instance="I2")
    gone.stop(kill=True)  # SIGKILL: the broker's will leaves the "gone" marker
    topic = presence_topic(names, "ingest", "I2")
    eventually(lambda: (retained(settings, topic, 0.5) or {}).get("online") is False, 15, "gone")
    time.sleep(2.5)
    row, table = status_row(settings)
    assert [p["id"] for p in row["ingest_online"]] == ["I1"], table
    [away] = row["ingest_away"]
    assert away["id"] == "I2" and 2 <= away["away_s"] <= 30, away
    assert away["away_s"] + away["expires_in_s"] == pytest.approx(mqtt.SESSION_EXPIRY_S, abs=2)
    assert f"WARNING ingest I2 away {away['away_s']} s" in table
    assert "then drops them (session expiry)" in table

    start_role("ingest", TOML, instance="I2")  # back: the warning goes
    row, table = status_row(settings)
    assert sorted(p["id"] for p in row["ingest_online"]) == ["I1", "I2"], table
    assert row["ingest_away"] == [] and "WARNING" not in table
