"""``LogManager``: every partition of one or more log dirs, as a broker's LogManager keeps them."""
import base64
import concurrent.futures
import fcntl
import json
import os
import re
import shutil
import threading
import time
import uuid

from kafkalog import checkpoint
from kafkalog.config import LogConfig
from kafkalog.errors import InvalidTopicError, KafkaLogError, LogDirLockedError
from kafkalog.log import (
    CLEAN_SHUTDOWN_FILE, CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT, Log, parse_topic_partition,
)
from kafkalog.scheduler import Scheduler

LOCK_FILE = ".lock"
META_PROPERTIES = "meta.properties"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
MOVE_MARKER = ".kafkalog-move"
_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
_MAX_TOPIC_LENGTH = 249


def validate_topic(topic):
    """Kafka's topic name rules; raises InvalidTopicError (so no name can escape the log dir)."""
    if not isinstance(topic, str) or not topic:
        raise InvalidTopicError("topic name is empty")
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {topic!r}")
    if len(topic) > _MAX_TOPIC_LENGTH:
        raise InvalidTopicError(f"topic name is longer than {_MAX_TOPIC_LENGTH} characters")
    if not _TOPIC.match(topic):
        raise InvalidTopicError(f"topic name {topic!r} has characters other than ASCII "
                                f"alphanumerics, '.', '_' and '-'")
    return topic


def _validate_partition(partition):
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise InvalidTopicError(f"invalid partition {partition!r}")
    return partition


