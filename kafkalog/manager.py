"""``LogManager``: every partition of one or more log dirs, as a broker's LogManager keeps them."""
from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import json
import logging
import os
import shutil
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Union

from kafkalog import checkpoint, storage
from kafkalog.cleaner import needs_cleaning
from kafkalog.config import LogConfig
from kafkalog.errors import (
    InvalidTopicError, KafkaLogError, LogClosedError, LogDirFailureError,
    TooManyOpenFilesError, io_failure,
)
from kafkalog.files import (
    CLEAN_SHUTDOWN_FILE, DELETED_SUFFIX, LOCK_FILE, META_PROPERTIES, parse_partition_dir_name,
    partition_dir_name, validate_partition, validate_topic,
)
from kafkalog.locks import FileLock
from kafkalog.log import Log
from kafkalog.log_dirs import check_log_dir, check_log_dir_links
from kafkalog.scheduler import Scheduler

if TYPE_CHECKING:
    from kafkalog._typing import StrPath
    from kafkalog.cleaner import CleanerStats

    ConfigLike = Union[LogConfig, Mapping[str, Any], None]

log = logging.getLogger(__name__)

# a log dir that failed, and a process out of descriptors (both take the log offline): the
# other logs and dirs go on, the first failure is raised at the end
_IO_FAILURES = (LogDirFailureError, TooManyOpenFilesError)

MOVE_MARKER = ".kafkalog-move"


