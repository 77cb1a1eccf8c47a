"""What a path holds, found by listing it: the partition directories of a log dir (as Kafka's
``LogManager`` finds the logs it loads; ``partition_dirs`` is the one listing of them that the
scan planner, verify, dump, the CLI and internal-topic replay use), the KRaft snapshots of
a partition directory, and the symbolic links a writable open refuses.
File names come from ``files``, listings from ``storage`` (local, remote or a view)."""
from __future__ import annotations

import contextlib
import logging
import os
import stat
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple, Sequence, TypeVar

from kafkalog import storage
from kafkalog._text import counted
from kafkalog._typing import StrPath
from kafkalog.checkpoint import LogDirCheckpoints
from kafkalog.errors import (
    KafkaLogError, LogNotFoundError, NotAPartitionDirectoryError, PartitionNotFoundError,
    SymlinkOutsideError,
)
from kafkalog.files import (
    LEADER_EPOCH_CHECKPOINT, LOG07_SUFFIX, LOG_SUFFIX, PARTITION_METADATA, KRaftSnapshotId,
    is_file_of, parse_file_name, parse_kraft_snapshot_name, parse_log07_file_name,
    topic_partition_or_none,
)
from kafkalog.storage_backend import Entry, ahead
from kafkalog.storage_local import file_kind

log = logging.getLogger(__name__)
_T = TypeVar("_T")


def kraft_snapshot_files(directory: StrPath) -> list[tuple[KRaftSnapshotId, str]]:
    """(id, path) of every KRaft snapshot in a partition directory, oldest first."""
    found = []
    for name in storage.listdir(directory):
        sid = parse_kraft_snapshot_name(name)
        if sid is not None:
            found.append((sid, os.path.join(os.fspath(directory), name)))
    return sorted(found)


#: Partitions of a bucket worked on at once by ``each_partition`` (their requests in flight
#: together; local partitions, bound by the CPU, are done one after the other).
REMOTE_PARTITIONS_AT_ONCE = 16


def each_partition(fn: Callable[[str], _T], dirs: Sequence[str]) -> Iterator[_T]:
    """``fn(d)`` of each of ``dirs``, in order: for partitions in a bucket, up to
    ``REMOTE_PARTITIONS_AT_ONCE`` at once and ahead of the one consumed (a store's latency
    paid once per group, not per request), each run in a copy of the caller's context (its
    progress bar); an error is raised where its partition comes."""
    if len(dirs) < 2 or not any(storage.is_remote(d) for d in dirs):
        for d in dirs:
            yield fn(d)
        return
    yield from ahead(fn, iter(dirs), REMOTE_PARTITIONS_AT_ONCE, "kafkalog-partition")


class PartitionListing(NamedTuple):
    """What ``partition_listing`` found: ``partitions``, (directory, its entries) of each
    partition directory in name order (or what ``keep`` made of them), and ``listed``, the
    entries of every directory listed: the path given, those on the way to the partition
    directories (a partition's log dir among them when it was below the path given) and the
    partition directories (but for a local listing with ``keep``).

    Sizes: of segment files (``.log``, 0.7's ``.kafka``); a local listing gives other
    entries size -1 (a ``stat`` each is not made)."""
    partitions: list[Any]
    listed: dict[str, list[Entry]]


#: the files whose sizes a partition listing gives (see ``PartitionListing``)
_SIZED = (LOG_SUFFIX, LOG07_SUFFIX)


def partition_dirs(path: StrPath, *, named: bool = False, recursive: bool = False,
                   required: bool = False, log07: bool = False) -> list[str]:
    """The partition directories ``path`` names, in name order: itself when it is one, else
    those below it: directly inside it (a log dir; in a tiered-storage view, inside its topic
    prefixes) or, with ``recursive``, at any depth (folders of log dirs). A partition
    directory is one holding a ``.log`` segment or, with ``named``, one named
    ``<topic>-<partition>`` holding another file of a partition (an index, a snapshot, a
    checkpoint: what a dump shows), or with ``log07`` one holding a Kafka 0.7 ``.kafka`` file
    (for the readers that handle them: ``is_log07_dir`` tells them apart); nothing below one is
    looked at. ``path``: a local path or a URL (``file://`` is local).

    Raises ``LogNotFoundError`` when ``path`` does not exist, ``NotAPartitionDirectoryError``
    (a ``PartitionNotFoundError``) when it is a file, or (``required``) a directory with no
    partition directory below it; the message names the path (as the user gave it, not a
    tiered view's) and what was found there."""
    return [d for d, _ in partition_listing(path, named=named, recursive=recursive,
                                            required=required, log07=log07).partitions]


