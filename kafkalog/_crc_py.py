"""Twin of ``_crc.pxi``: CRC32C through the crc32c package (the compiled module's portable path)."""
from crc32c import crc32c as _crc32c


def crc32c(buf, value=0):
    """CRC32C of ``buf`` continuing ``value`` (the crc32c package: the portable path)."""
    return _crc32c(buf, value)
