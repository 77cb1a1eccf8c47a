"""SIGKILL a writing process at random moments; every record acknowledged by a completed
flush must survive, nothing corrupt may be read, the indexes must pass their checks."""
import pytest

from crash_harness import run_kills


@pytest.mark.allow_slow("a crash loop: 50 kills, each after a random wait of up to 0.4 s")
def test_fifty_kills_lose_nothing_acknowledged(tmp_path):
    tally = run_kills(50, str(tmp_path), seed=20261122)
    assert tally["failures"] == 0, tally["details"]
    assert tally["acknowledged"] > 0
