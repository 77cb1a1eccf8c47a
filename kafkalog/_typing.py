"""Type aliases shared by the annotations of the public API (used under ``TYPE_CHECKING`` or
in annotations only, which ``from __future__ import annotations`` leaves unevaluated)."""
from __future__ import annotations

import os
from typing import Union

#: A file or directory path: ``str`` or any ``os.PathLike[str]`` (e.g. ``pathlib.Path``).
StrPath = Union[str, "os.PathLike[str]"]
