"""Sparkplug B edge nodes' sessions shared in the real Redis by two ingest processes of one
shared subscription (two `SparkplugNodes`): births seen by one resolve data seen by the
other, whatever the order; seq wraps, gaps and redeliveries; rebirths asked once per node
per interval across both; deaths; and a flood of made-up nodes bounded."""

from __future__ import annotations

import pytest

from streamlearn.config.sparkplug import SparkplugConfig
from streamlearn.contract.names import Names
from streamlearn.contract.sparkplug.payloads import decode
from streamlearn.contract.sparkplug.proto import sparkplug_b_pb2 as pb
from streamlearn.contract.sparkplug.topics import parse_topic
from streamlearn.store.sparkplug import SparkplugNodes
from tests.unit.test_sparkplug import DATASET_ALIAS, FLOAT, MODE, RPM, T0, add_metric
from tests.unit.test_sparkplug import dbirth as _dbirth
from tests.unit.test_sparkplug import ddata as _ddata
from tests.unit.test_sparkplug import nbirth as _nbirth

NODE = "spBv1.0/Plant 1/{}/Edge 1"
DEVICE = "spBv1.0/Plant 1/{}/Edge 1/Press 2"
NOW = 1_700_000_100.0
CONFIG = SparkplugConfig(rebirth_min_interval_s=10, reorder_timeout_s=2)


@pytest.fixture
def workers(redis, settings):
    names = Names("spm", key_prefix=settings.key_prefix)
    return [SparkplugNodes(redis, names, CONFIG) for _ in range(2)]


def send(worker, topic, payload, now=NOW):
    return worker.handle(parse_topic(topic), decode(payload.SerializeToString()), now)


def born(worker, seq=0, bd_seq=0, now=NOW):
    assert send(worker, NODE.format("NBIRTH"), _nbirth(bd_seq, seq), now).status == "birth"
    assert (
        send(worker, DEVICE.format("DBIRTH"), _dbirth(seq=(seq + 1) % 256), now).status == "birth"
    )


def test_a_birth_seen_by_one_worker_resolves_data_seen_by_the_other(workers):
    a, b = workers
    assert send(a, NODE.format("NBIRTH"), _nbirth(bd_seq=3)).values == {}  # controls only
    birth = send(a, DEVICE.format("DBIRTH"), _dbirth(seq=1))
    assert birth.key == "Plant 1/Edge 1/Press 2"
    assert birth.values["Motor/RPM"] == -1200.0 and birth.values["Offset"] is None
    data = send(b, DEVICE.format("DDATA"), _ddata(2, a8=22.25, a9=-5))  # only what changed
    assert (data.status, data.values, data.rebirth, data.late) == (
        "ok",
        {"Temperature": 22.25, "Motor/RPM": -5.0},
        None,
        False,
    )
    assert data.times == {"Temperature": (T0 + 900) / 1000, "Motor/RPM": (T0 + 900) / 1000}
    again = send(a, DEVICE.format("DDATA"), _ddata(3, a10="manual"))
    assert again.values == {"Mode": "manual"} and again.rebirth is None


def test_data_without_its_datatype_takes_the_births(workers):
    a, b = workers
    born(a)
    p = _ddata(2, a9=-7)
    p.metrics[0].ClearField("datatype")
    assert send(b, DEVICE.format("DDATA"), p).values == {"Motor/RPM": -7.0}


def test_seq_wraps_from_255_to_0_without_a_gap(workers):
    a, b = workers
    born(a, seq=252)  # NBIRTH 252, DBIRTH 253
    for i, seq in enumerate([254, 255, 0, 1]):
        h = send((a, b)[i % 2], DEVICE.format("DDATA"), _ddata(seq, a8=float(seq)), NOW + 5 * i)
        assert (h.status, h.rebirth, h.late) == ("ok", None, False), seq


def test_overtaken_messages_are_late_not_gaps_and_a_lost_one_asks_a_rebirth_once(workers):
    a, b = workers
    born(a)  # seq 0, 1
    assert send(a, DEVICE.format("DDATA"), _ddata(3, a8=3.0)).status == "ok"  # 2 overtaken
    late = send(b, DEVICE.format("DDATA"), _ddata(2, a8=2.0), NOW + 1)
    assert (late.status, late.late, late.values) == ("ok", True, {"Temperature": 2.0})
    redelivered = send(b, DEVICE.format("DDATA"), _ddata(3, a8=3.0), NOW + 1)
    assert redelivered.late and redelivered.rebirth is None
    # 4 never comes: after the reorder timeout, the next message finds the gap
    assert send(a, DEVICE.format("DDATA"), _ddata(5), NOW + 1.5).rebirth is None
    gap = send(b, DEVICE.format("DDATA"), _ddata(6), NOW + 4)
    assert gap.status == "gap" and gap.rebirth is not None
    assert gap.rebirth.topic == "spBv1.0/Plant 1/NCMD/Edge 1"
    ncmd = pb.Payload()
    ncmd.ParseFromString(gap.rebirth.payload)
    assert [(m.name, m.boolean_value) for m in ncmd.metrics] == [("Node Control/Rebirth", True)]
    # another gap on the other worker within the interval: not asked again
    send(a, DEVICE.format("DDATA"), _ddata(8), NOW + 5)
    again = send(a, DEVICE.format("DDATA"), _ddata(9), NOW + 8)
    assert (again.status, again.rebirth) == ("gap", None)
    assert send(b, DEVICE.format("DDATA"), _ddata(11), NOW + 11).rebirth is None
    assert send(a, DEVICE.format("DDATA"), _ddata(12), NOW + 14).rebirth is not None  # 10 lost


