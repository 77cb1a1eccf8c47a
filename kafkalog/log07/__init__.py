"""Kafka 0.7 logs: partition directories of ``.kafka`` files (the format 0.8 replaced), read,
recovered and written as 0.7 did. Rooms: ``format`` (entries built, messages read out of
walked entries), ``log`` (``Log07``, its files as ``Segment07``)."""
from kafkalog.log07.format import Message07
from kafkalog.log07.log import Log07, Segment07

__all__ = ["Log07", "Message07", "Segment07"]
