"""Sparkplug B edge nodes into ingest, end to end (`format = "sparkplug_b"`): payloads as
Eclipse Tahu's reference edge node publishes them (NBIRTH with bdSeq and its node
controls, DBIRTH with aliases, DDATA of only what changed, by alias) become held readings
and samples; a seq gap and data before its birth ask the node for a rebirth (an NCMD on
the broker); a payload that is not Sparkplug is a dead letter; two ingest workers sharing
a node form each sample once; and the host's STATE stays online while any ingest lives."""

from __future__ import annotations

import json
import threading
import uuid

import paho.mqtt.client as paho

from streamlearn.contract.names import Names, assembled_id
from streamlearn.contract.sparkplug.payloads import REBIRTH
from streamlearn.contract.sparkplug.proto import sparkplug_b_pb2 as pb
from streamlearn.contract.sparkplug.topics import state_topic
from streamlearn.ingest.host import HostState
from streamlearn.store.held import label_digest
from tests.conftest import eventually, plain_paho
from tests.integration.test_assembly import deliver, letters, stream, worker
from tests.unit.test_sparkplug import T0, dbirth, ddata, nbirth

TOML = """
[models.{model}]
inputs = ["Temperature", "Motor/RPM", "Mode"]
target = "Running"
task = "binary"
architecture = "linear"
categorical = {{ Mode = ["auto", "manual"] }}

[models.{model}.assembly]

[[models.{model}.sources]]
topic = "spBv1.0/{group}/#"
format = "sparkplug_b"

[models.{model}.sparkplug]
reorder_timeout_s = 0
rebirth_min_interval_s = 0.1
{host}
"""


def config(model: str, group: str, host: str | None = None) -> str:
    line = "" if host is None else f'primary_host = "{host}"'
    return TOML.format(model=model, group=group, host=line)


def node(group: str, kind: str, device: str | None = "Press 2", name: str = "Edge 1") -> str:
    return f"spBv1.0/{group}/{kind}/{name}" + ("" if device is None else f"/{device}")


class Collector:
    """Messages on a filter, as a subscriber on the broker gets them."""

    def __init__(self, settings, topic: str) -> None:
        self.got: list[paho.MQTTMessage] = []
        self.cond = threading.Condition()
        self.client = plain_paho(settings)
        self.client.on_message = self._on_message
        self.client.subscribe(topic, 1)

    def _on_message(self, _c, _u, msg) -> None:
        with self.cond:
            self.got.append(msg)
            self.cond.notify_all()

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def test_a_tahu_edge_node_through_the_broker(start_role, settings, redis):
    """Births, data by alias and a label form samples of the press's held metrics; a gap
    and data before birth each bring an NCMD rebirth; a JSON payload is a dead letter; the
    host's STATE is online, and stays so when an ingest process dies while another lives."""
    group, host = f"Plant {uuid.uuid4().hex[:8]}", f"host-{uuid.uuid4().hex[:8]}"
    names = Names("press", settings.topic_prefix, settings.key_prefix)
    commands = Collector(settings, f"spBv1.0/{group}/NCMD/+")
    states = Collector(settings, state_topic(host))
    other = HostState(settings.mqtt, host, f"other-{host}")  # a second ingest's STATE
    other.start()
    role = start_role("ingest", config("press", group, host))
    edge = plain_paho(settings)
    try:
        session = names.sparkplug_key(f"n:{group}/Edge 1")
        for topic, p in [
            (node(group, "NBIRTH", None), nbirth(bd_seq=0, seq=0)),
            (node(group, "DBIRTH"), dbirth(seq=1)),  # Running: true, held (not a label)
            (node(group, "DDATA"), ddata(2, a8=22.25)),  # only what changed
            (node(group, "DDATA"), ddata(3, a11=False)),  # a label: the held values
            (node(group, "DDATA"), ddata(5, a8=23.0)),  # 4 skipped...
            (node(group, "DDATA"), ddata(6, a8=24.0, a11=True)),  # ...still missing: a rebirth
            (node(group, "DDATA", name="Edge 2"), ddata(0, a8=1.0)),  # never born: one too
        ]:
            edge.publish(topic, p.SerializeToString(), qos=1).wait_for_publish(10)
            if p.seq == 5:  # the skip seen before what follows it (reorder_timeout_s = 0)
                eventually(lambda: redis.hget(session, "miss"), 20, "the skipped seq")
        edge.publish(node(group, "DDATA"), b'{"Temperature": 21.5}', qos=1).wait_for_publish(10)
        eventually(lambda: redis.get(names.ingest_count_key) == b"2", 20, "two samples")
        x, y, ids = stream(redis, names, 3)
        assert x.tolist() == [[22.25, -1200, 0], [24.0, -1200, 0]] and y.tolist() == [0, 1]
        raw = ddata(3, a11=False).SerializeToString()
        key = f"{group}/Edge 1/Press 2"
        assert ids[0] == assembled_id(f"{key}|sp|{label_digest(node(group, 'DDATA'), raw)}")
        eventually(lambda: len(commands.got) >= 2, 20, "two rebirth requests")
        asked = sorted(m.topic for m in commands.got)
        assert asked == [f"spBv1.0/{group}/NCMD/Edge 1", f"spBv1.0/{group}/NCMD/Edge 2"]
        request = pb.Payload.FromString(commands.got[0].payload)
        assert [(m.name, m.boolean_value) for m in request.metrics] == [(REBIRTH, True)]
        assert commands.got[0].qos == 0
        eventually(lambda: redis.xlen(names.deadletter_key) == 1, 20, "the dead letter")
        assert letters(redis, names)[0][0] == "bad_sparkplug"

        def last() -> dict:
            with states.cond:
                return json.loads(states.got[-1].payload) if states.got else {}

        eventually(lambda: last().get("online") is True, 20, "the host online")
        mine = [json.loads(m.payload)["timestamp"] for m in states.got]
        before = len(mine)
        role.stop(kill=True)  # its STATE connection's will says offline...

        def will() -> dict:  # (the live one may answer it before a look at the last)
            with states.cond:
                said = [json.loads(m.payload) for m in states.got[before:] if m.payload]
            return next((doc for doc in said if doc.get("online") is False), {})

        assert eventually(will, 20, "the dead process's will")["timestamp"] in mine
        # ...and the live one says online again, newer than that will
        eventually(lambda: last().get("online") is True, 20, "online again")
        assert last()["timestamp"] > max(mine) and other.sessions == 2
    finally:
        edge.loop_stop()
        edge.disconnect()
        commands.close()
        states.close()
        other.close()
        clear = plain_paho(settings)  # no retained STATE of this test left on the broker
        clear.publish(state_topic(host), b"", qos=1, retain=True).wait_for_publish(10)
        clear.loop_stop()
        clear.disconnect()


