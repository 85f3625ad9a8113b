"""Which served predictions are kept for their labels (`actor/kept.py`): an MQTT request of
one sample, an HTTP request of one row in its caller's namespace; never a batch's one id."""

from __future__ import annotations

import numpy as np
import pytest

from streamlearn.actor.inbox import Pending
from streamlearn.actor.kept import Keeper
from streamlearn.contract.names import http_owner, owned


class Store:
    """What a PendingStore is asked to keep, in memory."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def keep(self, ids: list[str], values: list[bytes], now: float) -> tuple[int, int]:
        self.ids += ids
        return 0, 0


def request(rows: int, batched: bool, http: bool, client: str | None = None) -> Pending:
    answer = (lambda reply: None) if http else None
    x = np.zeros((rows, 2), np.float32)
    return Pending(0.0, x, batched, "r", None, None, answer=answer, client=client)


@pytest.mark.parametrize(
    ("pending", "kept"),
    [
        (request(1, False, False), [owned(None, "r")]),  # bare predict, one sample
        (request(1, False, False, "dev"), [owned("dev", "r")]),
        (request(1, True, False, "dev"), []),  # an MQTT batch of one: still a batch
        (request(1, True, True, http_owner(None, "::1")), [owned("http/a:::1", "r")]),
        (request(3, True, True, http_owner(None, "::1")), []),  # one id, three rows
        (request(1, True, True), []),  # a door's request without a namespace of its own
    ],
)
def test_only_a_request_whose_id_names_one_prediction_keeps_it(pending, kept):
    store = Store()
    keeper = Keeper(store)  # type: ignore[arg-type]
    keeper.keep([pending], np.zeros((len(pending.x), 1), np.float32), 1)
    assert store.ids == kept and keeper.kept == len(kept)
