"""Shares of the stream id space: together they hold every stream once."""

from __future__ import annotations

from uuid import UUID, uuid4

import pytest

from relay_es.projections.shares import StreamShare

TOP = 1 << 128


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7])
def test_the_shares_are_contiguous_and_cover_the_whole_space(count: int) -> None:
    shares = [StreamShare.of(i, count) for i in range(count)]
    assert shares[0].lo == 0 and shares[-1].hi == TOP
    assert all(a.hi == b.lo and a.lo < a.hi for a, b in zip(shares, shares[1:]))
    for u in [UUID(int=0), UUID(int=TOP - 1), *(uuid4() for _ in range(200))]:
        assert sum(u in s for s in shares) == 1


def test_the_bounds_are_the_first_id_in_and_the_first_after_or_none_at_the_ends() -> None:
    assert StreamShare.of(0, 1).bounds == (None, None)
    assert StreamShare.of(0, 2).bounds == (None, UUID(int=1 << 127))
    assert StreamShare.of(1, 2).bounds == (UUID(int=1 << 127), None)
    assert UUID(int=(1 << 127) - 1) in StreamShare.of(0, 2)
    assert UUID(int=1 << 127) in StreamShare.of(1, 2)
    assert StreamShare.of(1, 3).bounds == (UUID(int=TOP // 3), UUID(int=2 * TOP // 3))


@pytest.mark.parametrize("index,count", [(2, 2), (-1, 2), (0, 0)])
def test_a_share_outside_its_count_is_refused(index: int, count: int) -> None:
    with pytest.raises(ValueError):
        StreamShare.of(index, count)