def partition_listing(path: StrPath, *, named: bool = False, recursive: bool = False,
                      required: bool = False, log07: bool = False,
                      keep: Callable[[str, list[Entry]], Any] | None = None
                      ) -> PartitionListing:
    """``partition_dirs`` with what the listing saw: each partition directory's entries
    (names, kinds, segment sizes: ``PartitionListing``) and those of the directories above
    them. One walk: locally one ``os.scandir`` per directory, on an object store one
    recursive listing of the prefix (``storage.list_tree``: no request per directory).
    ``keep(directory, entries)``: what is kept of each partition directory instead of
    (directory, entries) (a listing of 100,000 holds no entry object per file then)."""
    path = str(storage.abspath(storage.normalize(os.fspath(path))))
    tree, entries = _entries(path, _SIZED)
    listed = {path: entries}
    if _is_partition_dir(path, entries, named, log07):
        return PartitionListing([(path, entries) if keep is None else keep(path, entries)],
                                listed)
    found: list[Any] = []
    _below(path, entries, named, recursive, found, log07, tree, listed, keep)
    if required and not found:
        raise PartitionNotFoundError(
            f"{storage.shown(path)}: neither a partition directory nor a log dir holding any "
            f"({_what_is_in(path, entries)})")
    return PartitionListing(found, listed)


@contextlib.contextmanager
def located(path: StrPath, storage_options: Mapping[str, Any] | None = None,
            rsm_keys: Mapping[str, Any] | None = None) -> Iterator[storage.Location]:
    """``storage.locate`` of ``path`` and, within, a remote directory ``path`` known from one
    recursive listing of it (``storage.listed``): resolving it (a tiered-storage view looks at
    what it holds) and ``partition_listing`` below it ask nothing more, one LIST per 1,000
    keys for both. A local path, or one naming a file, is located as ``locate`` does."""
    root = storage.normalize(os.fspath(path))
    name = os.path.basename(root.rstrip("/"))
    tree = None
    if storage.is_remote(root) and not storage.is_view(root) and not _is_partition_file(name) \
            and name not in LogDirCheckpoints.NAMES.values():
        if storage_options is not None:
            storage.set_options(root, storage_options)
        try:
            tree = storage.list_tree(root)
        except (KafkaLogError, OSError):
            pass             # missing, a file, denied: said by what follows, as without it
    with storage.listed(tree or {}):
        yield storage.locate(os.fspath(path), storage_options, rsm_keys)


def located_each(paths: Any, stack: contextlib.ExitStack,
                 storage_options: Mapping[str, Any] | None = None,
                 rsm_keys: Mapping[str, Any] | None = None) -> list[storage.Location]:
    """``storage.locate_each`` of ``paths``, each remote one ``located`` within its one listing
    until ``stack`` closes: resolving it and then discovering what is below it is one LIST per
    1,000 keys. A ``Location`` among them is taken as it is."""
    return [p if isinstance(p, storage.Location) else
            stack.enter_context(located(p, storage_options, rsm_keys))
            for p in storage.each_path(paths)]


def check_partition_dir(path: StrPath, *, read_only: bool, log07: bool = False) -> None:
    """Raise unless ``path`` may be opened as one partition's log (``log07``: a Kafka 0.7
    one): ``PartitionNotFoundError`` when it is a log dir (partition directories below it, a
    few named), a partition directory of the other format or, ``read_only``, a directory
    holding no segment; the errors of ``partition_dirs`` when it is missing or a file. The
    message names the path and what was found there."""
    path = str(storage.abspath(storage.normalize(os.fspath(path))))
    listing = partition_listing(path, log07=log07)
    found = [d for d, _ in listing.partitions]
    is_07 = is_log07_dir(path, listing.listed[path])
    if found == [path] and is_07 == log07:
        return
    if is_07 and not log07:
        raise PartitionNotFoundError(
            f"{storage.shown(path)}: a Kafka 0.7 partition directory (.kafka files), where a "
            "Kafka 0.8+ one is expected: open it with Log07")
    if found == [path]:
        raise PartitionNotFoundError(
            f"{storage.shown(path)}: a Kafka 0.8+ partition directory (.log segments), where "
            "a Kafka 0.7 one (.kafka files) is expected: open it with Log.open")
    if found:
        shown = ", ".join(os.path.basename(d) for d in found[:5]) + \
            (", ..." if len(found) > 5 else "")
        raise PartitionNotFoundError(
            f"{storage.shown(path)}: a log dir holding "
            f"{counted(len(found), 'partition directory')} ({shown}), where one partition "
            "directory is expected: open one of them" +
            ("" if log07 else ", or the log dir with LogManager"))
    if read_only:
        raise PartitionNotFoundError(
            f"{storage.shown(path)}: {_what_is_in(path, listing.listed[path])}, where a "
            f"{'Kafka 0.7 ' if log07 else ''}partition directory is expected")


