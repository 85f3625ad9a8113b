"""`streamlearn publish`: a CSV/NDJSON file or the demo stream, to a model's samples topic."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from streamlearn.cli import light
from streamlearn.cli.target import LightModel
from streamlearn.errors import ConfigError

if TYPE_CHECKING:
    from streamlearn.config.app import ModelConfig


def run(args: argparse.Namespace, target: Callable[[argparse.Namespace], tuple]) -> int:
    """`streamlearn publish FILE|--demo`: each message judged by ingest's own parser first
    (`_Refusals`), sent at `--rate`, refused samples reported (exit 1)."""
    from streamlearn.contract.names import Names

    if not args.demo and not args.file:
        raise ConfigError("publish needs a FILE or --demo")
    model, client = target(args)
    names = Names(model.name, client.topic_prefix)
    payloads = (
        _demo_payloads(model, args.batch)
        if args.demo
        else light.file_payloads(args.file, args.batch, model)
    )
    total = args.count if args.demo else light.count_samples(args.file)
    if args.count is not None and total is not None:
        total = min(total, args.count)
    progress = light.ProgressBar(total)
    judge = None if isinstance(model, LightModel) else _Refusals(model)
    sent = messages = 0
    failure: ConfigError | None = None
    start = time.monotonic()

    def paced() -> Iterator[bytes]:
        """The payloads up to --count, at --rate, counted as the client takes them; one the
        model's checks refuse whole is not sent; a bad line ends them (what came before goes)."""
        nonlocal sent, messages, failure
        try:
            for n, payload in payloads:
                if args.count is not None and sent >= args.count:
                    return
                if judge is None or judge.judge(sent, n, payload):
                    yield payload
                    messages += 1
                sent += n
                progress.update(sent)
                if args.rate:
                    ahead = sent / args.rate - (time.monotonic() - start)
                    if ahead > 0:
                        time.sleep(ahead)
        except ConfigError as exc:
            failure = exc

    try:
        client.publish_payloads(model.name, paced(), timeout=30)
    except KeyboardInterrupt:
        pass
    finally:
        client.close()
        progress.finish(sent)
    refused = judge.samples if judge else 0
    if failure is not None:
        raise ConfigError(f"{failure} (published before it: {sent - refused} samples)")
    elapsed = time.monotonic() - start
    print(
        f"published {sent - refused} samples in {messages} messages to {names.samples_topic} "
        f"in {elapsed:.1f} s ({sent / max(elapsed, 1e-9):,.0f} samples/s)"
    )
    if refused:
        assert judge is not None  # refusals are counted by the judge
        kinds = ", ".join(f"{kind} {count}" for kind, count in judge.kinds.items())
        print(
            f"streamlearn: {refused} of {sent} samples refused by the model's checks, not "
            f"learned (messages by kind: {kinds}; first: {judge.first[:300]})",
            file=sys.stderr,
        )
    return 1 if refused else 0


class _Refusals:
    """What ingest's own parser refuses of the messages `publish` sends, judged before they
    go with the model as configured here: refused samples by kind, the first reason."""

    def __init__(self, model: ModelConfig) -> None:
        from streamlearn.contract.payloads import PayloadParser

        self.parser = PayloadParser(model)
        self.samples = 0
        self.kinds: dict[str, int] = {}
        self.first = ""

    def judge(self, before: int, n: int, payload: bytes) -> bool:
        """Count what the message's `n` samples (after `before` others) lose; False when
        nothing of it would be kept, so it is not sent."""
        parsed = self.parser.parse_message(payload, at=time.time())
        kept = sum(len(part) for part in (parsed.samples, parsed.observations) if part)
        kept += parsed.fields.unlabeled if parsed.fields else 0
        lost = max(0, n - kept) if parsed.rejections else 0
        if lost:
            self.samples += lost
            for rejection in parsed.rejections:
                self.kinds[rejection.kind] = self.kinds.get(rejection.kind, 0) + 1
            if not self.first:
                self.first = f"samples {before + 1}..{before + n}: {parsed.rejections[0].reason}"
        return kept > 0


def _demo_payloads(model: ModelConfig, batch: int) -> Iterator[tuple[int, bytes]]:
    from streamlearn.stack.demo import DemoStream

    stream = DemoStream(model)
    while True:
        yield batch, json.dumps(stream.payload(batch)).encode()
