#!/usr/bin/env python3
"""Compare kafkalog's internal-topic schema tables (``kafkalog.internal.tables``) with Kafka's
message definitions, field by field, for every version.

Usage::

    check_schemas.py [--strict] SOURCE [SOURCE ...]

A SOURCE is a directory holding Kafka's JSON message definitions (searched recursively), or a
Kafka git directory (``git:DIR[@REV]``, or a bare ``.git``/mirror directory; REV defaults to
HEAD) whose definitions are read with ``git show``: those under ``*/src/main/resources/common/
message/`` and ``*/src/main/resources/common/metadata/``. A message defined by several sources
is taken from the first. Each source is printed with what identifies it (the commit and
``gradle.properties``' version for git).

Compared for each message the tables hold: valid and flexible versions, the label of unstable
versions (``latestVersionUnstable``; the tables also label share-group records so), and for
every field of every struct, nested ones included: presence and order, type (struct names
too), the versions it is in, nullability, tagged versions and tag, default. Also compared:
the record-type ids (``__consumer_offsets`` key versions, metadata ``apiKey``), and messages
of the internal topics' definition directories that the tables lack.

The protocol tables of ``kafkalog serve`` (``kafkalog.protocol.messages``) are compared the same
way over the versions its ``APIS`` table supports (a version Kafka does not define is a
difference; a field only in other versions is left out of both sides), with each API's key.

Prints one line per difference and a summary; exits 1 when there is a difference. A table
message that no source defines is listed as unchecked; with ``--strict`` that fails too.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafkalog.internal.schema import Field, Struct, Versions, _default  # noqa: E402
from kafkalog.internal.tables import (  # noqa: E402
    GROUP_RECORD_TYPES, MESSAGES, METADATA_RECORD_TYPES, UNSTABLE_MESSAGES,
)
from kafkalog.protocol.messages import APIS, MESSAGES as PROTOCOL  # noqa: E402

# Definition directories of the records of the internal topics kafkalog decodes; a message
# there that the tables lack is a difference. Clients' directory holds requests too, so only
# the messages the tables name are compared there.
_INTERNAL_DIRS = ("group-coordinator/", "transaction-coordinator/", "metadata/")
_DEF_DIRS = ("/src/main/resources/common/message/", "/src/main/resources/common/metadata/")


# ----------------------------------------------------------------------------------------------
# Reading the definitions

def _strip_comments(text: str) -> str:
    """Kafka's definitions are JSON with ``//`` comments; drop those outside strings."""
    out, i, n, in_str = [], 0, len(text), False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


