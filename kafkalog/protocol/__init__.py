"""The Kafka protocol as ``kafkalog serve`` speaks it: one schema-driven codec
(``kafkalog.internal.schema``'s engine, the tables of ``messages``) for requests and responses.
"""
from kafkalog.protocol.codec import (
    Request, api_versions_body, decode_request, decode_response, encode_request,
    encode_response, frame_size,
)
from kafkalog.protocol.messages import APIS, MESSAGES

__all__ = ["APIS", "MESSAGES", "Request", "api_versions_body", "decode_request",
           "decode_response", "encode_request", "encode_response", "frame_size"]
