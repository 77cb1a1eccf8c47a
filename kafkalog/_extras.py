"""Optional packages (the ``spark`` and ``arrow`` extras): imported when a function needs
them, with a typed error naming what is missing."""
from __future__ import annotations

import importlib
from typing import Iterable

from kafkalog.errors import MissingExtraError


def require_extra(error: type[MissingExtraError], function: str,
                  modules: Iterable[str]) -> None:
    """Import ``modules`` or raise ``error`` naming the ones missing."""
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise error(missing, function)