def test_data_before_its_birth_asks_a_rebirth_at_most_once_per_interval(workers):
    a, b = workers
    first = send(a, DEVICE.format("DDATA"), _ddata(40, a8=1.0))
    assert (first.status, first.values, first.unknown) == ("unborn", {}, 1)
    assert first.rebirth is not None
    assert send(b, NODE.format("NDATA"), _ddata(41, a8=1.0), NOW + 9).rebirth is None
    assert send(b, DEVICE.format("DDATA"), _ddata(42, a8=1.0), NOW + 10).rebirth is not None
    named = pb.Payload(timestamp=T0, seq=43)
    add_metric(named, "Temperature", None, FLOAT, 30.0)
    assert send(a, NODE.format("NDATA"), named, NOW + 11).values == {"Temperature": 30.0}


def test_an_unknown_alias_asks_a_rebirth_and_a_skipped_ones_data_does_not(workers):
    a, b = workers
    born(a)
    p = _ddata(2, a8=1.0)
    add_metric(p, None, 99, FLOAT, 5.0)
    h = send(b, DEVICE.format("DDATA"), p)
    assert (h.status, h.unknown, h.values) == ("unknown_alias", 1, {"Temperature": 1.0})
    assert h.rebirth is not None
    ds = pb.Payload(timestamp=T0, seq=1)  # the node's DataSet, declared at its birth
    ds.metrics.add(alias=DATASET_ALIAS, datatype=16).dataset_value.num_of_columns = 1
    h = send(a, NODE.format("NDATA"), ds, NOW + 20)  # seq 1 again: late, not a gap
    assert (h.status, h.unknown, h.rebirth) == ("ok", 0, None)


def test_births_overtaking_their_node_birth_still_count(workers):
    a, b = workers
    born(a, seq=100)  # an earlier session, its newest seq 101
    later = NOW + 60
    assert send(b, DEVICE.format("DBIRTH"), _dbirth(seq=1), later).rebirth is None
    data = send(b, DEVICE.format("DDATA"), _ddata(2, a9=7), later)
    assert data.values == {"Motor/RPM": 7.0} and data.rebirth is None
    assert send(a, NODE.format("NBIRTH"), _nbirth(bd_seq=1, seq=0), later).status == "birth"
    for seq in (3, 4):  # after 0 (NBIRTH), 1 and 2 (seen before it): no gap
        h = send(a, DEVICE.format("DDATA"), _ddata(seq, a9=seq), later + 5)
        assert (h.status, h.rebirth, h.late) == ("ok", None, False)


def test_a_death_of_the_births_bd_seq_kills_the_node_and_its_devices(workers):
    a, b = workers
    born(a, bd_seq=5)
    stale = pb.Payload(timestamp=T0)
    add_metric(stale, "bdSeq", None, 4, 4)  # an earlier session's will
    assert send(b, NODE.format("NDEATH"), stale).status == "stale_death"
    assert send(b, DEVICE.format("DDATA"), _ddata(2, a8=1.0)).status == "ok"
    death = pb.Payload(timestamp=T0)
    add_metric(death, "bdSeq", None, 4, 5)
    h = send(b, NODE.format("NDEATH"), death)
    assert (h.status, set(h.dead)) == ("death", {"Plant 1/Edge 1", "Plant 1/Edge 1/Press 2"})
    after = send(a, DEVICE.format("DDATA"), _ddata(3, a8=1.0))
    assert after.status == "unborn" and after.rebirth is not None
    born(a, bd_seq=6, seq=0)
    dd = send(b, DEVICE.format("DDEATH"), pb.Payload(timestamp=T0, seq=2))
    assert dd.dead == ("Plant 1/Edge 1/Press 2",)


def test_the_model_reads_only_its_wanted_metrics(redis, settings):
    names = Names("spw", key_prefix=settings.key_prefix)
    w = SparkplugNodes(redis, names, CONFIG, wanted={"Temperature", "Mode"})
    born(w)
    assert send(w, DEVICE.format("DDATA"), _ddata(2, a8=1.0, a9=3)).values == {"Temperature": 1.0}
    stored = redis.hgetall(names.sparkplug_key("a:Plant 1/Edge 1/Press 2"))
    assert stored[str(RPM).encode()] == b"3 " and stored[str(MODE).encode()] == b"12 Mode"


def test_a_flood_of_made_up_nodes_is_bounded_and_displaces_no_born_node(redis, settings):
    names = Names("spf", key_prefix=settings.key_prefix)
    config = CONFIG.model_copy(update={"max_nodes": 20, "max_devices_per_node": 2})
    w = SparkplugNodes(redis, names, config)
    born(w)
    data = decode(_ddata(1, a8=0.0).SerializeToString())
    w.handle_many([(parse_topic(f"spBv1.0/Plant 1/NDATA/fake-{i}"), data) for i in range(300)], NOW)
    assert redis.zcard(names.sparkplug_key("unborn")) == 19
    assert redis.zcard(names.sparkplug_key("index")) == 20
    assert len(list(redis.scan_iter(names.sparkplug_key("*"), count=1000))) <= 3 * 20 + 4
    assert send(w, DEVICE.format("DDATA"), _ddata(2, a8=9.0), NOW + 2).values == {
        "Temperature": 9.0
    }
    for d in ("d1", "d2", "d3"):  # a device past the node's bound: refused, nothing asked
        h = send(w, f"spBv1.0/Plant 1/DBIRTH/Edge 1/{d}", _dbirth(seq=3), NOW + 3)
        assert (h.status, bool(h.values)) == (
            ("birth", True) if d == "d1" else ("too_many_devices", False)
        )
        h = send(w, f"spBv1.0/Plant 1/DDATA/Edge 1/{d}", _ddata(4, a8=1.0), NOW + 3)
    assert (h.status, h.rebirth) == ("too_many_devices", None)