def check_log_dir(path: StrPath, *, read_only: bool) -> None:
    """Raise unless ``path`` may be opened as a ``LogManager`` 's log dir: ``LogNotFoundError``
    when it is missing and ``read_only`` (a writable manager creates it),
    ``NotAPartitionDirectoryError`` for a file; when it holds no partition directory,
    ``PartitionNotFoundError`` if log dirs are below it (a path too high; Kafka refuses a log
    dir holding a directory that is not a partition's) or, ``read_only``, in every case
    (nothing to read; a writable manager's empty log dir is a new broker's, as in Kafka). The
    message names the path and what was found there."""
    path = str(storage.abspath(storage.normalize(os.fspath(path))))
    if not storage.exists(path):
        if read_only:
            raise LogNotFoundError(f"{storage.shown(path)}: no such log dir")
        return
    _, entries = _entries(path)                     # raises for a file, saying what it is
    found: list[tuple[str, list[Entry]]] = []
    _below(path, entries, False, False, found, False, None, {})
    if found:
        return
    # one level down only: a listing per directory, never a walk of a whole tree
    below = {e.name: len(partition_dirs(os.path.join(path, e.name)))
             for e in entries if e.is_dir}
    log_dirs = [(name, n) for name, n in sorted(below.items()) if n]
    if log_dirs:
        shown = ", ".join(f"{name} ({n})" for name, n in log_dirs[:5]) + \
            (", ..." if len(log_dirs) > 5 else "")
        raise PartitionNotFoundError(
            f"{storage.shown(path)}: holds no partition directory, but the log dirs below it "
            f"do: {shown}; give the log dirs themselves")
    if read_only:
        raise PartitionNotFoundError(
            f"{storage.shown(path)}: {_what_is_in(path, entries)}, where a log dir holding "
            "partition directories is expected")


def check_partition_links(directory: StrPath, links: Iterable[str], *, read_only: bool) -> None:
    """``check_links`` of the files a log writes or replaces among ``links`` (the names of
    symbolic links in partition directory ``directory``, from the load's listing): its
    segments, indexes and producer snapshots (any state suffix), ``leader-epoch-checkpoint``
    and ``partition.metadata``."""
    check_links(directory, [n for n in links if parse_file_name(n) is not None
                            or n in (LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA)],
                read_only=read_only, where="partition directory")


def check_log_dir_links(log_dir: StrPath, *, read_only: bool) -> None:
    """``check_links`` of a log dir's offset checkpoints."""
    check_links(log_dir, LogDirCheckpoints.NAMES.values(), read_only=read_only,
                where="log dir")


def check_links(directory: StrPath, names: Iterable[str], *, read_only: bool,
                where: str) -> None:
    """Raise SymlinkOutsideError (``read_only``: log it at WARNING) for the first of ``names``
    in local ``directory`` that is a symbolic link (by ``lstat``; dangling or not) leading
    outside it: a writer would change the file it leads to (truncate it in recovery, append
    to it), or replace the link by a file."""
    directory = os.fspath(directory)
    root = None
    for name in names:
        path = os.path.join(directory, name)
        try:
            if not stat.S_ISLNK(os.lstat(path).st_mode):
                continue
        except FileNotFoundError:
            continue
        root = root or os.path.realpath(directory)
        target = os.path.realpath(path)
        if os.path.commonpath([root, target]) == root and target != root:
            continue
        if not read_only:
            raise SymlinkOutsideError(
                f"{path} is a symbolic link to {target}, outside the {where}: a writable open "
                f"would write through it; replace it by the file (or open read-only)",
                path=path, target=target)
        log.warning("%s is a symbolic link to %s, outside the %s: read through it (a "
                    "writable open refuses it)", path, target, where)


