"""Options: Spark's Kafka source names (case-insensitive) and kafkalog's own."""
from __future__ import annotations

import json
from typing import Any, Mapping, Sequence, overload

_OPTION_NAMES = {
    "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
    "startingtimestamp", "endingtimestamp", "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp", "includeheaders", "minpartitions", "failondataloss",
    "kafka.isolation.level", "validatecrc", "maxrecordsperpartition", "maxbytespertask",
    "path", "paths",
}


class Options:
    """Spark's Kafka option names (case-insensitive) and kafkalog's own."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self._raw = {str(k).lower(): v for k, v in options.items() if v is not None}
        unknown = sorted(k for k in self._raw if k not in _OPTION_NAMES
                         and not k.startswith("kafka."))
        if unknown:
            raise ValueError(f"unknown option(s) {', '.join(unknown)}")

    def get(self, name: str, default: Any = None) -> Any:
        return self._raw.get(name.lower(), default)

    def flag(self, name: str, default: bool) -> bool:
        v = self.get(name)
        if v is None:
            return default
        if isinstance(v, bool):
            return v
        if str(v).lower() in ("true", "false"):
            return str(v).lower() == "true"
        raise ValueError(f"option {name} must be true or false, not {v!r}")

    @overload
    def integer(self, name: str) -> int | None: ...
    @overload
    def integer(self, name: str, default: int) -> int: ...
    @overload
    def integer(self, name: str, default: None) -> int | None: ...

    def integer(self, name: str, default: int | None = None) -> int | None:
        v = self.get(name)
        if v is None:
            return default
        try:
            return int(v)
        except (TypeError, ValueError):
            raise ValueError(f"option {name} must be an integer, not {v!r}") from None

    def json(self, name: str) -> Any:
        v = self.get(name)
        if v is None or isinstance(v, dict):
            return v
        try:
            return json.loads(v)
        except ValueError:
            raise ValueError(f"option {name} is not valid JSON: {v!r}") from None

    def offsets_spec(self, name: str, default: str,
                     allowed: Sequence[str]) -> str | dict[str, Any]:
        """A ``startingOffsets``/``endingOffsets`` value: one of ``allowed`` words, or the
        JSON {"topic": {"partition": offset}} spec as a dict."""
        raw = self.get(name, default)
        if isinstance(raw, dict) or str(raw).strip().startswith("{"):
            return self.json(name)
        word = str(raw).lower()
        if word not in allowed:
            raise ValueError(f"{name} must be {' or '.join(allowed)} or JSON, not {raw!r}")
        return word

    @property
    def include_headers(self) -> bool:
        return self.flag("includeHeaders", False)

    @property
    def read_committed(self) -> bool:
        level = str(self.get("kafka.isolation.level", "read_uncommitted")).lower()
        if level not in ("read_committed", "read_uncommitted"):
            raise ValueError(f"kafka.isolation.level must be read_committed or "
                             f"read_uncommitted, not {level!r}")
        return level == "read_committed"


def paths_option(opts: dict[str, Any]) -> list[Any]:
    """The paths of a data source's ``path``/``paths`` option (removed from ``opts``)."""
    paths = opts.pop("path", None) or opts.pop("paths", None)
    opts.pop("paths", None)
    if not paths:
        raise ValueError("give a path: spark.read.format('kafkalog').load(path)")
    if isinstance(paths, str):
        if paths.startswith("["):
            return json.loads(paths)
        return [p for p in paths.split(",") if p]
    return list(paths)
