"""``DescriptorCache``: the least recently used unpinned segments give their handles back past
the limit; pinned ones and ones no longer evictable are left alone."""
import pytest

from kafkalog.descriptor_cache import DescriptorCache


class FakeSegment:
    def __init__(self, name):
        self.name, self.pins, self.evictable, self.dropped = name, 0, True, 0

    def drop_handles(self):
        self.dropped += 1


def test_least_recently_used_are_evicted_past_the_limit():
    cache = DescriptorCache(2)
    a, b, c = FakeSegment("a"), FakeSegment("b"), FakeSegment("c")
    cache.touch(a)
    cache.touch(b)
    cache.touch(a)                  # b is now the least recently used
    cache.touch(c)
    assert (a.dropped, b.dropped, c.dropped) == (0, 1, 0) and len(cache) == 2


def test_pinned_segments_stay_and_unevictable_ones_never_enter():
    cache = DescriptorCache(1)
    a, b, closed = FakeSegment("a"), FakeSegment("b"), FakeSegment("closed")
    closed.evictable = False
    cache.touch(closed)
    assert len(cache) == 0
    cache.touch(a)
    with cache.pinned(a):
        assert a.pins == 1
        cache.touch(b)              # a is pinned, b is in use: the list grows past the limit
        assert (a.dropped, b.dropped, len(cache)) == (0, 0, 2)
        c = FakeSegment("c")
        cache.touch(c)              # b goes, not the c just touched
        assert (a.dropped, b.dropped, c.dropped, len(cache)) == (0, 1, 0, 2)
    assert a.pins == 0
    cache.touch(b)
    assert (a.dropped, c.dropped, len(cache)) == (1, 1, 1)
    cache.forget(b)
    assert len(cache) == 0


def test_limit_is_validated():
    with pytest.raises(ValueError):
        DescriptorCache(1).set_limit(0)


def test_many_pinned_segments_are_passed_over_and_counted():
    """A log dir of many partitions lists many pinned active segments: a touch of a new one
    evicts only unpinned ones, the list growing past the limit while all others are pinned."""
    cache = DescriptorCache(2)
    pinned = [FakeSegment(f"active{i}") for i in range(50)]
    for s in pinned:
        cache.pin(s)
        cache.touch(s)
    assert len(cache) == 50 and not any(s.dropped for s in pinned)
    a, b = FakeSegment("a"), FakeSegment("b")
    cache.touch(a)                   # nothing evictable but a, which is in use
    assert (a.dropped, len(cache)) == (0, 51)
    cache.touch(b)                   # a goes
    assert (a.dropped, b.dropped, len(cache)) == (1, 0, 51)
    cache.unpin(pinned[7])
    cache.forget(b)
    cache.touch(a)                   # the unpinned active7 goes, not a
    assert (pinned[7].dropped, a.dropped, len(cache)) == (1, 1, 50)
    assert not any(s.dropped for i, s in enumerate(pinned) if i != 7)
    cache.pin(a)
    cache.set_limit(1)               # all left are pinned
    assert len(cache) == 50 and a.dropped == 1