def is_log07_dir(path: StrPath, entries: list[Entry] | None = None) -> bool:
    """True when ``path`` is a Kafka 0.7 partition directory: it holds ``.kafka`` files and
    no ``.log`` segment (``entries``: its listing, when it was listed already)."""
    if entries is None:
        try:
            entries = storage.list_dir(str(storage.normalize(os.fspath(path))))
        except (FileNotFoundError, NotADirectoryError):
            return False
    return not _is_partition_dir(path, entries, False) and _holds_log07(entries)


def _holds_log07(entries):
    return any(e.is_file and parse_log07_file_name(e.name) is not None for e in entries)


def _is_partition_dir(path, entries, named, log07=False):
    return any(e.is_file and is_file_of(e.name, LOG_SUFFIX) for e in entries) or \
        (named and topic_partition_or_none(os.path.basename(path)) is not None and
         any(e.is_file and _is_partition_file(e.name) for e in entries)) or \
        (log07 and _holds_log07(entries))


def _is_partition_file(name):
    """Whether ``name`` is that of a file Kafka writes in a partition directory."""
    return parse_file_name(name) is not None or name in (LEADER_EPOCH_CHECKPOINT,
                                                         PARTITION_METADATA) or \
        parse_kraft_snapshot_name(name) is not None


def _below(path, entries, named, recursive, found, log07, tree, listed, keep=None):
    prefix = os.path.join(path, "")
    names = [e.name for e in entries if e.is_dir]
    # listed in the order the storage reads them fastest (``storage.list_dirs_in``), kept in
    # name order
    partitions, dirs = {}, {}
    # a remote listing is a snapshot that reads below answer from (``storage.listed``)
    keep_listed = keep is None or storage.is_remote(path)
    for name, inside in ((n, tree.get(prefix + n, [])) for n in names) if tree is not None \
            else storage.list_dirs_in(path, names, _SIZED):
        if inside is None:
            continue                            # gone since the parent was listed
        child = prefix + name
        if _is_partition_dir(child, inside, named, log07):
            partitions[name] = (child, inside) if keep is None else keep(child, inside)
            if keep_listed:
                listed[child] = inside
        elif recursive or storage.groups_partitions(child):
            dirs[name] = inside
    for name in names:
        if name in partitions:
            found.append(partitions.pop(name))
        elif name in dirs:
            child = prefix + name
            listed[child] = inside = dirs.pop(name)
            _below(child, inside, named, recursive, found, log07, tree, listed, keep)


def _entries(path, sized=None):
    """(``storage.list_tree(path)``, the entries of ``path``: ``storage.list_dir`` 's, with
    ``sized``), failures as errors naming what ``path`` is."""
    try:
        tree = storage.list_tree(path)
        return tree, (tree[path] if tree is not None else storage.list_dir(path, sized))
    except NotADirectoryError:
        pass
    except FileNotFoundError as e:
        if isinstance(e, KafkaLogError):
            raise
        raise LogNotFoundError(f"{storage.shown(path)}: no such file or directory") from None
    name = os.path.basename(path)
    parsed = parse_file_name(name)
    if parsed is not None:
        what = (f"a {parsed[1]} file of partition directory {os.path.dirname(path)}: give "
                "the directory")
    else:
        try:
            what = file_kind(os.stat(path).st_mode)
        except OSError:
            what = "not a directory"
    raise NotAPartitionDirectoryError(
        f"{storage.shown(path)}: {what}, where a partition directory or a log dir is expected")


def _what_is_in(path, entries):
    """What a directory that holds no partition directory holds, in words."""
    names = [e.name + ("/" if e.is_dir else "") for e in entries]
    shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
    if topic_partition_or_none(os.path.basename(path)) is not None:
        return ("named like a partition directory but holding no .log segment: "
                f"{shown or 'empty'}")
    if not entries:
        return "an empty directory"
    dirs = sum(e.is_dir for e in entries)
    below = storage.shown_below(path) if dirs else []
    hint = "" if not below else (
        f"; tiered-storage topic prefixes are below it, in {', '.join(below[:3])}"
        f"{', ...' if len(below) > 3 else ''}: give "
        f"{'that path' if len(below) == 1 else 'one of those paths'}")
    return (f"{counted(len(entries) - dirs, 'file')} and {counted(dirs, 'directory')} "
            f"holding no .log segment: {shown}{hint}")
