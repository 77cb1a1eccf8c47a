"""``kafkalog serve``: a read-only Kafka protocol endpoint over partition directories, so any
Kafka client (librdkafka, the Java clients, kafka-python, aiokafka, kcat, Flink, MirrorMaker 2)
consumes data at rest. See docs/serve.md.

``Server(paths, state_dir, listen=("127.0.0.1", 0))``: ``start()`` (or ``with``), ``address``,
``close()``. Modules: ``catalog`` (the partitions served), ``handlers`` (each API's answer),
``groups`` (the one-node group coordinator), ``offsets`` (committed offsets under the state
dir), ``server`` (sockets and threads).
"""
from kafkalog.serve.server import Server

__all__ = ["Server"]