class LogManager:
    """Loads, creates, retains, flushes and checkpoints the logs of one or more log dirs.

    Parameters
    ----------
    log_dirs : str or list of str
    config : LogConfig or dict, the default for every log
    topic_configs : {topic: dict} of per-topic overrides
    background : start the periodic retention, flush and checkpoint tasks
    recovery_threads : logs loaded in parallel
    read_only : load every log read-only (no recovery) and write nothing: no lock file, no
        ``meta.properties``, no checkpoint, no marker removed or written, no interrupted
        move or deletion finished, no background task; for backups and a dead broker's disk
    storage_options : fsspec options for log dirs given as URLs (``s3://bucket/broker-1``,
        ``gs://``, ...; see ``Log.open``). A URL log dir is read through ``kafkalog.storage``
        and needs ``read_only=True``: a writable manager of one raises ReadOnlyStorageError.
    """

    def __init__(self, log_dirs: StrPath | Iterable[StrPath], config: ConfigLike = None, *,
                 topic_configs: Mapping[str, Mapping[str, Any]] | None = None,
                 background: bool = True, retention_check_interval_ms: int = 300_000,
                 flush_check_interval_ms: int = 1_000, cleaner_backoff_ms: int = 15_000,
                 checkpoint_interval_ms: int = 60_000, recovery_threads: int = 2,
                 broker_epoch: int = 0, replicated: bool = False,
                 producer_id_expiration_ms: int = 86_400_000,
                 time_fn: Callable[[], float] = time.time, read_only: bool = False,
                 storage_options: Mapping[str, Any] | None = None) -> None:
        if isinstance(log_dirs, (str, os.PathLike)):
            log_dirs = [log_dirs]
        dirs = [storage.locate(os.fspath(d), storage_options).root for d in log_dirs]
        if not read_only:
            for d in dirs:
                storage.check_writable(d)
        self.log_dirs = [storage.abspath(d) for d in dirs]
        self.config = config if isinstance(config, LogConfig) else LogConfig(config)
        self.topic_configs = dict(topic_configs or {})
        self.broker_epoch = broker_epoch
        self.replicated = replicated
        self.read_only = read_only
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._time_fn = time_fn
        self._logs: dict[tuple[str, int], Log] = {}
        self._log_dir_of: dict[tuple[str, int], str] = {}
        self._lock = threading.RLock()
        self._lock_files: list[FileLock] = []
        self._closed = False
        self.scheduler = Scheduler("kafkalog-log-manager")
        try:
            with _dir_io(self.log_dirs, "loading"):
                for d in self.log_dirs:
                    if read_only:
                        storage.refresh(d)
                    check_log_dir(d, read_only=read_only)
                    if not storage.is_remote(d):
                        check_log_dir_links(d, read_only=read_only)
                    if read_only:
                        continue
                    os.makedirs(d, exist_ok=True)
                    self._lock_dir(d)
                    self._ensure_meta_properties(d)
                self._load_logs(recovery_threads)
        except BaseException:
            _close_all(self._logs.values())
            self._release_locks()
            self.scheduler.shutdown(run_pending=False)
            raise
        if background and not read_only:
            self.scheduler.schedule_periodic(retention_check_interval_ms / 1000.0,
                                             self.cleanup_logs)
            self.scheduler.schedule_periodic(flush_check_interval_ms / 1000.0,
                                             self.flush_dirty_logs)
            self.scheduler.schedule_periodic(checkpoint_interval_ms / 1000.0, self.checkpoint)
            self.scheduler.schedule_periodic(cleaner_backoff_ms / 1000.0, self.compact_logs)

    # ------------------------------------------------------------------------------ dirs
    def _lock_dir(self, d):
        self._lock_files.append(FileLock(
            os.path.join(d, LOCK_FILE), create=True,
            holder=f"another process, LogManager or partition writer of log dir {d}"))

    def _release_locks(self):
        for lock in self._lock_files:
            lock.release()
        self._lock_files = []

    def _ensure_meta_properties(self, d):
        path = os.path.join(d, META_PROPERTIES)
        if os.path.exists(path):
            return
        def uuid_text():
            return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        text = (f"#\n#{time.strftime('%a %b %d %H:%M:%S UTC %Y', time.gmtime())}\n"
                f"node.id=0\ndirectory.id={uuid_text()}\nversion=1\ncluster.id={uuid_text()}\n")
        checkpoint.write_atomically(path, text)

    def _config_for(self, topic, config=None):
        overrides = dict(self.topic_configs.get(topic, {}))
        if isinstance(config, LogConfig):
            return config
        overrides.update(config or {})
        return self.config.with_overrides(overrides) if overrides else self.config

    def _finish_or_drop_moves(self):
        """Finish or drop a ``move_log`` that a crash interrupted. Its ``-future`` directory
        holds a ``.kafkalog-move`` marker naming the live directory (a long topic is cut in
        the ``-future`` name): with the live directory still there the copy may be
        incomplete, so it is dropped; with the live one renamed ``-delete`` with the same
        unique id the copy was complete, so it is renamed into place. A ``-future`` directory
        without the marker is another tool's (a broker's replica move) and is left alone,
        never loaded."""
        dirs = {d: {n: _parsed(n) for n in os.listdir(d) if os.path.isdir(os.path.join(d, n))}
                for d in self.log_dirs}
        live = {n for d in dirs for n, p in dirs[d].items() if p is not None and not p.state}
        deleting = {p.unique_id for d in dirs for p in dirs[d].values()
                    if p is not None and p.state == "delete"}
        for d, names in dirs.items():
            for name, parsed in names.items():
                path = os.path.join(d, name)
                marked = os.path.exists(os.path.join(path, MOVE_MARKER))
                if name in live and marked:
                    os.remove(os.path.join(path, MOVE_MARKER))     # moved; marker left
                if parsed is None or parsed.state != "future" or not marked:
                    continue
                partition_name = _moved_name(path, parsed)
                if partition_name in live or parsed.unique_id not in deleting:
                    log.warning("dropping the unfinished move %s", path)
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    final = os.path.join(d, partition_name)
                    log.warning("finishing the interrupted move of %s", final)
                    os.replace(path, final)
                    os.remove(os.path.join(final, MOVE_MARKER))
                    checkpoint.fsync_dir(d)

    def _load_logs(self, threads):
        if not self.read_only:
            self._finish_or_drop_moves()
        self._checkpoints = {}
        jobs = []
        for d in self.log_dirs:
            saved = checkpoint.LogDirCheckpoints(d)
            self._checkpoints[d] = saved
            entries, before = storage.list_dir(d), len(jobs)
            for entry in entries:
                if not entry.is_dir:
                    continue
                name = entry.name
                path = os.path.join(d, name)
                parsed = _parsed(name)
                if parsed is None:
                    continue                                      # not a partition directory
                if parsed.state == "delete":
                    if not self.read_only:
                        shutil.rmtree(path, ignore_errors=True)  # a deletion left unfinished
                    continue
                if parsed.state:
                    continue                          # -future, -stray: never loaded as live
                key = (parsed.topic, parsed.partition)
                jobs.append((d, path, key, saved.for_partition(key)))
            if len(jobs) == before:     # normal for a new broker's log dir, as in Kafka: INFO
                log.info("%s: no partition directory to load (%d entr%s: %s)", d, len(entries),
                         "y" if len(entries) == 1 else "ies",
                         ", ".join(sorted(e.name for e in entries)[:6]) or "empty")
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            futures = {pool.submit(self._open_log, *job): job for job in jobs}
        # Every load has finished: a failure closes the logs the others opened (and their
        # partition locks) before it is raised.
        opened = [f.result() for f in futures if f.exception() is None]
        failure = next((f.exception() for f in futures if f.exception() is not None), None)
        if failure is not None:
            _close_all(opened)
            raise failure
        for future, (d, _, key, _) in futures.items():
            if key in self._logs:
                _close_all(opened)
                raise KafkaLogError(f"duplicate log directories for {key[0]}-{key[1]}: "
                                    f"{self._log_dir_of[key]} and {d}")
            self._logs[key] = future.result()
            self._log_dir_of[key] = d
        for d in self.log_dirs:
            marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
            if not self.read_only and os.path.exists(marker):
                os.remove(marker)       # from now on a crash must be seen as unclean

    def _open_log(self, d, path, key, saved):
        return Log.open(path, self._config_for(key[0]),
                        recovery_point=saved.recovery_point or 0,
                        log_start_offset=saved.log_start_offset or 0,
                        clean_shutdown=saved.clean_shutdown,
                        first_dirty_offset=saved.cleaner_offset or 0,
                        # The broker's high watermark is kept: loading never raises it to
                        # the log end (a standalone log moves it with its next append).
                        high_watermark=(saved.high_watermark or 0) if self.replicated
                        else saved.high_watermark,
                        replicated=self.replicated, scheduler=self.scheduler,
                        time_fn=self._time_fn, read_only=self.read_only, managed=True)

    # ------------------------------------------------------------------------------ logs
    def get_log(self, topic: str, partition: int) -> Log | None:
        """The Log of a partition, or None."""
        return self._logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int, config: ConfigLike = None) -> Log:
        """The partition's Log, created in the log dir holding the fewest partitions."""
        validate_topic(topic)
        validate_partition(partition)
        with self._lock:
            self._check_open()
            if self.read_only and (topic, partition) not in self._logs:
                raise KafkaLogError(f"no log for {topic}-{partition}, and this LogManager "
                                    f"is read-only")
            key = (topic, partition)
            if key in self._logs:
                return self._logs[key]
            counts = {d: 0 for d in self.log_dirs}
            for d in self._log_dir_of.values():
                counts[d] += 1
            d = min(self.log_dirs, key=lambda x: (counts[x], self.log_dirs.index(x)))
            path = os.path.join(d, partition_dir_name(topic, partition))
            if os.path.realpath(os.path.dirname(path)) != os.path.realpath(d):
                raise InvalidTopicError(f"{topic}-{partition} would escape log dir {d}")
            log = Log.open(path, self._config_for(topic, config), recovery_point=0,
                           log_start_offset=0, clean_shutdown=True, first_dirty_offset=0,
                           high_watermark=0,        # (a new log: no checkpoint to read)
                           replicated=self.replicated, scheduler=self.scheduler,
                           time_fn=self._time_fn, managed=True)
            self._logs[key] = log
            self._log_dir_of[key] = d
            return log

    def delete_log(self, topic: str, partition: int) -> bool:
        """Close the log, rename its directory ``<topic>-<p>.<uuid>-delete`` and remove it
        after ``file.delete.delay.ms``."""
        with self._lock:
            self._check_writable()
            key = (topic, partition)
            log = self._logs.pop(key, None)
            if log is None:
                return False
            d = self._log_dir_of.pop(key)
            log.close()
            target = os.path.join(d, partition_dir_name(topic, partition, "delete",
                                                        uuid.uuid4().hex))
            with _dir_io(d, f"deleting {log.path}"):
                os.replace(log.path, target)
                checkpoint.fsync_dir(d)
            delay = log.config["file.delete.delay.ms"] / 1000.0
            self.scheduler.schedule_once(delay, lambda: shutil.rmtree(target, ignore_errors=True))
            self.checkpoint()
            return True

    def move_log(self, topic: str, partition: int, target_dir: StrPath) -> Log:
        """Move a partition to another of the manager's log dirs, as Kafka's alter-log-dirs
        does: copy into ``<topic>-<p>.<uuid>-future`` there, then rename the live directory
        ``-delete`` and the future one into place. A crash at any step leaves either the
        old or the new copy whole (finished or dropped at the next load). Returns the Log."""
        target_dir = os.path.abspath(os.fspath(target_dir))
        if target_dir not in self.log_dirs:
            raise KafkaLogError(f"{target_dir} is not one of this manager's log dirs")
        with self._lock:
            self._check_writable()
            key = (topic, partition)
            log = self._logs.get(key)
            if log is None:
                raise KafkaLogError(f"no log for {topic}-{partition}")
            source_dir = self._log_dir_of[key]
            if source_dir == target_dir:
                return log
            name = partition_dir_name(topic, partition)
            token = uuid.uuid4().hex
            future = os.path.join(target_dir,
                                  partition_dir_name(topic, partition, "future", token))
            with log.exclusive(), _dir_io([source_dir, target_dir], f"moving {log.path}"):
                log.flush()
                os.makedirs(future)
                checkpoint.write_atomically(os.path.join(future, MOVE_MARKER), name)
                for entry in sorted(os.scandir(log.path), key=lambda e: e.name):
                    if entry.is_file() and not entry.name.endswith(DELETED_SUFFIX) and \
                            entry.name != MOVE_MARKER:
                        copied = os.path.join(future, entry.name)
                        shutil.copy2(entry.path, copied)
                        with open(copied, "rb") as f:
                            os.fsync(f.fileno())
                checkpoint.fsync_dir(future)
                checkpoint.fsync_dir(target_dir)
                config = log.config
                log.close()
                doomed = os.path.join(source_dir,
                                      partition_dir_name(topic, partition, "delete", token))
                os.replace(log.path, doomed)
                checkpoint.fsync_dir(source_dir)
                final = os.path.join(target_dir, name)
                os.replace(future, final)
                checkpoint.fsync_dir(target_dir)
                os.remove(os.path.join(final, MOVE_MARKER))
            moved = Log.open(final, config, recovery_point=log.recovery_point,
                             log_start_offset=log.log_start_offset, clean_shutdown=True,
                             first_dirty_offset=log.first_dirty_offset, managed=True,
                             high_watermark=log.high_watermark,
                             replicated=self.replicated, scheduler=self.scheduler,
                             time_fn=self._time_fn)
            self._logs[key] = moved
            self._log_dir_of[key] = target_dir
            self.scheduler.schedule_once(config["file.delete.delay.ms"] / 1000.0,
                                         lambda: shutil.rmtree(doomed, ignore_errors=True))
            self.checkpoint()
            return moved

    def logs(self) -> dict[tuple[str, int], Log]:
        """{(topic, partition): Log}."""
        return dict(self._logs)

    def _check_open(self):
        if self._closed:
            raise KafkaLogError("LogManager is shut down")

    def _check_writable(self):
        self._check_open()
        if self.read_only:
            raise KafkaLogError("this LogManager is read-only")

    # ------------------------------------------------------------------------------ tasks
    def _each_usable_log(self, what, task):
        """Run ``task(key, log)`` on every usable log. A log closed meanwhile (moved, deleted,
        shut down: the log says so under its lock with LogClosedError) is skipped, logged at
        DEBUG; its successor (a moved log) gets the next run. A log whose dir fails goes
        offline (``LogDirFailureError``) without stopping the others; the first failure is
        raised at the end."""
        failure = None
        for key, log_ in list(self._logs.items()):
            if not log_.usable:
                continue
            try:
                task(key, log_)
            except LogClosedError:
                log.debug("%s of %s-%d skipped: the log was closed meanwhile (moved, deleted "
                          "or shut down)", what, *key)
            except _IO_FAILURES as e:
                log.error("%s of %s-%d failed, the log is offline: %s", what, *key, e)
                failure = failure or e
        if failure is not None:
            raise failure

    def cleanup_logs(self) -> int:
        """Apply retention to every log and forget expired producers
        (``producer_id_expiration_ms``); returns the number of segments deleted."""
        deleted = 0

        def retain(key, log_):
            nonlocal deleted
            deleted += log_.delete_old_segments()
            log_.remove_expired_producers(self.producer_id_expiration_ms)
        self._each_usable_log("retention", retain)
        return deleted

    def compact_logs(self, now_ms: int | None = None) -> dict[tuple[str, int], CleanerStats]:
        """One cleaner pass over every log with ``cleanup.policy`` compact that the cleaner's
        policy says needs one (``cleaner.needs_cleaning``); returns {(topic, partition):
        CleanerStats}."""
        now = int(self._time_fn() * 1000) if now_ms is None else now_ms
        done = {}

        def clean(key, log_):
            if not log_.config.compact_enabled:
                return
            # The policy reads the segments' files: under the log's lock, so that no move or
            # close runs meanwhile.
            with log_.exclusive():
                if log_.closed:
                    raise LogClosedError(f"log {log_.path} is closed")
                due = needs_cleaning(log_.cleaning_snapshot(), now)
            if due:
                done[key] = log_.compact(now)
        self._each_usable_log("compaction", clean)
        return done

    def flush_dirty_logs(self) -> None:
        now = int(self._time_fn() * 1000)
        self._each_usable_log("flush", lambda key, log_: log_.flush_if_due(now))

    def checkpoint(self) -> None:
        """Write the recovery-point, log-start-offset, replication-offset and (for compacted
        logs) cleaner-offset checkpoints of every log dir (atomically: ``.tmp``, fsync,
        rename). A read-only manager writes nothing."""
        with self._lock:
            if self.read_only:
                return
            failure = None
            for d in self.log_dirs:
                try:
                    self._checkpoint_dir(d)
                except _IO_FAILURES as e:   # the other dirs still get theirs
                    log.error("%s", e)
                    failure = failure or e
            if failure is not None:
                raise failure

    def _checkpoint_dir(self, d):
        logs = {k: self._logs[k] for k, v in self._log_dir_of.items() if v == d}
        saved = self._checkpoints[d]
        with _dir_io(d, "writing the checkpoints"):
            saved.write("recovery_point", {k: x.recovery_point for k, x in logs.items()})
            saved.write("log_start_offset", {k: x.log_start_offset for k, x in logs.items()})
            saved.write("high_watermark", {k: x.high_watermark for k, x in logs.items()})
            compacted = {k: x.first_dirty_offset for k, x in logs.items()
                         if x.config.compact_enabled}
            if compacted or saved.offsets["cleaner_offset"]:
                saved.write("cleaner_offset", compacted)

    def shutdown(self) -> None:
        """Flush and close every log, write the checkpoints and the clean-shutdown marker.

        A failing dir (full, read-only, I/O errors) does not stop the rest: every log is
        closed, every dir that can be is checkpointed, a dir that failed gets no clean-shutdown
        marker (its next load recovers), the locks are released in any case, and the first
        failure is raised as ``LogDirFailureError`` (``TooManyOpenFilesError`` when the process
        ran out of descriptors)."""
        # Stopped before the lock is taken: a checkpoint task running now takes the lock too,
        # and the scheduler waits for it (up to 5 s, then 5 s more for its thread).
        self.scheduler.shutdown(run_pending=True)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            failures: list[KafkaLogError] = []
            failed_dirs = set()
            try:
                for key, log_ in self._logs.items():
                    try:
                        log_.close()
                    except _IO_FAILURES as e:
                        failures.append(e)
                    if log_.failed is not None:
                        failed_dirs.add(self._log_dir_of[key])
                if not self.read_only:
                    for d in self.log_dirs:
                        try:
                            self._checkpoint_dir(d)
                            if d not in failed_dirs:
                                with _dir_io(d, "writing the clean-shutdown marker"):
                                    checkpoint.write_atomically(
                                        os.path.join(d, CLEAN_SHUTDOWN_FILE),
                                        json.dumps({"version": 0,
                                                    "brokerEpoch": self.broker_epoch}))
                        except _IO_FAILURES as e:
                            failures.append(e)
            finally:
                self._release_locks()
            if failures:
                for other in failures[1:]:
                    log.error("shutdown: %s", other)
                raise failures[0]

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


