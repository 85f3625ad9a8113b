"""Unit tests for configuration: streamlearn.toml, STREAMLEARN_* settings, and the doctests."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from streamlearn.config import (
    DEFAULT_CONFIG,
    LearnerConfig,
    Settings,
    load_config,
    load_settings,
    parse_config,
)
from streamlearn.errors import ConfigError

# The first design's example config, as it was written: it must still load (contract §9).
DESIGN_TOML = """\
[models.demo]
inputs = 9            # length of x
task = "binary"       # regression | binary | multiclass (then: classes = N)
architecture = "mlp"  # linear | mlp | lstm (then: window = W, x is [W, inputs])
hidden = [64, 64]
learning_rate = 0.01
"""


def write(tmp_path: Path, text: str | bytes, name: str = "streamlearn.toml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def config_error(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(tomllib.loads(text))
    return str(info.value)


# -- the design's minimal file ----------------------------------------------------------------


def test_design_minimal_toml_loads_as_written(tmp_path):
    cfg = load_config(write(tmp_path, DESIGN_TOML))
    model = cfg.model(None)
    assert model is cfg.model("demo")
    assert model.name == "demo"
    assert model.inputs == 9 and model.sample_shape == (9,)
    assert model.task == "binary" and model.outputs == 1
    assert model.architecture == "mlp" and model.hidden == (64, 64)
    assert model.learning_rate == 0.01


def test_defaults_fill_everything_else(tmp_path):
    model = load_config(write(tmp_path, DESIGN_TOML)).model("demo")
    assert model.optimizer == "adam" and model.classes is None and model.window is None
    assert model.learner.max_batch == 256 and model.learner.max_wait_ms == 0
    assert model.learner.publish.every_steps == 50 and model.learner.publish.every_ms == 250
    assert model.learner.history.newest == 5
    assert model.learner.status_every_ms <= 2000  # status is refreshed at least every 2 s
    assert model.actor.max_batch == 64 and model.actor.max_wait_ms == 2
    assert model.ingest.max_payload_bytes == 1_048_576
    assert model.ingest.max_samples_per_message == 10_000


def test_no_path_uses_local_file_else_builtin_demo(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    demo = load_config(None).model(None)
    assert (demo.name, demo.inputs, demo.task) == ("demo", 9, "binary")
    write(tmp_path, "[models.local]\ninputs = 2\n", DEFAULT_CONFIG)
    assert list(load_config(None).models) == ["local"]


def test_model_choice_by_name():
    cfg = parse_config(tomllib.loads("[models.a]\ninputs = 1\n[models.b]\ninputs = 2\n"))
    assert cfg.model("b").inputs == 2
    with pytest.raises(
        ConfigError, match=r"several models configured, pick one with --model: \['a', 'b'\]"
    ):
        cfg.model(None)
    with pytest.raises(ConfigError, match=r"no model 'c' in the config; known: \['a', 'b'\]"):
        cfg.model("c")


def test_multiclass_and_lstm_models():
    cfg = parse_config(
        tomllib.loads(
            '[models.cls]\ninputs = 4\ntask = "multiclass"\nclasses = 5\n'
            '[models.seq]\ninputs = 3\narchitecture = "lstm"\nwindow = 8\n'
        )
    )
    assert cfg.model("cls").outputs == 5 and cfg.model("cls").sample_shape == (4,)
    assert cfg.model("seq").sample_shape == (8, 3) and cfg.model("seq").outputs == 1


# -- top-level defaults and per-model overrides ----------------------------------------------


def test_top_level_sections_are_defaults_overridden_per_model_field_by_field():
    cfg = parse_config(
        tomllib.loads("""
[learner]
max_batch = 32
max_wait_ms = 5

[actor]
max_batch = 8

[ingest]
max_payload_bytes = 4096

[models.a]
inputs = 1
[models.a.learner]
max_batch = 8
[models.a.ingest]
max_samples_per_message = 3

