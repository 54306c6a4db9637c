"""The service's text-encoding thread: requests waiting together share one batch, each gets its rows."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from registry.service.state import TextEncoder


class _Slow:
    """A stand-in query encoder: a text's vector is its length and its first character; slow enough
    that requests pile up behind the first batch."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.release = threading.Event()

    def encode(self, texts, progress=False):
        self.calls.append(list(texts))
        self.release.wait(5)
        if any(t == "boom" for t in texts):
            raise ValueError("cannot encode 'boom'")
        return np.array([[len(t), ord(t[0])] for t in texts], dtype=np.float32)


def test_waiting_requests_share_a_batch_and_get_their_own_rows():
    fake = _Slow()
    encoder = TextEncoder(lambda name: fake, max_texts=64)
    results: dict[int, np.ndarray] = {}
    requests = [["first"], ["ab", "abc"], ["abc", "zz"], ["ab"]]

    def ask(i):
        results[i] = encoder.encode("mini", requests[i])

    first = threading.Thread(target=ask, args=(0,))
    first.start()
    while not fake.calls:
        time.sleep(0.01)
    others = [threading.Thread(target=ask, args=(i,)) for i in range(1, 4)]
    for t in others:
        t.start()
    while encoder._waiting.qsize() < 3:
        time.sleep(0.01)
    fake.release.set()
    for t in [first, *others]:
        t.join(10)
    assert fake.calls == [["first"], ["ab", "abc", "zz"]]  # the three waiting requests: one batch, no repeats
    assert encoder.batches == 2
    for i, texts in enumerate(requests):
        np.testing.assert_array_equal(results[i], [[len(t), ord(t[0])] for t in texts])


def test_an_error_reaches_every_request_of_its_batch_and_the_thread_lives_on():
    fake = _Slow()
    fake.release.set()
    encoder = TextEncoder(lambda name: fake)
    with pytest.raises(ValueError, match="boom"):
        encoder.encode("mini", ["fine", "boom"])
    np.testing.assert_array_equal(encoder.encode("mini", ["ok"]), [[2, ord("o")]])
