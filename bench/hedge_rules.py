"""Mixture rules replayed: a hedge model's heads, recorded once, served by other rules.

    .venv/bin/python -m bench.hedge_rules [--streams sea,wine] [--seeds 0,1]
        [--message-size 40] [--rule '{"loss": "brier"}' --rule '{"beta": 0.98}' ...]

A hedge model's mixture weights move only what is served, never what a head learns
(`streamlearn.online.hedge`), so a rule for them can be judged without training again.
Per stream and seed, `bench.quality`'s in-process loop runs once with the defaults,
recording every head's outputs on each message before it learns it, and the messages
after which a drift set the weights back to uniform; then each rule serves those outputs
and is scored as `bench.quality` scores the served model (accuracy, or MAE).

A rule is JSON: `loss` ("log", the learner's; "brier"; "zero_one"; or "mix:A", A x log
loss + (1 - A) x zero_one), `beta`, `smoothing` and `favoured` (as `online.hedge.Hedge`), or
`{"rule": "adahedge"}` (de Rooij et al., 2014: the learning rate from the mixability gap,
no floor). Columns: `served`, what the learner served; `default`, the learner's rule
replayed, which must match it (the check: the replay is faithful); then each rule's score
less the default's (positive: better accuracy, or worse MAE).
"""

from __future__ import annotations

import argparse
import json
import logging

import numpy as np

from bench import _quality_learners as learners
from bench import _quality_streams as streams
from bench._report import exit_status, report
from streamlearn.online.hedge import FAVOURED, Hedge, HedgeMix

DEFAULT = {"loss": "log", "beta": 0.9, "smoothing": 0.2, "favoured": FAVOURED}


def record(stream: streams.Stream, seed: int, message_size: int) -> dict:
    """The in-process loop on `stream`: each head's outputs per sample, before learning it."""
    import keras

    keras.utils.set_random_seed(seed)
    learner = learners.in_process(learners.model_config(stream))
    trainer, resets = learner.trainer, []
    changed = trainer.hedge.changed
    trainer.hedge.changed = lambda: (resets.append(len(heads)), changed())[1]
    heads, served = [], []
    for lo in range(0, stream.n, message_size):
        x, y = stream.x[lo : lo + message_size], stream.y[lo : lo + message_size]
        heads.append(np.asarray(trainer.model(x, training=True))[:, 1:])  # (rows, heads, out)
        served.append(trainer.predict(x))
        learner.learn_many(x, y)
    return {
        "heads": heads,
        "served": np.concatenate(served),
        "resets": {n - 1 for n in resets},  # after which message
        "prior": trainer.hedge.prior,
        "relative": trainer.hedge.relative,
    }


def losses(task: str, heads: np.ndarray, y: np.ndarray, loss: str) -> np.ndarray:
    """Each head's mean loss over a message: (heads,)."""
    if task == "regression":
        return np.mean((heads[:, :, 0] - y[:, None]) ** 2, axis=0)
    if task == "binary":
        p1 = np.clip(heads[:, :, 0], 1e-7, 1 - 1e-7)
        p = np.stack([1 - p1, p1], axis=-1)
    else:
        p = np.clip(heads, 1e-7, 1.0)
    label = y.astype(int)
    log = -np.log(p[np.arange(len(y)), :, label]).mean(axis=0)
    wrong = (p.argmax(-1) != label[:, None]).mean(axis=0)
    if loss == "log":
        return log
    if loss == "zero_one":
        return wrong
    if loss == "brier":
        onehot = np.eye(p.shape[-1])[label][:, None, :]
        return ((p - onehot) ** 2).sum(-1).mean(axis=0)
    share = float(loss.removeprefix("mix:"))
    return share * log + (1 - share) * wrong


def replay(stream: streams.Stream, rec: dict, rule: dict) -> float:
    """The score of the model served by `rule` over the recorded heads."""
    if rule.get("rule") == "adahedge":
        weights = _adahedge(stream, rec)
    else:
        weights = _hedge(stream, rec, {**DEFAULT, **rule})
    served = np.concatenate(
        [np.einsum("rho,h->ro", h, w) for h, w in zip(rec["heads"], weights, strict=True)]
    )
    return float(learners.scores(stream, learners.decide(stream.task, served)).mean())


def _messages(stream: streams.Stream, rec: dict, loss: str):  # type: ignore[no-untyped-def]
    """Per recorded message: (index, each head's mean loss `loss` over it)."""
    lo = 0
    for i, heads in enumerate(rec["heads"]):
        yield i, losses(stream.task, heads, stream.y[lo : lo + len(heads)], loss)
        lo += len(heads)