[models.b]
inputs = 2
""")
    )
    a, b = cfg.model("a"), cfg.model("b")
    assert (a.learner.max_batch, a.learner.max_wait_ms) == (8, 5)
    assert (b.learner.max_batch, b.learner.max_wait_ms) == (32, 5)
    assert a.learner.publish.every_steps == 50  # untouched fields keep their defaults
    assert a.actor.max_batch == b.actor.max_batch == 8
    assert (a.ingest.max_payload_bytes, a.ingest.max_samples_per_message) == (4096, 3)
    assert (b.ingest.max_payload_bytes, b.ingest.max_samples_per_message) == (4096, 10_000)


# -- bad values: the message names the field and echoes the value -------------------------


@pytest.mark.parametrize(
    ("toml", "field", "shown"),
    [
        (
            "[models.demo]\ninputs = 9\n[models.demo.learner]\nmax_batch = 0\n",
            "models.demo.learner.max_batch",
            "got 0",
        ),
        (
            "[learner]\nmax_wait_ms = -1\n[models.demo]\ninputs = 9\n",
            "models.demo.learner.max_wait_ms",
            "got -1",
        ),
        (
            "[models.demo]\ninputs = 9\n[models.demo.learner]\nstatus_every_ms = 5000\n",
            "models.demo.learner.status_every_ms",
            "got 5000",
        ),
        ("[models.demo]\ninputs = 0\n", "models.demo.inputs", "got 0"),
        ('[models.demo]\ninputs = 9\ntask = "ranking"\n', "models.demo.task", "got 'ranking'"),
        (
            '[models.demo]\ninputs = 9\narchitecture = "cnn"\n',
            "models.demo.architecture",
            "got 'cnn'",
        ),
        ("[models.demo]\ninputs = 9\nlearning_rate = 0\n", "models.demo.learning_rate", "got 0"),
        (
            "[models.demo]\ninputs = 9\n[models.demo.actor]\nmax_batch = -3\n",
            "models.demo.actor.max_batch",
            "got -3",
        ),
        (
            "[models.demo]\ninputs = 9\n[models.demo.ingest]\nmax_payload_bytes = 10\n",
            "models.demo.ingest.max_payload_bytes",
            "got 10",
        ),
        (
            '[models.demo]\ninputs = 9\nfactory = "not a factory"\n',
            "models.demo.factory",
            "got 'not a factory'",
        ),
        ('[models."bad name"]\ninputs = 9\n', "models.bad name.name", "got 'bad name'"),
        ("[models.demo]\ninputs = 9\nhidden = [64, 0]\n", "models.demo", "got [64, 0]"),
        (
            "[models.demo]\ninputs = 9\n[models.demo.learner]\nbuckets = [8, 16]\n",
            "models.demo.learner",
            "got [8, 16]",
        ),
        (
            "[models.demo]\ninputs = 9\n[models.demo.learner]\nbuckets = []\n",
            "models.demo.learner",
            "got []",
        ),
    ],
)
def test_bad_values_name_the_field_path_and_echo_the_value(toml, field, shown):
    message = config_error(toml)
    assert message.startswith(f"config: {field}: ")
    assert shown in message


def test_file_errors_name_the_file(tmp_path):
    path = write(tmp_path, "[models.demo]\ninputs = 9\n[models.demo.learner]\nmax_batch = 0\n")
    with pytest.raises(
        ConfigError, match=rf"^{re.escape(str(path))}: models\.demo\.learner\.max_batch: .*got 0$"
    ):
        load_config(path)


def test_multiclass_needs_classes_and_only_multiclass_takes_them():
    assert config_error('[models.demo]\ninputs = 9\ntask = "multiclass"\n') == (
        "config: models.demo: task 'multiclass' needs classes = N"
    )
    assert config_error("[models.demo]\ninputs = 9\nclasses = 3\n") == (
        "config: models.demo: classes is only for task 'multiclass', got task 'regression'"
    )
    assert "models.demo.classes" in config_error(
        '[models.demo]\ninputs = 9\ntask = "multiclass"\nclasses = 1\n'
    )


@pytest.mark.parametrize("architecture", ["lstm", "conv1d"])
def test_sequence_architectures_need_window(architecture):
    toml = f'[models.demo]\ninputs = 9\narchitecture = "{architecture}"\n'
    assert config_error(toml) == (
        f"config: models.demo: architecture '{architecture}' needs window = W"
    )


def test_window_ttl_must_be_positive():
    toml = '[models.demo]\ninputs = 1\nwindow = 4\narchitecture = "lstm"\n'
    toml += "[ingest]\nwindow_ttl_s = 0\n"
    assert config_error(toml) == (
        "config: models.demo.ingest.window_ttl_s: Input should be greater than or equal to 1, got 0"
    )


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        (
            "[models.demo]\ninputs = 9\nlayers = 3\n",
            "config: models.demo.layers: Extra inputs are not permitted, got 3",
        ),
        (
            "[models.demo]\ninputs = 9\n[models.demo.learner]\nbatch = 8\n",
            "config: models.demo.learner.batch: Extra inputs are not permitted, got 8",
        ),
        (
            "[learner]\nbatch = 8\n[models.demo]\ninputs = 9\n",
            "config: models.demo.learner.batch: Extra inputs are not permitted, got 8",
        ),
        ("[model.demo]\ninputs = 9\n", "config: unknown top-level table(s) ['model']"),
    ],
)
def test_unknown_keys_are_rejected(toml, expected):
    assert config_error(toml) == expected


@pytest.mark.parametrize("toml", ["", "[learner]\nmax_batch = 8\n", "models = 3\n", "[models]\n"])
def test_at_least_one_model_is_required(toml):
    assert config_error(toml) == "config: models: at least one [models.NAME] table is required"


def test_model_entry_must_be_a_table():
    assert config_error("[models]\ndemo = 3\n") == "config: models.demo: must be a table, got 3"


def test_invalid_toml_names_the_file(tmp_path):
    path = write(tmp_path, "[models.demo\ninputs = 9\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: invalid TOML: "):
        load_config(path)


def test_missing_file_is_a_config_error(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(
        ConfigError, match=rf"^cannot read config {re.escape(str(path))}: No such file"
    ):
        load_config(path)


@pytest.mark.parametrize(
    "toml",
    ["[models.demo]\ninputs = 9\nlearner = 5\n", "learner = 5\n[models.demo]\ninputs = 9\n"],
    ids=["per-model", "top-level"],
)
def test_section_that_is_not_a_table_is_a_config_error(toml):
    assert "learner" in config_error(toml)


def test_non_utf8_file_is_a_config_error(tmp_path):
    path = write(tmp_path, b'[models.demo]\ninputs = 9\nfactory = "\xff"\n')
    with pytest.raises(ConfigError, match=re.escape(str(path))):
        load_config(path)


def test_name_key_cannot_rename_a_model():
    try:
        model = parse_config(tomllib.loads('[models.demo]\ninputs = 9\nname = "other"\n')).model(
            "demo"
        )
    except ConfigError:
        return  # refusing the key is fine too
    assert model.name == "demo"


# -- bucket sizes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_batch", "sizes"),
    [
        (1, (1,)),
        (10, (10,)),
        (16, (16,)),
        (17, (16, 17)),
        (64, (16, 64)),
        (100, (16, 64, 100)),
        (256, (16, 64, 256)),
        (1000, (16, 64, 256, 1000)),
    ],
)
def test_default_buckets_are_powers_of_four_up_to_max_batch(max_batch, sizes):
    assert LearnerConfig(max_batch=max_batch).bucket_sizes() == sizes


def test_explicit_buckets_are_sorted_and_deduplicated():
    assert LearnerConfig(max_batch=64, buckets=(64, 8, 8, 32)).bucket_sizes() == (8, 32, 64)
    assert LearnerConfig(max_batch=10, buckets=(128,)).bucket_sizes() == (128,)


def test_every_batch_fits_the_largest_bucket():
    for cfg in (
        LearnerConfig(),
        LearnerConfig(max_batch=300),
        LearnerConfig(max_batch=5, buckets=(2, 5)),
    ):
        assert max(cfg.bucket_sizes()) >= cfg.max_batch


# -- environment settings ---------------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch):
    import os

    for name in list(os.environ):
        if name.upper().startswith("STREAMLEARN_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_settings_defaults(clean_env):
    s = load_settings()
    assert s.mqtt_url is None and s.redis_url is None
    assert s.mqtt == "mqtt://localhost:1883"
    assert s.redis == "redis://localhost:6379/0"
    assert (s.topic_prefix, s.key_prefix, s.share_group) == ("streamlearn", "sl", "streamlearn")


def test_settings_from_environment(clean_env):
    clean_env.setenv("STREAMLEARN_MQTT_URL", "mqtts://dev:secret@broker:8883")
    clean_env.setenv("STREAMLEARN_REDIS_URL", "redis://:pw@cache:6380/2")
    clean_env.setenv("STREAMLEARN_TOPIC_PREFIX", "plant7")
    clean_env.setenv("STREAMLEARN_KEY_PREFIX", "p7")
    clean_env.setenv("STREAMLEARN_SHARE_GROUP", "workers")
    clean_env.setenv("STREAMLEARN_UNRELATED", "ignored")
    s = load_settings()
    assert s.mqtt == "mqtts://dev:secret@broker:8883"
    assert s.redis == "redis://:pw@cache:6380/2"
    assert (s.topic_prefix, s.key_prefix, s.share_group) == ("plant7", "p7", "workers")
    assert Settings() == s


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("STREAMLEARN_TOPIC_PREFIX", "a/#"),
        ("STREAMLEARN_TOPIC_PREFIX", "$SYS"),
        ("STREAMLEARN_KEY_PREFIX", "a{b}"),
        ("STREAMLEARN_KEY_PREFIX", "two words"),
        ("STREAMLEARN_SHARE_GROUP", "a/b"),
    ],
)
def test_bad_environment_value_names_the_variable(clean_env, var, value):
    clean_env.setenv(var, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert message.startswith(f"environment: {var}: ")
    assert f"got {value!r}" in message


def test_a_memory_head_is_for_a_learner_on_one_device():
    """On several devices the model has no memory head (its mirrored step could not score
    it); asked for there, it is a config error that names the field."""
    toml = "[models.demo]\ninputs = 9\n[models.demo.learner]\ndistribute = 'mirrored'\n"
    cfg = parse_config(tomllib.loads(toml)).model("demo")
    assert cfg.memory == 500 and cfg.memory_slots == 0
    message = config_error(toml.replace("inputs = 9\n", "inputs = 9\nmemory = 200\n"))
    assert "memory: a memory head needs a learner on one device" in message
    assert "got learner.distribute = 'mirrored'" in message


# -- the learning table and the library's specs -----------------------------------------


def test_a_tables_defaults_are_the_librarys_specs():
    """`[models.NAME]` and its learning table at their defaults build what
    `OnlineModel(ModelSpec(...))` builds: one set of defaults, not two."""
    from streamlearn.online.spec import LearningSpec, ModelSpec

    cfg = parse_config({"models": {"m": {"inputs": 3}}}).model("m")
    assert cfg.spec == ModelSpec(inputs=3, name="m")
    assert cfg.learning_spec() == LearningSpec()
    named = parse_config(
        {"models": {"n": {"inputs": ["a", "b"], "task": "binary", "categorical": {"b": ["x"]}}}}
    ).model("n")
    assert named.spec == ModelSpec("binary", ("a", "b"), categorical={"b": ("x",)}, name="n")


def test_a_learning_key_of_learner_is_read_with_a_warning_naming_its_new_place():
    toml = """