class Source:
    """Definitions from one directory or git snapshot: ``files`` maps a path to its text."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        git_dir, rev = None, "HEAD"
        if spec.startswith("git:"):
            git_dir, _, rev = spec[4:].partition("@")
            rev = rev or "HEAD"
        elif os.path.isdir(os.path.join(spec, "objects")) and os.path.isfile(
                os.path.join(spec, "HEAD")):
            git_dir = spec
        self.files: dict[str, str] = {}
        if git_dir is not None:
            self._read_git(git_dir, rev)
        else:
            root = Path(spec)
            if not root.is_dir():
                raise SystemExit(f"{spec}: not a directory of definitions nor a git directory")
            for p in sorted(root.rglob("*.json")):
                self.files[str(p.relative_to(root))] = p.read_text()
            self.label = f"directory {root.resolve()} ({len(self.files)} JSON files)"

    def _read_git(self, git_dir: str, rev: str) -> None:
        def git(*args: str) -> str:
            return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True,
                                  capture_output=True, text=True).stdout
        commit = git("rev-parse", f"{rev}^{{commit}}").strip()
        try:
            props = git("show", f"{commit}:gradle.properties")
            version = next((line.split("=", 1)[1].strip() for line in props.splitlines()
                            if line.startswith("version=")), "?")
        except subprocess.CalledProcessError:
            version = "?"
        date = git("log", "-1", "--format=%cI", commit).strip()
        for path in git("ls-tree", "-r", "--name-only", commit).splitlines():
            if path.endswith(".json") and any(d in "/" + path for d in _DEF_DIRS):
                self.files[path] = git("show", f"{commit}:{path}")
        self.label = (f"Kafka {version} at commit {commit} ({date}) from git dir {git_dir}, "
                      f"{len(self.files)} definitions")

    def messages(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for path, text in self.files.items():
            try:
                spec = json.loads(_strip_comments(text))
            except json.JSONDecodeError:
                continue
            if isinstance(spec, dict) and "name" in spec and "fields" in spec:
                yield path, spec


# ----------------------------------------------------------------------------------------------
# One normal form for both sides: a message is {valid, flexible, unstable, fields}; a field is
# {name, type, versions, nullable, tagged, tag, default, fields}; version sets are frozensets
# inside the message's valid versions.

def _vset(text: str | None, universe: frozenset[int]) -> frozenset[int]:
    if not text or text == "none":
        return frozenset()
    v = Versions(text)
    return frozenset(x for x in universe if x in v)


def _camel(name: str) -> str:
    return name[:1].lower() + name[1:]


def _json_fields(fields: list[dict[str, Any]], universe: frozenset[int],
                 flexible: frozenset[int], common: dict[str, dict[str, Any]]
                 ) -> list[dict[str, Any]]:
    out = []
    for f in fields:
        type_ = f["type"]
        array = type_.startswith("[]")
        base = type_[2:] if array else type_
        # Kafka's FieldSpec: a field with only taggedVersions is in those versions
        versions = _vset(f.get("versions") or f.get("taggedVersions"), universe)
        sub = f.get("fields")
        if sub is None and base in common:
            sub = common[base]["fields"]
        struct_fields = None
        if sub is not None:
            struct_fields = _json_fields(sub, universe, flexible, common)
        out.append({
            "name": _camel(f["name"]), "type": type_, "versions": versions,
            "nullable": _vset(f.get("nullableVersions"), universe) & versions,
            "tagged": _vset(f.get("taggedVersions"), universe) & versions,
            "tag": None if f.get("tag") is None else int(f["tag"]),
            # a field's own flexibleVersions (none of the internal topics' use one; the tables
            # could not say it)
            "flexibleVersions": f.get("flexibleVersions"),
            "default": _json_default(f, base if sub is None else Struct(base), array),
            "fields": struct_fields,
        })
    return out


def _json_default(f: dict[str, Any], type_: str | Struct, array: bool) -> Any:
    """A field's default as kafkalog's tables hold it (``_default``'s value of the text)."""
    if "default" not in f:
        text = None
    elif f["default"] is None:
        text = "null"
    elif isinstance(f["default"], bool):
        text = str(f["default"]).lower()
    else:
        text = str(f["default"])
    try:
        return _default(text, type_, array)
    except ValueError:
        return f"unreadable default {text!r}"


def _universe(valid: str) -> frozenset[int]:
    v = Versions(valid)
    return frozenset(range(v.lo, (v.hi if v.hi is not None else v.lo) + 1))


def from_json(spec: dict[str, Any], key_like: bool,
              within: frozenset[int] | None = None) -> dict[str, Any]:
    """The definition in normal form; ``within``: over those versions only (a field of none
    of them left out)."""
    universe = _universe(spec["validVersions"])
    if within is not None:
        universe &= within
    flexible = _vset(spec.get("flexibleVersions"), universe)
    common = {c["name"]: c for c in spec.get("commonStructs", [])}
    fields = _json_fields(spec["fields"], universe, flexible, common)
    if within is not None:
        fields = _present(fields)
    if key_like:
        fields = _single_layout(fields, universe)
        universe = frozenset([0])
    return {"valid": universe, "flexible": flexible, "fields": fields,
            "unstable": bool(spec.get("latestVersionUnstable")),
            "apiKey": spec.get("apiKey"), "validText": spec["validVersions"]}


def _present(fields: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    if fields is None:
        return None
    return [{**f, "fields": _present(f["fields"])} for f in fields if f["versions"]]


def _single_layout(fields: list[dict[str, Any]], universe: frozenset[int]
                   ) -> list[dict[str, Any]]:
    """A record key has one layout (its version is the record type, read as version 0 by
    kafkalog): a field in every key version counts as in "all", one in some as a difference
    the comparison shows (``versions`` left partial)."""
    for f in fields:
        f["versions"] = frozenset([0]) if f["versions"] == universe else f["versions"]
        f["nullable"] = frozenset([0]) if f["nullable"] == universe else f["nullable"]
        f["tagged"] = frozenset()
    return fields


def _table_fields(s: Struct, universe: frozenset[int], flexible: frozenset[int],
                  seen: set[str]) -> list[dict[str, Any]]:
    out = []
    for f in s.fields:
        versions = frozenset(v for v in universe if v in f.versions)
        type_, sub = _table_type(f)
        if isinstance(f.type, Struct):
            sub = _table_fields(f.type, universe, flexible, seen)
        out.append({
            "name": f.name, "type": type_, "versions": versions,
            "nullable": frozenset(v for v in versions
                                  if f.nullable is not None and v in f.nullable),
            "tagged": versions & flexible if f.tag is not None else frozenset(),
            "tag": f.tag, "default": f.default, "fields": sub, "flexibleVersions": None,
        })
    return out


def _table_type(f: Field) -> tuple[str, None]:
    base = f.type.name if isinstance(f.type, Struct) else f.type
    return ("[]" if f.array else "") + base, None


def from_table(name: str, key_like: bool, tables: dict[str, Any] = MESSAGES) -> dict[str, Any]:
    m = tables[name]
    universe = frozenset([0]) if key_like else _universe(_text(m.valid))
    flexible = frozenset(v for v in universe if v in m.flexible)
    return {"valid": universe, "flexible": flexible, "unstable": name in UNSTABLE_MESSAGES,
            "fields": _table_fields(m.struct, universe, flexible, set())}


def _text(v: Versions) -> str:
    if v.hi is None:
        return f"{v.lo}+"
    return f"{v.lo}" if v.lo == v.hi else f"{v.lo}-{v.hi}"


# ----------------------------------------------------------------------------------------------
# Comparing

def _fmt(vs: frozenset[int]) -> str:
    if not vs:
        return "none"
    s = sorted(vs)
    runs, start = [], s[0]
    for a, b in zip(s, s[1:] + [None]):
        if b != a + 1:
            runs.append(f"{start}" if start == a else f"{start}-{a}")
            if b is not None:
                start = b
    return ",".join(runs)


def _count(fields: list[dict[str, Any]] | None) -> int:
    return sum(1 + _count(f["fields"]) for f in fields or ())


def compare_fields(where: str, want: list[dict[str, Any]], got: list[dict[str, Any]],
                   out: list[str]) -> None:
    wn, gn = [f["name"] for f in want], [f["name"] for f in got]
    for n in wn:
        if n not in gn:
            out.append(f"{where}.{n}: missing from the table")
    for n in gn:
        if n not in wn:
            out.append(f"{where}.{n}: in the table, not in Kafka's definition")
    common = [n for n in wn if n in gn]
    if [n for n in gn if n in wn] != common:
        out.append(f"{where}: field order {[n for n in gn if n in wn]}, Kafka's {common}")
    gmap = {f["name"]: f for f in got}
    for w in want:
        g = gmap.get(w["name"])
        if g is None:
            continue
        at = f"{where}.{w['name']}"
        if w["type"] != g["type"]:
            out.append(f"{at}: type {g['type']}, Kafka's {w['type']}")
        for key in ("versions", "nullable", "tagged"):
            if w[key] != g[key]:
                out.append(f"{at}: {key} {_fmt(g[key])}, Kafka's {_fmt(w[key])}")
        if w["tagged"] and w["tag"] != g["tag"]:
            out.append(f"{at}: tag {g['tag']}, Kafka's {w['tag']}")
        if w["flexibleVersions"] != g["flexibleVersions"]:
            out.append(f"{at}: its own flexible versions {w['flexibleVersions']} in Kafka's")
        if w["default"] != g["default"]:
            out.append(f"{at}: default {g['default']!r}, Kafka's {w['default']!r}")
        if (w["fields"] is None) != (g["fields"] is None):
            out.append(f"{at}: struct in one, not in the other")
        elif w["fields"] is not None:
            compare_fields(at, w["fields"], g["fields"], out)


def compare_message(name: str, want: dict[str, Any], got: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key in ("valid", "flexible"):
        if want[key] != got[key]:
            out.append(f"{name}: {key} versions {_fmt(got[key])}, Kafka's {_fmt(want[key])}")
    if want["unstable"] and not got["unstable"]:
        out.append(f"{name}: Kafka marks its latest version unstable; the table does not")
    compare_fields(name, want["fields"], got["fields"], out)
    return out


def _key_names() -> set[str]:
    keys = {k for k, _ in GROUP_RECORD_TYPES.values()}
    return keys


def check(sources: list[Source], strict: bool) -> int:
    defs: dict[str, tuple[Source, str, dict[str, Any]]] = {}
    for src in sources:
        for path, spec in src.messages():
            defs.setdefault(spec["name"], (src, path, spec))
    keys = _key_names()
    diffs: list[str] = []
    unchecked: list[str] = []
    checked = fields = 0
    for name in sorted(MESSAGES):
        if name not in defs:
            unchecked.append(name)
            continue
        checked += 1
        _, _, spec = defs[name]
        want = from_json(spec, name in keys)
        fields += _count(want["fields"])
        diffs += compare_message(name, want, from_table(name, name in keys))
    # record-type ids
    for record_type, (key, value) in sorted(GROUP_RECORD_TYPES.items()):
        if key in defs and record_type not in _universe(defs[key][2]["validVersions"]):
            diffs.append(f"__consumer_offsets record type {record_type}: {key}'s versions "
                         f"are {defs[key][2]['validVersions']}")
    for name, (src, path, spec) in defs.items():
        if name.endswith("Key") and path.startswith("group-coordinator/"):
            for v in _universe(spec["validVersions"]):
                if GROUP_RECORD_TYPES.get(v, (None,))[0] != name:
                    diffs.append(f"__consumer_offsets record type {v} is {name} in Kafka, "
                                 f"{GROUP_RECORD_TYPES.get(v, ('nothing',))[0]} in the table")
            value = name[:-3] + "Value"
            if value in defs and any(GROUP_RECORD_TYPES.get(v) != (name, value)
                                     for v in _universe(spec["validVersions"])):
                diffs.append(f"{name}'s records: the table does not pair it with {value}")
        if spec.get("type") == "metadata" and "apiKey" in spec:
            if METADATA_RECORD_TYPES.get(spec["apiKey"]) != name:
                diffs.append(f"metadata record type {spec['apiKey']} is {name} in Kafka, "
                             f"{METADATA_RECORD_TYPES.get(spec['apiKey'])} in the table")
    for type_id, name in METADATA_RECORD_TYPES.items():
        if name in defs and defs[name][2].get("apiKey") != type_id:
            diffs.append(f"metadata record type {type_id}: {name}'s apiKey is "
                         f"{defs[name][2].get('apiKey')}")
    p_checked, p_fields = _check_protocol(defs, diffs, unchecked)
    checked += p_checked
    fields += p_fields
    # definitions of the internal topics the tables lack
    for name, (src, path, spec) in sorted(defs.items()):
        if path.startswith(_INTERNAL_DIRS) and name not in MESSAGES:
            diffs.append(f"{name} ({path}): not in the tables")
    # __share_group_state's records: kafkalog has no decoder for that topic yet
    no_decoder = sorted(name for name, (_, path, _) in defs.items()
                        if path.startswith("share-coordinator/") and name not in MESSAGES)
    for src in sources:
        print(f"source: {src.label}")
    for name in sorted(MESSAGES):
        if name in defs:
            src, path, _ = defs[name]
            if len(sources) > 1 and src is not sources[0]:
                print(f"  {name}: from {src.spec}:{path}")
    for line in diffs:
        print(f"DIFF {line}")
    for name in unchecked:
        print(f"UNCHECKED {name}: no source defines it")
    if no_decoder:
        print(f"NOTE no __share_group_state decoder, not compared: {', '.join(no_decoder)}")
    labelled = sorted(UNSTABLE_MESSAGES)
    print(f"unstable (labelled in the tables): {', '.join(labelled) or 'none'}")
    print(f"{checked} messages ({fields} fields) compared, {len(diffs)} "
          f"differences, {len(unchecked)} unchecked")
    return 1 if diffs or (strict and unchecked) else 0


def _check_protocol(defs: dict[str, tuple[Source, str, dict[str, Any]]], diffs: list[str],
                    unchecked: list[str]) -> tuple[int, int]:
    """The protocol tables over the versions APIS supports; (messages, fields) compared."""
    checked = fields = 0
    for key, (api, lo, hi) in sorted(APIS.items()):
        within = frozenset(range(lo, hi + 1))
        for name in (api + "Request", api + "Response"):
            if name not in defs:
                unchecked.append(name)
                continue
            checked += 1
            spec = defs[name][2]
            if spec.get("apiKey") != key:
                diffs.append(f"{name}: api key {key} in APIS, Kafka's {spec.get('apiKey')}")
            want = from_json(spec, False, within)
            missing = within - _universe(spec["validVersions"])
            if missing:
                diffs.append(f"{name}: APIS supports versions {_fmt(missing)} that Kafka's "
                             f"definition ({spec['validVersions']}) lacks")
            if want["unstable"] and hi == max(_universe(spec["validVersions"])):
                diffs.append(f"{name}: v{hi} is unstable in Kafka's definition")
            want["unstable"] = False
            fields += _count(want["fields"])
            diffs += compare_message(name, want, from_table(name, False, PROTOCOL))
    return checked, fields


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sources", nargs="+", metavar="SOURCE",
                        help="a directory of definitions, or git:DIR[@REV]")
    parser.add_argument("--strict", action="store_true",
                        help="fail when a table message is defined by no source")
    args = parser.parse_args(argv)
    return check([Source(s) for s in args.sources], args.strict)


if __name__ == "__main__":
    sys.exit(main())
