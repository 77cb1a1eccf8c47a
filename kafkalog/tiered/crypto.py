"""The keys and ciphers of encrypted tiered-storage segments: RSA private keys by key-pair id
(a ``Keyring``), a segment's data key unwrapped with RSA-OAEP, chunks and indexes decrypted with
AES-256-GCM.

Keys reach exactly the calls they are given to: ``keyring(rsm_keys)`` loads the RSA private keys
by the key-pair id the plugin names them with, and the tiered view a call resolves carries the
keyring's ``token`` in its paths (``kafkalog.tiered.view``), so the segments read through that
call, and only those, find them; a call given no keys, or other keys, gets a view without them
and a ``TieredKeyError``. A segment's data key is unwrapped with RSA-OAEP (SHA3-512,
MGF1-SHA3-512: the plugin's Bouncy Castle parameters, which ``cryptography`` refuses, so the
OAEP decoding is done here around its raw RSA numbers).
"""
from __future__ import annotations

import hashlib
import os
import secrets
import threading
from typing import Any, Mapping

from kafkalog.errors import MissingTieredExtraError, TieredKeyError

_lock = threading.Lock()
# token -> Keyring: the keyrings of the views resolved in this process. A view path names its
# keyring by token, so only the paths a call resolved with keys reach them.
_keyrings: dict[str, Keyring] = {}


class Keyring:
    """RSA private keys by key-pair id, and a ``token`` naming them (a digest of the ids and
    the public moduli: the same keys give the same token in every process, e.g. a Spark
    executor given the same ``rsmKeys``)."""

    def __init__(self, keys: Mapping[str, Any]) -> None:
        self.keys = dict(keys)
        digest = hashlib.sha256()
        for key_id in sorted(self.keys):
            n = self.keys[key_id].private_numbers().public_numbers.n
            digest.update(f"{key_id}\0{n:x}\0".encode())
        self.token = digest.hexdigest()[:16]

    def get(self, key_id: str) -> Any:
        return self.keys.get(key_id)


def keyring(rsm_keys: Mapping[str, Any] | None) -> Keyring | None:
    """The keyring of ``rsm_keys`` (key-pair id → a PEM file's path, PEM text (``str`` or
    ``bytes`` starting with ``-----BEGIN``) or a ``cryptography`` private key), registered
    under its token for the views that name it; None for no keys. Raises TieredKeyError for a
    key that cannot be read."""
    if not rsm_keys:
        return None
    ring = Keyring({str(key_id): _load_key(str(key_id), value)
                    for key_id, value in rsm_keys.items()})
    with _lock:
        return _keyrings.setdefault(ring.token, ring)


def keyring_of(token: str | None) -> Keyring | None:
    """The keyring registered under ``token`` (None for None or a token not known here)."""
    if token is None:
        return None
    with _lock:
        return _keyrings.get(token)


def key_pem(value: Any) -> str:
    """A key given by path or PEM text, as PEM text (what travels to Spark executors)."""
    if isinstance(value, bytes):
        return value.decode("ascii")
    if isinstance(value, str) and value.lstrip().startswith("-----BEGIN"):
        return value
    try:
        with open(os.fspath(value), "r", encoding="ascii") as f:
            return f.read()
    except OSError as e:
        raise TieredKeyError(f"cannot read the RSA private key file {value}: {e}",
                             key_id=None) from None


def _load_key(key_id, value):
    _require_cryptography()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    if isinstance(value, rsa.RSAPrivateKey):
        return value
    pem = key_pem(value)
    try:
        key = serialization.load_pem_private_key(pem.encode("ascii"), password=None)
    except (ValueError, TypeError) as e:
        raise TieredKeyError(f"key {key_id!r}: not an unencrypted PEM private key: {e}",
                             key_id=key_id) from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise TieredKeyError(f"key {key_id!r}: not an RSA private key", key_id=key_id)
    return key


def forget_keys() -> None:
    """Forget every keyring (views resolved before cannot decrypt any more)."""
    with _lock:
        _keyrings.clear()


def _require_cryptography():
    from kafkalog._extras import require_extra
    require_extra(MissingTieredExtraError, "tiered", ["cryptography"])


def aes_gcm(key: bytes) -> Any:
    """``cryptography``'s AES-GCM with ``key`` (MissingTieredExtraError without it)."""
    _require_cryptography()
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    return AESGCM(key)


def unwrap_data_key(ring: Keyring | None, key_id: str, wrapped: bytes,
                    manifest_path: str) -> bytes:
    """The data key wrapped in ``manifest_path`` with key pair ``key_id``, unwrapped with the
    private key ``ring`` (the keys of the call reading it) holds under that id."""
    key = None if ring is None else ring.get(key_id)
    if key is None:
        given = "no keys were given" if ring is None else \
            f"the keys given are for {', '.join(repr(k) for k in sorted(ring.keys))}"
        raise TieredKeyError(
            f"{manifest_path}: its data key is encrypted with key pair {key_id!r} and "
            f"{given} (rsm_keys={{{key_id!r}: 'private.pem'}}, the rsmKeys option, or "
            f"--rsm-key {key_id}=PATH)", key_id=key_id, object=manifest_path)
    data_key = rsa_oaep_sha3_512_decrypt(key, wrapped)
    if data_key is None or len(data_key) != 32:
        raise TieredKeyError(
            f"{manifest_path}: key {key_id!r} does not decrypt this segment's data key (a "
            f"different key pair given under that id, or a damaged manifest)",
            key_id=key_id, object=manifest_path)
    return data_key


def _mgf1(seed, length):
    out = bytearray()
    counter = 0
    while len(out) < length:
        out += hashlib.sha3_512(seed + counter.to_bytes(4, "big")).digest()
        counter += 1
    return bytes(out[:length])


def _xor(a, b):
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(len(a), "big")


def rsa_oaep_sha3_512_decrypt(key: Any, ciphertext: bytes) -> bytes | None:
    """RSAES-OAEP decryption (RFC 8017 7.1.2) with SHA3-512 as the hash and in MGF1, an empty
    label; None when the ciphertext does not decode under ``key``. The RSA operation is
    blinded and uses the CRT numbers of the ``cryptography`` key."""
    numbers = key.private_numbers()
    n, e = numbers.public_numbers.n, numbers.public_numbers.e
    k = (n.bit_length() + 7) // 8
    h_len = 64
    if len(ciphertext) != k or k < 2 * h_len + 2:
        return None
    c = int.from_bytes(ciphertext, "big")
    if c >= n:
        return None
    while True:
        r = secrets.randbelow(n - 2) + 2
        try:
            r_inv = pow(r, -1, n)
            break
        except ValueError:            # r shares a factor with n (never, in practice)
            continue
    blinded = (c * pow(r, e, n)) % n
    m1 = pow(blinded, numbers.dmp1, numbers.p)
    m2 = pow(blinded, numbers.dmq1, numbers.q)
    m = (m2 + ((numbers.iqmp * (m1 - m2)) % numbers.p) * numbers.q) * r_inv % n
    em = m.to_bytes(k, "big")
    masked_seed, masked_db = em[1:1 + h_len], em[1 + h_len:]
    seed = _xor(masked_seed, _mgf1(masked_db, h_len))
    db = _xor(masked_db, _mgf1(seed, k - h_len - 1))
    label_hash = hashlib.sha3_512(b"").digest()
    rest = db[h_len:].lstrip(b"\x00")
    # one verdict for every failure, as RFC 8017 asks
    ok = em[0] == 0 and secrets.compare_digest(db[:h_len], label_hash) and rest[:1] == b"\x01"
    return rest[1:] if ok else None