[learner]
drift_detection = false
[models.m]
inputs = 2
[models.m.learner]
replay_ratio = 4
[models.m.variants.v.learner]
replay_batch = 64
"""
    with pytest.warns(FutureWarning) as seen:
        cfg = parse_config(tomllib.loads(toml)).model("m")
    said = sorted({str(w.message) for w in seen})
    assert "learner.drift_detection: now learning.drift_detection" in said[0]
    assert "models.m.learner.replay_ratio: now models.m.learning.replay_ratio" in "".join(said)
    assert (cfg.learning.replay_ratio, cfg.learning.drift_detection) == (4, False)
    variant = cfg.variant("v")
    assert (variant.learning.replay_batch, variant.learning.replay_ratio) == (64, 4)


def test_a_learning_key_set_in_both_tables_is_an_error_naming_both():
    toml = """
[models.m]
inputs = 2
[models.m.learner]
replay_ratio = 4
[models.m.learning]
replay_ratio = 8
"""
    with pytest.raises(ConfigError, match=r"learner\.replay_ratio: now .*learning\.replay_ratio"):
        parse_config(tomllib.loads(toml))


def test_the_learning_table_and_its_top_level_defaults():
    toml = """
[learning]
replay_ratio = 2
[models.m]
inputs = 2
[models.m.learning]
clip_norm = 1.0
[models.m.variants.v.learning]
replay_ratio = 0
"""
    cfg = parse_config(tomllib.loads(toml)).model("m")
    assert (cfg.learning.replay_ratio, cfg.learning.clip_norm) == (2, 1.0)
    assert cfg.spec.clip_norm == 1.0 and cfg.learning_spec().replay_ratio == 2
    assert cfg.variant("v").learning_spec().replay_ratio == 0
    with pytest.raises(ConfigError, match=r"learning\.replay_ratio.*-1"):
        parse_config(tomllib.loads(toml.replace("replay_ratio = 2", "replay_ratio = -1")))


def test_the_learners_groups_and_their_flat_keys_of_before():
    """`[learner.publish]`, `[learner.history]`, `[learner.checkpoint]`: a top-level group
    and a model's merge field by field, a variant's over the model's; the flat keys of
    0.1 (`publish_min_ms`) are read into them with a warning naming the new key."""
    toml = """