def _hedge(stream: streams.Stream, rec: dict, rule: dict) -> list[np.ndarray]:
    """The served weights per message: the learner's `Hedge`, with `rule`'s settings."""
    layer = HedgeMix()
    layer.build((None, len(rec["prior"]), 1))
    prior = np.asarray(rec["prior"])
    favoured = tuple(np.flatnonzero(prior > prior.min())) if np.ptp(prior) > 0 else ()
    hedge = Hedge(
        layer, rule["beta"], rule["smoothing"], relative=rec["relative"], favoured=favoured
    )
    if favoured and rule["favoured"] != FAVOURED:
        hedge.prior[:] = 1.0
        hedge.prior[list(favoured)] = rule["favoured"]
        hedge.prior /= hedge.prior.sum()
        hedge.reset()
    out = []
    for i, loss in _messages(stream, rec, rule["loss"]):
        out.append(hedge.served())
        hedge.update(len(rec["heads"][i]), loss)
        if i in rec["resets"]:
            hedge.changed()
    return out


def _adahedge(stream: streams.Stream, rec: dict) -> list[np.ndarray]:
    """AdaHedge's weights per message: exp(-eta * cumulative loss) from the prior, eta =
    ln(heads) / the cumulative mixability gap (following the leader while it is 0)."""
    log_prior = np.log(np.asarray(rec["prior"], np.float64))
    count = len(log_prior)
    total, gap, out = np.zeros(count), 0.0, []
    for i, loss in _messages(stream, rec, "log"):
        eta = np.log(count) / gap if gap > 0 else np.inf
        if np.isinf(eta):
            z = np.where(total == total.min(), log_prior, -np.inf)
        else:
            z = log_prior - eta * total
        w = np.exp(z - z.max())
        w /= w.sum()
        out.append(w)
        if rec["relative"]:  # as `hedge.Hedge` takes a regression's losses
            loss = loss / max(float(loss.mean()), 1e-12)
        loss = loss * len(rec["heads"][i])
        if np.isinf(eta):
            mixed = float(loss[w > 0].min())
        else:
            a = np.log(np.maximum(w, 1e-300)) - eta * loss
            mixed = -(a.max() + np.log(np.exp(a - a.max()).sum())) / eta
        gap += max(float(w @ loss) - mixed, 0.0)
        total += loss
        if i in rec["resets"]:
            total[:], gap, log_prior = 0.0, 0.0, np.full(count, -np.log(count))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.hedge_rules", description=__doc__.split("\n")[0])
    parser.add_argument("--streams", help="comma-separated names (default: all)")
    parser.add_argument("--seeds", default="0,1", help="comma-separated model seeds")
    parser.add_argument("--samples", type=int, default=2500, help="per synthetic stream")
    parser.add_argument("--message-size", type=int, default=40)
    parser.add_argument("--rule", action="append", default=[], help="JSON, as above")
    args = parser.parse_args(argv)
    rules = [json.loads(r) for r in args.rule]  # each reported under its text
    specs = streams.specs()
    if args.streams:
        specs = [s for s in specs if s.name in args.streams.split(",")]
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    rows, faithful = [], True
    for spec in specs:
        stream = streams.load(spec, args.samples)
        per_seed = []
        for seed in (int(s) for s in args.seeds.split(",")):
            rec = record(stream, seed, args.message_size)
            ran = float(learners.scores(stream, learners.decide(stream.task, rec["served"])).mean())
            per_seed.append(
                [ran, replay(stream, rec, {}), *(replay(stream, rec, r) for r in rules)]
            )
        served, default, *others = np.mean(per_seed, axis=0)
        # within a sample in 1,000 (the learner writes the weights once moved by 5%)
        faithful &= all(abs(s[0] - s[1]) <= 1e-3 * max(1.0, abs(s[0])) for s in per_seed)
        row = {"stream": stream.name, "metric": "acc" if stream.classification else "mae"}
        row |= {"served": f"{served:.4f}", "default": f"{default:.4f}"}
        for rule, score in zip(args.rule, others, strict=True):
            row[rule] = f"{score - default:+.4f}"
        rows.append(row)
        print("  " + "  ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    checks = {"the default rule replayed serves what the learner served": faithful}
    report("hedge_rules", rows, checks, seeds=args.seeds, message_size=args.message_size)
    return exit_status(checks)


if __name__ == "__main__":
    raise SystemExit(main())