class LogManager:
    """Loads, creates, retains, flushes and checkpoints the logs of one or more log dirs.

    Parameters
    ----------
    log_dirs : str or list of str
    config : LogConfig or dict, the default for every log
    topic_configs : {topic: dict} of per-topic overrides
    background : start the periodic retention, flush and checkpoint tasks
    recovery_threads : logs loaded in parallel
    """

    def __init__(self, log_dirs, config=None, *, topic_configs=None, background=True,
                 retention_check_interval_ms=300_000, flush_check_interval_ms=1_000,
                 cleaner_backoff_ms=15_000,
                 checkpoint_interval_ms=60_000, recovery_threads=2, broker_epoch=0,
                 replicated=False, producer_id_expiration_ms=86_400_000, time_fn=time.time):
        if isinstance(log_dirs, (str, os.PathLike)):
            log_dirs = [log_dirs]
        self.log_dirs = [os.path.abspath(os.fspath(d)) for d in log_dirs]
        self.config = config if isinstance(config, LogConfig) else LogConfig(config)
        self.topic_configs = dict(topic_configs or {})
        self.broker_epoch = broker_epoch
        self.replicated = replicated
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._time_fn = time_fn
        self._logs = {}
        self._log_dir_of = {}
        self._lock = threading.RLock()
        self._lock_files = []
        self._closed = False
        self.scheduler = Scheduler("kafkalog-log-manager")
        try:
            for d in self.log_dirs:
                os.makedirs(d, exist_ok=True)
                self._lock_dir(d)
                self._ensure_meta_properties(d)
            self._load_logs(recovery_threads)
        except BaseException:
            self._release_locks()
            self.scheduler.shutdown(run_pending=False)
            raise
        if background:
            self.scheduler.schedule_periodic(retention_check_interval_ms / 1000.0,
                                             self.cleanup_logs)
            self.scheduler.schedule_periodic(flush_check_interval_ms / 1000.0,
                                             self.flush_dirty_logs)
            self.scheduler.schedule_periodic(checkpoint_interval_ms / 1000.0, self.checkpoint)
            self.scheduler.schedule_periodic(cleaner_backoff_ms / 1000.0, self.compact_logs)

    # ------------------------------------------------------------------------------ dirs
    def _lock_dir(self, d):
        fd = os.open(os.path.join(d, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise LogDirLockedError(f"failed to acquire lock on {os.path.join(d, LOCK_FILE)}: "
                                    f"another process or LogManager is using log dir {d}") \
                from None
        self._lock_files.append(fd)

    def _release_locks(self):
        for fd in self._lock_files:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
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
        holds a ``.kafkalog-move`` marker: with the live directory still there the copy may be
        incomplete, so it is dropped; with the live one renamed ``<name>.<token>-delete`` the
        copy was complete, so it is renamed into place. A ``-future`` directory without the
        marker is another tool's (a broker's replica move) and is left alone, never loaded."""
        names = {d: [n for n in os.listdir(d) if os.path.isdir(os.path.join(d, n))]
                 for d in self.log_dirs}
        live = {n for d in names for n in names[d]
                if not n.endswith((FUTURE_DIR_SUFFIX, DELETE_DIR_SUFFIX, STRAY_DIR_SUFFIX))}
        deleting = {n[:-len(DELETE_DIR_SUFFIX)] for d in names for n in names[d]
                    if n.endswith(DELETE_DIR_SUFFIX)}
        for d in self.log_dirs:
            for name in names[d]:
                path = os.path.join(d, name)
                if name in live and os.path.exists(os.path.join(path, MOVE_MARKER)):
                    os.remove(os.path.join(path, MOVE_MARKER))     # moved; marker left
                if not name.endswith(FUTURE_DIR_SUFFIX) or \
                        not os.path.exists(os.path.join(path, MOVE_MARKER)):
                    continue
                stem = name[:-len(FUTURE_DIR_SUFFIX)]               # <topic>-<p>.<token>
                partition_name = stem.rsplit(".", 1)[0]
                if partition_name in live or stem not in deleting:
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    final = os.path.join(d, partition_name)
                    os.replace(path, final)
                    os.remove(os.path.join(final, MOVE_MARKER))
                    checkpoint.fsync_dir(d)

    def _load_logs(self, threads):
        self._finish_or_drop_moves()
        jobs = []
        for d in self.log_dirs:
            marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
            clean = os.path.exists(marker)
            recovery_points = self._read_checkpoint(d, RECOVERY_POINT_CHECKPOINT)
            start_offsets = self._read_checkpoint(d, LOG_START_OFFSET_CHECKPOINT)
            high_watermarks = self._read_checkpoint(d, REPLICATION_OFFSET_CHECKPOINT)
            for name in sorted(os.listdir(d)):
                path = os.path.join(d, name)
                if not os.path.isdir(path):
                    continue
                if name.endswith(DELETE_DIR_SUFFIX):
                    shutil.rmtree(path, ignore_errors=True)     # a deletion left unfinished
                    continue
                if name.endswith(FUTURE_DIR_SUFFIX) or name.endswith(STRAY_DIR_SUFFIX):
                    continue                                      # never loaded as live logs
                try:
                    key = parse_topic_partition(name)
                    validate_topic(key[0])
                except KafkaLogError:
                    continue                                      # not a partition directory
                jobs.append((d, path, key, clean, recovery_points.get(key, 0),
                             start_offsets.get(key, 0), high_watermarks.get(key, 0)))
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            futures = {pool.submit(self._open_log, *job): job for job in jobs}
            for future in concurrent.futures.as_completed(futures):
                d, _, key = futures[future][:3]
                if key in self._logs:
                    raise KafkaLogError(f"duplicate log directories for {key[0]}-{key[1]}: "
                                        f"{self._log_dir_of[key]} and {d}")
                self._logs[key] = future.result()
                self._log_dir_of[key] = d
        for d in self.log_dirs:
            marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
            if os.path.exists(marker):
                os.remove(marker)       # from now on a crash must be seen as unclean

    def _open_log(self, d, path, key, clean, recovery_point, log_start_offset, high_watermark):
        return Log.open(path, self._config_for(key[0]), recovery_point=recovery_point,
                        log_start_offset=log_start_offset, clean_shutdown=clean,
                        high_watermark=high_watermark if self.replicated else None,
                        replicated=self.replicated, scheduler=self.scheduler,
                        time_fn=self._time_fn)

    @staticmethod
    def _read_checkpoint(d, name):
        path = os.path.join(d, name)
        if not os.path.exists(path):
            return {}
        return checkpoint.read_offset_checkpoint(path)

    # ------------------------------------------------------------------------------ logs
    def get_log(self, topic, partition):
        """The Log of a partition, or None."""
        return self._logs.get((topic, partition))

    def get_or_create_log(self, topic, partition, config=None):
        """The partition's Log, created in the log dir holding the fewest partitions."""
        validate_topic(topic)
        _validate_partition(partition)
        with self._lock:
            self._check_open()
            key = (topic, partition)
            if key in self._logs:
                return self._logs[key]
            counts = {d: 0 for d in self.log_dirs}
            for d in self._log_dir_of.values():
                counts[d] += 1
            d = min(self.log_dirs, key=lambda x: (counts[x], self.log_dirs.index(x)))
            path = os.path.join(d, f"{topic}-{partition}")
            if os.path.realpath(os.path.dirname(path)) != os.path.realpath(d):
                raise InvalidTopicError(f"{topic}-{partition} would escape log dir {d}")
            log = Log.open(path, self._config_for(topic, config), recovery_point=0,
                           log_start_offset=0, clean_shutdown=True,
                           replicated=self.replicated, scheduler=self.scheduler,
                           time_fn=self._time_fn)
            self._logs[key] = log
            self._log_dir_of[key] = d
            return log

    def delete_log(self, topic, partition):
        """Close the log, rename its directory ``<topic>-<p>.<uuid>-delete`` and remove it
        after ``file.delete.delay.ms``."""
        with self._lock:
            key = (topic, partition)
            log = self._logs.pop(key, None)
            if log is None:
                return False
            d = self._log_dir_of.pop(key)
            log.close()
            target = os.path.join(d, f"{topic}-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
            os.replace(log.path, target)
            checkpoint.fsync_dir(d)
            delay = log.config["file.delete.delay.ms"] / 1000.0
            self.scheduler.schedule_once(delay, lambda: shutil.rmtree(target, ignore_errors=True))
            self.checkpoint()
            return True

    def move_log(self, topic, partition, target_dir):
        """Move a partition to another of the manager's log dirs, as Kafka's alter-log-dirs
        does: copy into ``<topic>-<p>.<uuid>-future`` there, then rename the live directory
        ``-delete`` and the future one into place. A crash at any step leaves either the
        old or the new copy whole (finished or dropped at the next load). Returns the Log."""
        target_dir = os.path.abspath(os.fspath(target_dir))
        if target_dir not in self.log_dirs:
            raise KafkaLogError(f"{target_dir} is not one of this manager's log dirs")
        with self._lock:
            self._check_open()
            key = (topic, partition)
            log = self._logs.get(key)
            if log is None:
                raise KafkaLogError(f"no log for {topic}-{partition}")
            source_dir = self._log_dir_of[key]
            if source_dir == target_dir:
                return log
            name = f"{topic}-{partition}"
            token = uuid.uuid4().hex
            future = os.path.join(target_dir, f"{name}.{token}{FUTURE_DIR_SUFFIX}")
            with log._lock:
                log.flush()
                os.makedirs(future)
                open(os.path.join(future, MOVE_MARKER), "wb").close()
                for entry in sorted(os.scandir(log.path), key=lambda e: e.name):
                    if entry.is_file() and not entry.name.endswith(".deleted") and \
                            entry.name != MOVE_MARKER:
                        copied = os.path.join(future, entry.name)
                        shutil.copy2(entry.path, copied)
                        with open(copied, "rb") as f:
                            os.fsync(f.fileno())
                checkpoint.fsync_dir(future)
                checkpoint.fsync_dir(target_dir)
                config = log.config
                log.close()
                doomed = os.path.join(source_dir, f"{name}.{token}{DELETE_DIR_SUFFIX}")
                os.replace(log.path, doomed)
                checkpoint.fsync_dir(source_dir)
                final = os.path.join(target_dir, name)
                os.replace(future, final)
                checkpoint.fsync_dir(target_dir)
                os.remove(os.path.join(final, MOVE_MARKER))
            moved = Log.open(final, config, recovery_point=log.recovery_point,
                             log_start_offset=log.log_start_offset, clean_shutdown=True,
                             high_watermark=log.high_watermark if self.replicated else None,
                             replicated=self.replicated, scheduler=self.scheduler,
                             time_fn=self._time_fn)
            self._logs[key] = moved
            self._log_dir_of[key] = target_dir
            self.scheduler.schedule_once(config["file.delete.delay.ms"] / 1000.0,
                                         lambda: shutil.rmtree(doomed, ignore_errors=True))
            self.checkpoint()
            return moved

    def logs(self):
        """{(topic, partition): Log}."""
        return dict(self._logs)

    def _check_open(self):
        if self._closed:
            raise KafkaLogError("LogManager is shut down")

    # ------------------------------------------------------------------------------ tasks
    def cleanup_logs(self):
        """Apply retention to every log and forget expired producers
        (``producer_id_expiration_ms``); returns the number of segments deleted."""
        deleted = 0
        for log in list(self._logs.values()):
            if not log._closed and log.failed is None:
                deleted += log.delete_old_segments()
                log.remove_expired_producers(self.producer_id_expiration_ms)
        return deleted

    def compact_logs(self, now_ms=None):
        """One cleaner pass over every log with ``cleanup.policy`` compact whose dirty ratio
        reaches ``min.cleanable.dirty.ratio`` (or whose oldest dirty data is older than
        ``max.compaction.lag.ms``); returns {(topic, partition): CleanerStats}."""
        from kafkalog import cleaner
        now_ms = int(self._time_fn() * 1000) if now_ms is None else now_ms
        done = {}
        for key, log in list(self._logs.items()):
            if log._closed or log.failed is not None or not log.config.compact_enabled:
                continue
            ratio = cleaner.dirty_ratio(log, now_ms)
            overdue = False
            max_lag = log.config["max.compaction.lag.ms"]
            first_dirty, _ = cleaner.cleanable_range(log, now_ms)
            for s in log.segments:
                if s.base_offset >= first_dirty:
                    overdue = now_ms - s.largest_timestamp > max_lag
                    break
            if ratio >= log.config["min.cleanable.dirty.ratio"] or overdue:
                done[key] = log.compact(now_ms)
        return done

    def flush_dirty_logs(self):
        now = int(self._time_fn() * 1000)
        for log in list(self._logs.values()):
            if not log._closed and log.failed is None and \
                    now - log._last_flush_ms >= log.config["flush.ms"]:
                log.flush()

    def checkpoint(self):
        """Write the recovery-point, log-start-offset and replication-offset checkpoints of
        every log dir (atomically: ``.tmp``, fsync, rename)."""
        with self._lock:
            for d in self.log_dirs:
                keys = [k for k, v in self._log_dir_of.items() if v == d]
                logs = {k: self._logs[k] for k in keys}
                checkpoint.write_offset_checkpoint(
                    os.path.join(d, RECOVERY_POINT_CHECKPOINT),
                    {k: log.recovery_point for k, log in logs.items()})
                checkpoint.write_offset_checkpoint(
                    os.path.join(d, LOG_START_OFFSET_CHECKPOINT),
                    {k: log.log_start_offset for k, log in logs.items()})
                checkpoint.write_offset_checkpoint(
                    os.path.join(d, REPLICATION_OFFSET_CHECKPOINT),
                    {k: log.high_watermark for k, log in logs.items()})
                compacted = {k: log.first_dirty_offset for k, log in logs.items()
                             if log.config.compact_enabled}
                if compacted or os.path.exists(os.path.join(d, CLEANER_OFFSET_CHECKPOINT)):
                    checkpoint.write_offset_checkpoint(
                        os.path.join(d, CLEANER_OFFSET_CHECKPOINT), compacted)

    def shutdown(self):
        """Flush and close every log, write the checkpoints and the clean-shutdown marker."""
        with self._lock:
            if self._closed:
                return
            self.scheduler.shutdown(run_pending=True)
            for log in self._logs.values():
                log.close()
            self.checkpoint()
            # A dir with a failed log gets no clean-shutdown marker: its next load recovers.
            failed = {self._log_dir_of[k] for k, log in self._logs.items()
                      if log.failed is not None}
            for d in self.log_dirs:
                if d in failed:
                    continue
                checkpoint.write_atomically(
                    os.path.join(d, CLEAN_SHUTDOWN_FILE),
                    json.dumps({"version": 0, "brokerEpoch": self.broker_epoch}))
            self._release_locks()
            self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()