def test_two_ingest_workers_sharing_a_node_form_each_sample_once(redis, settings):
    """A shared subscription hands one node's messages to either worker: a birth one saw
    resolves data the other sees; a redelivered label is a duplicate; a late label forms
    its sample of its own values without overwriting newer held ones; a death marks the
    device's inputs missing."""
    names = Names("press", settings.topic_prefix, settings.key_prefix)
    toml = config("press", "Plant 1")
    a, b = worker(redis, names, toml), worker(redis, names, toml)

    def send(w, topic, p) -> None:
        deliver(w, [(topic, p.SerializeToString())])

    send(a, node("Plant 1", "NBIRTH", None), nbirth(seq=0))
    send(a, node("Plant 1", "DBIRTH"), dbirth(seq=1))  # Running: true, held: no sample
    label = ddata(2, a8=22.25, a11=False)
    send(b, node("Plant 1", "DDATA"), label)  # b resolves a's aliases: a sample
    send(a, node("Plant 1", "DDATA"), label)  # the broker's redelivery, to the other
    assert a.counters.duplicates == 1
    send(b, node("Plant 1", "DDATA"), ddata(4, a8=30.0))  # overtakes seq 3
    send(a, node("Plant 1", "DDATA"), ddata(3, a8=25.0, a11=True))  # late: its own 25
    x, y, ids = stream(redis, names, 3)
    assert x[:, 0].tolist() == [22.25, 25.0] and y.tolist() == [0, 1]
    assert len(set(ids)) == 2
    held = names.held_key("k:Plant 1/Edge 1/Press 2")
    assert redis.hget(held, "0").split()[1] == b"30.0"  # the newer value stays held
    assert b.sparkplug is not None and a.sparkplug is not None
    assert a.sparkplug.late == 2 and a.sparkplug.statuses["birth"] == 2  # a redelivery too
    send(b, node("Plant 1", "DDEATH"), pb.Payload(timestamp=T0, seq=5))
    assert redis.hget(held, "0").split()[1] == b"nan"
    send(a, node("Plant 1", "DDATA"), ddata(6, a11=False))  # after its death: not born
    assert a.sparkplug.statuses["unborn"] == 1 and a.sparkplug.rebirths == 1
    assert redis.get(names.ingest_count_key) == b"2"
    assert letters(redis, names) == []
