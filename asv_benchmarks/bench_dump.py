"""``kafkalog dump --json`` of bench-0: the library call the CLI makes (``iter_json`` with the
CLI's default options), written to a null sink so that only the dump is measured."""
import os

from kafkalog.dump import DumpOptions, DumpReport, iter_json

from .common import BENCH


def _dump_json():
    with open(os.devnull, "w") as out:
        for piece in iter_json(BENCH, DumpOptions(), DumpReport()):
            out.write(piece)


class DumpJson:
    timeout = 180         # about 5 s a dump
    number = 1
    repeat = 3

    def time_dump_json(self):
        _dump_json()

    def peakmem_dump_json(self):
        _dump_json()