[learner.publish]
every_ms = 100
[models.m]
inputs = 2
[models.m.learner]
publish.min_ms = 5
checkpoint.dir = "ckpt"
[models.m.variants.v.learner.publish]
every_steps = 7
"""
    cfg = parse_config(tomllib.loads(toml)).model("m")
    publish = cfg.learner.publish
    assert (publish.every_ms, publish.min_ms, publish.every_steps) == (100, 5, 50)
    assert cfg.learner.checkpoint.dir == "ckpt" and cfg.learner.checkpoint.every_s == 10
    fast = cfg.variant("v").learner.publish
    assert (fast.every_ms, fast.min_ms, fast.every_steps) == (100, 5, 7)
    old = "[models.m]\ninputs = 2\n[models.m.learner]\npublish_min_ms = 5\nkeep_versions = 9\n"
    with pytest.warns(
        FutureWarning,
        match=r"models\.m\.learner\.publish_min_ms: now models\.m\.learner\.publish\.min_ms",
    ):
        cfg = parse_config(tomllib.loads(old)).model("m")
    assert (cfg.learner.publish.min_ms, cfg.learner.history.newest) == (5, 9)
    with pytest.warns(
        FutureWarning, match=r"learner\.checkpoint_every_s: now learner\.checkpoint\.every_s"
    ):
        assert LearnerConfig(checkpoint_every_s=2).checkpoint.every_s == 2


def test_the_moved_learning_keys_are_the_learning_tables_fields():
    from streamlearn.config.learning import LearningConfig
    from streamlearn.config.moved import LEARNING_KEYS

    assert set(LEARNING_KEYS) == set(LearningConfig.model_fields)
