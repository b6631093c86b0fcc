"""A chunk's digest computed from pieces that land out of order, from several threads."""

from __future__ import annotations

import hashlib
import os
import random
import threading

from snapshotter.ordered_digest import OrderedDigest


def test_out_of_order_pieces_from_threads_give_the_sha256() -> None:
    data = os.urandom(3_000_017)
    step = 65_536
    pieces = [(off, min(step, len(data) - off)) for off in range(0, len(data), step)]
    random.Random(0).shuffle(pieces)
    digest = OrderedDigest(memoryview(data))
    threads = [
        threading.Thread(target=lambda part=part: [digest.landed(o, n) for o, n in part])
        for part in (pieces[0::3], pieces[1::3], pieces[2::3])
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()


def test_a_missing_piece_means_no_digest() -> None:
    digest = OrderedDigest(memoryview(b"x" * 100))
    digest.landed(50, 50)
    assert digest.hexdigest() is None
    digest.landed(0, 50)
    assert digest.hexdigest() == hashlib.sha256(b"x" * 100).hexdigest()
