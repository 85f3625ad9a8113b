"""Sparkplug B in, without servers: topics, payloads built as Eclipse Tahu's reference edge
node builds them (python/core/sparkplug_b.py, python/examples/example.py), the messages a
host publishes, and the bounds."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import redis

from streamlearn.config import parse_config
from streamlearn.contract.names import Names
from streamlearn.contract.payloads import PayloadParser
from streamlearn.contract.records import DEAD_LETTERS, FieldCounts
from streamlearn.contract.sparkplug import payloads as sp
from streamlearn.contract.sparkplug.proto import sparkplug_b_pb2 as pb
from streamlearn.contract.sparkplug.topics import MAX_ID_CHARS, parse_topic, state_topic, topic_of
from streamlearn.errors import ConfigError, PayloadError
from streamlearn.ingest.assembly import Assembly
from streamlearn.ingest.host import HostState
from streamlearn.ingest.sparkplug import SparkplugIngest
from streamlearn.store.held import HeldStore

# Tahu's MetricDataType numbers and its example's AliasMap
INT8, INT16, INT32, INT64, UINT32, FLOAT, DOUBLE, BOOLEAN, STRING = 1, 2, 3, 4, 7, 9, 10, 11, 12
DATASET, TEMPLATE, BYTES = 16, 19, 17
NEXT_SERVER, REBIRTH, REBOOT, DATASET_ALIAS = 0, 1, 2, 3
TEMPERATURE, RPM, MODE, RUNNING, OFFSET = 8, 9, 10, 11, 12
T0 = 1_700_000_000_000  # ms


def add_metric(payload, name, alias, datatype, value, timestamp=T0):
    """Tahu's `addMetric`: signed integers as their two's complement in the unsigned
    fields, each type in its field."""
    m = payload.metrics.add()
    if name is not None:
        m.name = name
    if alias is not None:
        m.alias = alias
    m.timestamp = timestamp
    m.datatype = datatype
    if datatype in (INT8, INT16, INT32):
        bits = {INT8: 8, INT16: 16, INT32: 32}[datatype]
        m.int_value = value + 2**bits if value < 0 else value
    elif datatype == INT64:
        m.long_value = value + 2**64 if value < 0 else value
    elif datatype == UINT32:
        m.int_value = value
    elif datatype == FLOAT:
        m.float_value = value
    elif datatype == DOUBLE:
        m.double_value = value
    elif datatype == BOOLEAN:
        m.boolean_value = value
    elif datatype == STRING:
        m.string_value = value
    return m


def nbirth(bd_seq=0, seq=0):
    """Tahu's `getNodeBirthPayload` and example's `publishNodeBirth`: seq reset, bdSeq, the
    node controls, a DataSet and a Template definition (no alias)."""
    p = pb.Payload(timestamp=T0, seq=seq)
    add_metric(p, "bdSeq", None, INT64, bd_seq)
    add_metric(p, "Node Control/Next Server", NEXT_SERVER, BOOLEAN, False)
    add_metric(p, "Node Control/Rebirth", REBIRTH, BOOLEAN, False)
    add_metric(p, "Node Control/Reboot", REBOOT, BOOLEAN, False)
    ds = p.metrics.add(name="DataSet", alias=DATASET_ALIAS, timestamp=T0, datatype=DATASET)
    ds.dataset_value.num_of_columns = 1
    ds.dataset_value.columns.append("Int8s")
    tpl = p.metrics.add(name="_types_/Custom_Motor", timestamp=T0, datatype=TEMPLATE)
    tpl.template_value.is_definition = True
    return p


def dbirth(seq=1):
    """A DBIRTH with aliases, as the example's `publishDeviceBirth`."""
    p = pb.Payload(timestamp=T0, seq=seq)
    add_metric(p, "Temperature", TEMPERATURE, FLOAT, 21.5)
    add_metric(p, "Motor/RPM", RPM, INT32, -1200)
    add_metric(p, "Mode", MODE, STRING, "auto")
    add_metric(p, "Running", RUNNING, BOOLEAN, True)
    null = p.metrics.add(name="Offset", alias=OFFSET, timestamp=T0, datatype=INT16)
    null.is_null = True
    return p


def ddata(seq, **by_alias):
    """A DDATA of only the metrics that changed, by alias (Tahu's `getDdataPayload`)."""
    p = pb.Payload(timestamp=T0 + 1000, seq=seq)
    types = {TEMPERATURE: FLOAT, RPM: INT32, MODE: STRING, RUNNING: BOOLEAN}
    for alias, value in by_alias.items():
        a = int(alias.removeprefix("a"))
        add_metric(p, None, a, types[a], value, timestamp=T0 + 900)
    return p


