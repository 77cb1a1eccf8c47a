"""``kafkalog recover``: Kafka's recovery of a partition, offline, and what it did or would do.

Recovery is the engine's own (``Log.open`` after an unclean shutdown, from offset 0); its
``RecoveryReport`` says what it did to the files. A dry run carries out the same recovery on a
scratch copy, so its report is exactly what the real run would do.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Any

from kafkalog import checkpoint
from kafkalog.config import LogConfig
from kafkalog.errors import KafkaLogError
from kafkalog.files import topic_partition_or_none
from kafkalog.log import Log
from kafkalog.log07 import Log07
from kafkalog.log_dirs import is_log07_dir

if TYPE_CHECKING:
    from typing import Mapping

    from kafkalog._typing import StrPath


def recover_partition(path: StrPath, dry_run: bool = False, keep: StrPath | None = None,
                      config: LogConfig | Mapping[str, Any] | StrPath | None = None
                      ) -> dict[str, Any]:
    """Recover a partition directory as Kafka does after an unclean shutdown (every segment
    from offset 0). Returns ``{"dir", "dry_run", "log_start_offset", "log_end_offset",
    "actions", "dropped"}`` (``actions``: the ``RecoveryReport`` entries; ``dropped``: its
    summary of what left the log: ``{"records", "first_offset", "last_offset", "segments",
    "bytes"}``, the records and offsets of the intact batches among the bytes cut or removed,
    which ``salvage_partition`` would keep).

    ``keep``: a directory where what recovery would delete (bytes cut from a segment, segments
    after a truncated one) is moved instead. ``dry_run``: recover a scratch copy (in the
    system's temporary directory) and leave the partition untouched. ``config``: the topic's
    settings, as ``Log.open`` takes them (a ``LogConfig``, a mapping or the path of a
    ``.properties`` file): the indexes it rebuilds follow its ``index.interval.bytes``, and an
    intact segment's indexes written with it are left as they are.

    A Kafka 0.7 partition directory (``.kafka`` files) is recovered as 0.7 did (``Log07``: its
    newest file cut at the first invalid entry).
    """
    path = os.path.abspath(os.fspath(path))
    config = LogConfig.of(config)
    saved = checkpoint.LogDirCheckpoints(os.path.dirname(path)).for_partition(
        topic_partition_or_none(os.path.basename(path)))
    if not dry_run:
        return _recover(path, config, saved.log_start_offset or 0, keep, path)
    with tempfile.TemporaryDirectory(prefix="kafkalog-recover-") as scratch:
        copy = os.path.join(scratch, os.path.basename(path))
        try:
            shutil.copytree(path, copy)
        except (OSError, shutil.Error) as e:
            raise KafkaLogError(f"dry run of {path}: cannot copy it to the scratch directory "
                                f"{scratch}: {e}") from e
        salvage = os.path.join(scratch, "kept") if keep is not None else None
        result = _recover(copy, config, saved.log_start_offset or 0, salvage, path)
    if keep is not None:
        for action in result["actions"]:
            if action["reason"]:
                action["reason"] = action["reason"].replace(salvage, os.path.abspath(keep))
    return result


def _recover(path, config, log_start_offset, salvage_dir, shown_as):
    if is_log07_dir(path):
        log = Log07.open(path, config=config, salvage_dir=salvage_dir)
    else:
        log = Log.open(path, config, recovery_point=0, clean_shutdown=False, managed=True,
                       log_start_offset=log_start_offset, salvage_dir=salvage_dir)
    try:
        return {"dir": shown_as, "dry_run": path != shown_as,
                "log_start_offset": log.log_start_offset,
                "log_end_offset": log.log_end_offset,
                "actions": list(log.recovery_report),
                "dropped": dict(log.recovery_report.dropped)}
    finally:
        log.close()
