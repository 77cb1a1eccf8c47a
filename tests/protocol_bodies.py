"""Random request and response bodies for the protocol tests: every field as
``decode_request`` returns it (the version's fields random, nulls included where the schema
allows them; the others their defaults)."""
import uuid

from kafkalog.internal.schema import Struct
from kafkalog.protocol import APIS, MESSAGES

_INTS = {"int8": 7, "int16": 15, "uint16": 16, "int32": 31, "uint32": 32, "int64": 63}


def _scalar(rng, type_, flexible):
    if type_ in _INTS:
        bits = _INTS[type_]
        return rng.randrange(0, 2 ** bits) if type_.startswith("u") else \
            rng.randrange(-2 ** bits, 2 ** bits)
    if type_ == "bool":
        return rng.random() < 0.5
    if type_ == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    if type_ == "string":
        return "".join(rng.choice("ab\u00e9\u6f22") for _ in range(rng.randrange(6)))
    return rng.randbytes(rng.randrange(8))       # bytes, records


def body(rng, s, version, flexible):
    """A random body holding every field as decode_request returns them: the version's fields
    random (nulls included where allowed), the others their defaults."""
    out = {}
    for f in s.fields:
        if version not in f.versions:
            out[f.name] = list(f.native) if f.array and f.native else f.native
            continue
        if f.tag is not None and flexible and rng.random() < 0.3:
            out[f.name] = list(f.native) if f.array and f.native else f.native
            continue
        if f.nullable is not None and version in f.nullable and rng.random() < 0.2:
            out[f.name] = None
            continue

        def one():
            if isinstance(f.type, Struct):
                return body(rng, f.type, version, flexible)
            return _scalar(rng, f.type, flexible)
        out[f.name] = [one() for _ in range(rng.randrange(3))] if f.array else one()
    return out


def random_body(rng, api_key, version, kind):
    message = MESSAGES[APIS[api_key][0] + kind]
    return body(rng, message.struct, version, version in message.flexible)