@contextlib.contextmanager
def _dir_io(dirs, what):
    """Turn a failed file operation on log dir(s) into ``LogDirFailureError``."""
    try:
        yield
    except KafkaLogError:
        raise
    except OSError as e:
        names = dirs if isinstance(dirs, str) else ", ".join(dirs)
        raise io_failure(f"{what} failed in log dir {names}: {e}", e) from e


def _close_all(logs):
    """Close logs after a failure that is being raised (their own errors are only logged)."""
    for log_ in logs:
        try:
            log_.close()
        except KafkaLogError as e:
            log.error("closing %s: %s", log_.path, e)


def _parsed(name):
    """The ``TopicPartitionDir`` of a directory name with a valid topic, or None."""
    try:
        parsed = parse_partition_dir_name(name)
        validate_topic(parsed.topic)
        return parsed
    except KafkaLogError:
        return None


def _moved_name(future, parsed):
    """The live directory name the ``.kafkalog-move`` marker of ``-future`` directory
    ``future`` (``parsed``) names: the same partition, its topic beginning as the cut one;
    else (a marker of an older kafkalog: empty) the name ``parsed`` gives."""
    with open(os.path.join(future, MOVE_MARKER), "rb") as f:
        named = _parsed(f.read().decode("ascii", "replace").strip())
    if named is not None and not named.state and named.partition == parsed.partition and \
            named.topic.startswith(parsed.topic):
        return partition_dir_name(named.topic, named.partition)
    return partition_dir_name(parsed.topic, parsed.partition)
