"""Words for people: a count with its noun, one form for one and another for the rest."""
from __future__ import annotations

_PLURALS = {"batch": "batches", "entry": "entries", "directory": "directories"}


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun`` as a person writes them: ``"1 segment"``, ``"2 segments"``,
    ``"0 batches"``; the last word of ``noun`` is the one that takes the plural
    (``"intact batch"``, ``"partition directory"``)."""
    if n == 1:
        return f"{n} {noun}"
    head, _, last = noun.rpartition(" ")
    last = _PLURALS.get(last, last + "s")
    return f"{n} {head} {last}" if head else f"{n} {last}"