def test_topics_are_read_into_records_and_anything_else_refused():
    t = parse_topic("spBv1.0/Plant 1/DDATA/Edge Node 1/Press 2")
    assert (t.type, t.group, t.node, t.device) == ("DDATA", "Plant 1", "Edge Node 1", "Press 2")
    assert (t.node_key, t.key) == ("Plant 1/Edge Node 1", "Plant 1/Edge Node 1/Press 2")
    assert parse_topic("spBv1.0/g/NDEATH/n").key == "g/n"
    assert parse_topic("spBv1.0/STATE/scada-host").type == "STATE"
    for bad, why in [
        ("spAv1.0/g/NDATA/n", "not a Sparkplug B topic"),
        ("spBv1.0/g/NDATA", "3 levels"),
        ("spBv1.0/g/NDATA/n/d/x", "6 levels"),
        ("spBv1.0/g/NDATA/n/d", "a node's message"),
        ("spBv1.0/g/DBIRTH/n", "names a device"),
        ("spBv1.0/g/NFOO/n", "unknown message type"),
        ("spBv1.0//NDATA/n", "group id is empty"),
        ("spBv1.0/g/NDATA/" + "n" * (MAX_ID_CHARS + 1), "more than 128"),
        ("spBv1.0/g/NDATA/a\x00b", "control character"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_topic(bad)
    assert topic_of("DCMD", "g", "n", "d") == "spBv1.0/g/DCMD/n/d"


def test_a_node_birth_gives_its_bd_seq_and_controls_and_skips_what_it_cannot_read():
    d = sp.decode(nbirth(bd_seq=7, seq=0).SerializeToString())
    assert (d.timestamp_ms, d.seq, d.bd_seq) == (T0, 0, 7)
    names = [m.name for m in d.metrics]
    assert names == ["bdSeq", *(f"Node Control/{c}" for c in ("Next Server", "Rebirth", "Reboot"))]
    assert d.ignored == (DATASET_ALIAS,)  # declared, never read: its data asks nothing
    assert d.skipped == {"unsupported": 2}  # the DataSet and the Template


def test_device_birth_values_by_type_and_null_as_missing():
    d = sp.decode(dbirth().SerializeToString())
    got = {m.name: (m.alias, m.value) for m in d.metrics}
    assert got == {
        "Temperature": (TEMPERATURE, 21.5),
        "Motor/RPM": (RPM, -1200.0),  # Int32 sent as its two's complement
        "Mode": (MODE, "auto"),
        "Running": (RUNNING, 1.0),
        "Offset": (OFFSET, None),  # is_null: missing
    }
    assert all(m.timestamp_ms == T0 for m in d.metrics)


def test_data_by_alias_without_datatype_is_typed_later_by_its_birth():
    p = ddata(5, a9=-3)
    p.metrics[0].ClearField("datatype")  # the spec's DATA may leave it out
    (m,) = sp.decode(p.SerializeToString()).metrics
    assert (m.name, m.alias, m.datatype, m.raw) == (None, RPM, None, 2**32 - 3)
    assert sp.value_of(m.raw, INT32) == -3.0


def test_signed_and_odd_values():
    p = pb.Payload(timestamp=T0, seq=0)
    add_metric(p, "i8", None, INT8, -128)
    add_metric(p, "i64", None, INT64, -(2**40))
    add_metric(p, "nan", None, DOUBLE, float("nan"))
    add_metric(p, "u32", None, UINT32, 2**32 - 1)
    got = {m.name: m.value for m in sp.decode(p.SerializeToString()).metrics}
    assert got == {"i8": -128.0, "i64": -(2.0**40), "nan": None, "u32": 2.0**32 - 1}


def test_bounds_on_names_strings_and_metrics():
    p = pb.Payload(timestamp=T0, seq=0)
    add_metric(p, "n" * (sp.MAX_NAME_CHARS + 1), 1, FLOAT, 1.0)
    add_metric(p, "s", 2, STRING, "x" * (sp.MAX_STRING_CHARS + 1))
    add_metric(p, "tab\tin name", 5, FLOAT, 1.0)
    p.metrics.add(name="blob", alias=3, datatype=BYTES, bytes_value=b"\x00")
    p.metrics.add(timestamp=T0, datatype=FLOAT, float_value=1.0)  # neither name nor alias
    hist = add_metric(p, "h", 4, FLOAT, 2.0)
    hist.is_historical = True
    d = sp.decode(p.SerializeToString())
    assert d.metrics == () and d.ignored == (1, 2, 5, 3, 4)
    assert d.skipped == {
        "bad_name": 2,
        "long_string": 1,
        "unsupported": 1,
        "unnamed": 1,
        "historical": 1,
    }
    big = pb.Payload(timestamp=T0, seq=0)
    for i in range(sp.MAX_METRICS + 1):
        big.metrics.add(alias=i, datatype=FLOAT, float_value=0.0)
    with pytest.raises(PayloadError, match="2049 metrics, more than 2048") as e:
        sp.decode(big.SerializeToString())
    assert e.value.kind == "bad_sparkplug" and "bad_sparkplug" in DEAD_LETTERS


@pytest.mark.parametrize(
    "payload",
    [
        b'{"x": [1, 2], "y": 0}',
        b"\xff\xff\xff",
        b"",
        b"21.5",
        pb.Payload(seq=256).SerializeToString(),
    ],
    ids=["json", "garbage", "empty", "text", "seq-past-255"],
)
def test_what_is_not_a_sparkplug_payload_is_a_dead_letter_of_its_own_kind(payload):
    with pytest.raises(PayloadError) as e:
        sp.decode(payload)
    assert e.value.kind == sp.KIND == "bad_sparkplug"


def test_the_rebirth_request_is_what_an_edge_node_looks_for():
    """Tahu's example edge node reads an NCMD's metrics by name: `Node Control/Rebirth`."""
    p = pb.Payload()
    p.ParseFromString(sp.rebirth_request(T0))
    (m,) = p.metrics
    assert (p.timestamp, m.name, m.datatype, m.boolean_value) == (
        T0,
        "Node Control/Rebirth",
        11,
        True,
    )


def test_the_state_message_is_sparkplug_3s_json():
    assert state_topic("streamlearn-ingest") == "spBv1.0/STATE/streamlearn-ingest"
    assert json.loads(sp.state_payload(False, T0)) == {"online": False, "timestamp": T0}
    with pytest.raises(ValueError, match="host id"):
        state_topic("a/b+")


def test_a_sparkplug_source_reads_metrics_by_name_with_assembly():
    """Config: a filter under spBv1.0/, no key or field, the model's assembly; inputs
    named as Sparkplug names metrics (a space inside, a slash)."""
    source = {"topic": "spBv1.0/Plant 1/#", "format": "sparkplug_b"}
    model = {"inputs": ["Line 1/Motor Speed", "Motor/RPM"], "target": "Quality/Reject"}
    m = parse_config({"models": {"m": {**model, "sources": [source], "assembly": {}}}})
    assert m.model("m").fields == ("Line 1/Motor Speed", "Motor/RPM")
    for bad, why in [
        ({**model, "sources": [source]}, "needs \\[models.NAME.assembly\\]"),
        ({"inputs": 2, "sources": [source], "assembly": {}}, "assembly: only for named"),
        ({**model, "sources": [{**source, "topic": "plant/#"}], "assembly": {}}, "under spBv1"),
        ({**model, "sources": [{**source, "key": "topic:3"}], "assembly": {}}, "no key or field"),
        ({**model, "inputs": ["Motor  RPM"], "sources": [source], "assembly": {}}, "fields"),
    ]:
        with pytest.raises(ConfigError, match=why):
            parse_config({"models": {"m": bad}})


def test_a_host_renews_its_state_on_a_live_offline_message_only():
    """STATE: a retained message (what held before this session) is not news; another
    process's will saying offline is; online messages are not."""
    host = HostState("mqtt://127.0.0.1:1", "h", "c")
    for retain, body, renew in [
        (True, b'{"online": false, "timestamp": 1}', False),
        (False, b'{"online": true, "timestamp": 2}', False),
        (False, b"not json", False),
        (False, b'{"online": false, "timestamp": 3}', True),
    ]:
        host._on_message(None, None, SimpleNamespace(retain=retain, payload=body))
        assert host._renew.is_set() is renew


def test_a_boolean_metric_is_read_as_a_json_boolean_is():
    """A Boolean metric into a categorical input is its "true" or "false" category, as a
    JSON boolean is (contract §2.1.1), not an unseen value; into a number, 1 or 0."""
    toml = {
        "inputs": ["Running", "Motor/RPM"],
        "categorical": {"Running": ["false", "true"]},
        "target": "Reject",
        "sources": [{"topic": "spBv1.0/Plant 1/#", "format": "sparkplug_b"}],
        "assembly": {},
    }
    model = parse_config({"models": {"m": toml}}).model("m")
    parser = PayloadParser(model)
    ingest = SparkplugIngest(Assembly(parser, HeldStore(redis.Redis(), Names("m"))), None)  # type: ignore[arg-type]
    counts = FieldCounts()
    running = sp.value_of(True, BOOLEAN)
    assert ingest._number("Running", running, counts) == 1.0  # "true", the second category
    assert ingest._number("Running", sp.value_of(False, BOOLEAN), counts) == 0.0
    assert ingest._number("Motor/RPM", running, counts) == 1.0
    assert counts.unseen == {}
