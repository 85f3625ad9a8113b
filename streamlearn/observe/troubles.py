"""The troubles a user meets, by the words the code shows them in: where each shows, what it
means, what to do.

docs/gen_troubleshooting.py writes the Troubleshooting page from `TROUBLES` and from the
dead-letter kinds' own table, `streamlearn.contract.records.DEAD_LETTERS`. A trouble names
the modules that emit its message (`emitted_by`); tests/unit/test_troubleshooting.py checks
that each fixed part of the message (the text between `<...>` placeholders) is still in a
string literal of each of them, so a reworded message fails a test, not a reader's search.
"""

from __future__ import annotations

from dataclasses import dataclass

TOPICS = ("Predictions", "Weights", "The broker", "Redis", "Ingest and the learner", "Starting")


@dataclass(frozen=True)
class Trouble:
    topic: str  # one of TOPICS: the page's section
    message: str  # as the user sees it; `<...>` marks what varies
    shows: str  # where: an error reply, a worker's log, `streamlearn status`, an exit
    means: str
    do: str
    emitted_by: tuple[str, ...]  # modules whose string literals hold the message
    metric: str = ""  # the metric that counts it, if one does (its full name)


TROUBLES: tuple[Trouble, ...] = (
    # -- predictions ------------------------------------------------------------------------
    Trouble(
        "Predictions",
        "no reply from model '<model>' within <timeout> s: is an actor running?",
        "the client: `TimeoutError`; `streamlearn predict` says `no reply within <timeout> "
        "s` and exits 1",
        "no answer came: no actor serves the model (or the client's topic prefix or model "
        "name differs from the actors'), the actor shed the request, or the broker did not "
        "let the reply reach the client (its account may not read its reply topic)",
        "`streamlearn status` lists the model's actors; check the model name and "
        "`STREAMLEARN_TOPIC_PREFIX` on both sides, the actors' `shed_requests_total`, and "
        "the broker's ACL: a client reads its replies on `replies/{client}/#`",
        ("streamlearn.client.client",),
    ),
    Trouble(
        "Predictions",
        "no weights published yet for model '<model>'",
        "an error reply (HTTP 503; the client raises `PredictionError`); "
        "`streamlearn export` exits 1 with it",
        "no version of the weights is in Redis yet: an actor of a model built by a "
        "`factory` waits for the learner's first version (a built-in model answers from "
        "its prior, version 0); `export` needs a published version",
        "stream samples in (`streamlearn publish`), and check with `streamlearn status` "
        "that the learner runs and its version rises; actors load the first version as it "
        "is announced",
        ("streamlearn.actor.loop", "streamlearn.nn.export"),
    ),
    Trouble(
        "Predictions",
        "<x or each row of x> must have shape <[inputs]>, got <[n]>",
        "an error reply (HTTP 400; the client raises `PredictionError`)",
        "the request's `x` has not the model's shape: `inputs` numbers a row, or "
        "`[window][inputs]` for a windowed model",
        "send the model's inputs in the config's order, or named fields as a JSON object "
        '(`{"temperature": 88.0, ...}`) when the model declares `fields`',
        ("streamlearn.contract.payloads",),
        "streamlearn_actor_refused_requests_total",
    ),
    Trouble(
        "Predictions",
        "x: <n> rows, more than max_request_rows=<limit>",
        "an error reply (HTTP 400)",
        "one request asked for more rows than `actor.max_request_rows`",
        "split the request, or raise `actor.max_request_rows`",
        ("streamlearn.contract.payloads",),
        "streamlearn_actor_refused_requests_total",
    ),
    Trouble(
        "Predictions",
        "request too wide: <n> fields and values (counted by ':' and ','), a request of "
        "model '<model>' holds at most <limit>; refused unread",
        "an error reply (HTTP 400)",
        "the request's JSON holds far more values than the model's rows could: refused "
        "before it is parsed, so a hostile request cannot cost the actor its time",
        "send `inputs` numbers a row and at most `actor.max_request_rows` rows",
        ("streamlearn.contract.width",),
        "streamlearn_actor_refused_requests_total",
    ),
    Trouble(
        "Predictions",
        "reply of <n> bytes exceeds the <limit> bytes a reply may have (max_reply_bytes, "
        "the broker's maximum packet size): ask for fewer rows",
        "an error reply in place of the answer",
        "the answer would be larger than `actor.max_reply_bytes`",
        "ask for fewer rows a request, or raise `actor.max_reply_bytes` (and the broker's "
        "`max_packet_size`)",
        ("streamlearn.actor.replies",),
        "streamlearn_actor_refused_requests_total",
    ),
    Trouble(
        "Predictions",
        "deadline exceeded: waited <ms> ms in the actor's queue, past "
        "request_deadline_ms=<ms> or the request's message expiry; not computed",
        "an error reply (HTTP 504)",
        "the request waited in the actor's queue longer than `actor.request_deadline_ms` "
        "(or its MQTT v5 Message Expiry Interval): the actors are behind",
        "add actors (`actor.replicas`, or more processes in the shared subscription), "
        "raise `actor.max_batch`, or send fewer requests",
        ("streamlearn.actor.inbox",),
        "streamlearn_actor_expired_requests_total",
    ),
    Trouble(
        "Predictions",
        "inbox full (<n> requests, <bytes> bytes): shed <n> requests since the last report",
        "the actor's log; a shed MQTT request gets no reply (the client times out)",
        "more requests wait than `actor.max_queued_requests` (or `max_queued_bytes`), or "
        "one client holds more than its share of the queue: new ones are dropped",
        "add actors, or have clients send fewer requests at once (a batch of rows is one request)",
        ("streamlearn.actor.inbox",),
        "streamlearn_actor_shed_requests_total",
    ),
    Trouble(
        "Predictions",
        "the actor's queue is full: request shed, retry later",
        "an HTTP 503 of the Open Inference Protocol door",
        "as the MQTT shedding above, for a request over HTTP",
        "retry later with back-off; add actors if it lasts",
        ("streamlearn.actor.http",),
        "streamlearn_actor_shed_requests_total",
    ),
    Trouble(
        "Predictions",
        "internal error: <exception>",
        "an error reply (HTTP 503); the actor logs the traceback",
        "reading a request or computing its batch raised: a bug, which the serving loop survives",
        "report it with the actor's log (the traceback after `serving a batch of` or "
        "`reading a request failed`)",
        ("streamlearn.actor.loop", "streamlearn.actor.inbox"),
        "streamlearn_actor_failed_requests_total",
    ),
    # -- weights ----------------------------------------------------------------------------
    Trouble(
        "Weights",
        "refused weights v<version>, serving the previous version: <reason>",
        "the actor's log (an error)",
        "a published version does not fit the model the actor built (another config's "
        "shape or variant, a damaged blob, a pinned version no longer in Redis): the actor "
        "keeps serving the one it has",
        "run the learner and the actors with the same `streamlearn.toml`; after changing a "
        "model's shape, wait for the learner's first version of the new shape; pin only "
        "versions `streamlearn status` lists",
        ("streamlearn.actor.reloader",),
        "streamlearn_actor_refused_versions_total",
    ),
    Trouble(
        "Weights",
        "model '<model>' has no version <version> in Redis; versions kept: <versions>",
        "`streamlearn export` or `pin`, exit 1",
        "the version asked for is no longer kept (`learner.history`) or never was",
        "pick one of the versions listed; keep more with `learner.history.versions`",
        ("streamlearn.nn.export", "streamlearn.store.weights"),
    ),
    # -- the broker -------------------------------------------------------------------------
    Trouble(
        "The broker",
        "MQTT connect to <host>:<port> refused: <reason, e.g. Not authorized>",
        "any command or worker, exit 1",
        "the broker refused the connection: a wrong user name or password, a client id "
        "the broker does not allow, or an account without access",
        "check the user and password in `STREAMLEARN_MQTT_URL` and the broker's password "
        "file (deploy/mosquitto/make-passwd.sh)",
        ("streamlearn.mqtt",),
    ),
    Trouble(
        "The broker",
        "the broker refused a publish to <topic>: <reason, e.g. Not authorized>",
        "the client: `StreamlearnError` from `publish` (QoS 1)",
        "the broker's ACL does not let this account publish on that topic (a device may "
        "publish only on its own `samples/{client}` and `labels/{client}`)",
        "publish on the account's own topics, or grant the topic in the broker's ACL "
        "(deploy/mosquitto/acl)",
        ("streamlearn.client.pending",),
    ),
    Trouble(
        "The broker",
        "subscription refused: <reason codes>",
        "a worker's log (an error)",
        "the broker refused a subscription: the account may not read those topics, or "
        "(the guard plugin) a shared subscription or retained topic reserved to the roles",
        "run each role under its own account of deploy/mosquitto/acl (`ingest`, `learner`, "
        "`actor`), or grant the topics there",
        ("streamlearn.mqtt",),
    ),
    Trouble(
        "The broker",
        "the broker delays a reply that follows a PUBACK by <ms> ms (Nagle's algorithm)",
        "the actor's log (a warning) and `streamlearn status`",
        "the broker holds small packets back (Nagle's algorithm, Mosquitto's default): "
        "every prediction request sent at QoS 1 waits about 40 ms more",
        "set `set_tcp_nodelay true` in mosquitto.conf and restart the broker",
        ("streamlearn.observe.broker_delay",),
        "streamlearn_actor_broker_delay_seconds",
    ),
    # -- redis ------------------------------------------------------------------------------
    Trouble(
        "Redis",
        "redis refused <call> (<OOM command not allowed when used memory ...>); failure <n> "
        "in a row, next try in <s> s",
        "the learner's log (a warning); `redis_oom` 1 in its status and metrics",
        "Redis is full (`maxmemory` with `noeviction`) and answers `OOM command not allowed "
        "when used memory > 'maxmemory'`: it refuses the writes that take "
        "memory (a publish, a status), which are retried with back-off; reads, "
        "acknowledgements and trims still go, so the learner drains the stream",
        "raise Redis's `maxmemory`, or keep less: fewer versions (`learner.history`), a "
        "shorter `ingest.dedup_window_s`, fewer kept predictions (`labels.max_pending_bytes`); "
        "a learner that is down lets the stream grow until ingest holds back",
        ("streamlearn.store.retries",),
        "streamlearn_learner_redis_oom",
    ),
    Trouble(
        "Redis",
        "redis refused it: <reason>",
        "a dead letter of kind `redis_refused` (and ingest's log)",
        "ingest could not store a message for a reason that would repeat (Redis full, "
        "most often), even alone: it dead-letters it and acknowledges it rather than "
        "retry for ever",
        "as for the learner's OOM above; `streamlearn status` shows the stream's backlog",
        ("streamlearn.ingest.writes",),
        "streamlearn_ingest_deadletters_total",
    ),
    Trouble(
        "Redis",
        "redis unavailable (<error>); retry <n> in <s> s",
        "ingest's log (a warning)",
        "Redis cannot be reached: ingest holds the messages unacknowledged (the broker "
        "keeps QoS 1 ones) and retries",
        "check that Redis runs and `STREAMLEARN_REDIS_URL` points at it",
        ("streamlearn.ingest.writes",),
        "streamlearn_ingest_redis_errors_total",
    ),
    # -- ingest -----------------------------------------------------------------------------
    Trouble(
        "Ingest and the learner",
        "back-pressure on: <n> samples unprocessed > max_backlog_samples=<limit>; holding "
        "messages at the broker",
        "ingest's log (a warning); `holding` 1",
        "the learner is behind (or down) by more than `ingest.max_backlog_samples`: ingest "
        "stops acknowledging until it catches up, and the broker keeps the messages",
        "check the learner in `streamlearn status`; a lasting backlog needs a faster "
        "learner (`learner.max_batch`, a GPU) or fewer samples",
        ("streamlearn.ingest.loop",),
        "streamlearn_ingest_back_pressure_pauses_total",
    ),
    Trouble(
        "Ingest and the learner",
        "inbox full (<n> messages, <bytes> bytes): dropping QoS 0 messages, <n> so far",
        "ingest's log (a warning)",
        "messages come faster than ingest stores them; QoS 0 ones, which promise no "
        "delivery, are dropped (QoS 1 ones wait at the broker)",
        "publish samples at QoS 1 (the Client does), or add ingest processes (`ingest.replicas`)",
        ("streamlearn.ingest.inbox",),
        "streamlearn_ingest_qos0_dropped_total",
    ),
    Trouble(
        "Ingest and the learner",
        "OFFLINE (presence gone: stopped or dead), last <status>",
        "`streamlearn status`, on the learner's line (STALE: its status not refreshed)",
        "the learner's retained presence marker was cleared by its will: the process "
        "stopped or died (STALE: it runs but reports nothing: hung)",
        "read the learner's log (`streamlearn up` keeps each worker's in its run "
        "directory) and start it again",
        ("streamlearn.observe.status_text",),
    ),
    # -- starting ---------------------------------------------------------------------------
    Trouble(
        "Starting",
        "streamlearn: configuration error: <file>: <field>: <what is wrong>, got <value>",
        "any command, on stderr; exit 2",
        "`streamlearn.toml` or an environment variable is invalid: the message names the "
        "field and echoes the value",
        "fix the field; every field, its bounds and default: the "
        "[configuration reference](reference/configuration.md)",
        ("streamlearn.cli.main",),
    ),
    Trouble(
        "Starting",
        "several models configured, pick one with --model: <models>",
        "a command, exit 2",
        "the config declares more than one model and the command was not told which",
        "add `--model NAME`",
        ("streamlearn.config.app",),
    ),
    Trouble(
        "Starting",
        "this command needs the service extra: pip install 'streamlearn[service]'",
        "a command of the service, on stderr after `streamlearn: `; exit 2",
        "the install has the client alone (paho-mqtt): the service's commands need Redis, "
        "pydantic, numpy and Keras",
        "install the extra: `pip install '.[service]'` in the checkout",
        ("streamlearn.cli.main",),
    ),
)
