"""One MessagePack value, decoded: what vllm-vcr keeps of vLLM's registration reply
(`ready_response_hex`, `msgspec.msgpack.encode(EngineCoreReadyResponse)`: a map of strings to
numbers, strings, booleans, nils and small arrays or maps).

The MessagePack spec's types but the extension types (a timestamp, vLLM's tensors), which that
reply does not hold; anything else, or bytes cut short, is a `ValueError` naming the offset, so
a damaged field is refused rather than read wrong. A few lines of the spec are not worth a
dependency for one header field (the spec: github.com/msgpack/msgpack, spec.md).
"""

from __future__ import annotations

import struct
from typing import Any

_MAX_DEPTH = 32  # nesting deeper than any reply: a damaged field, refused before recursion fails


def decode(data: bytes) -> Any:
    """The value `data` holds, which must be exactly one value."""
    value, end = _value(data, 0, 0)
    if end != len(data):
        raise ValueError(f"{len(data) - end} bytes after the value at offset {end}")
    return value


def _need(data: bytes, at: int, n: int) -> None:
    if at + n > len(data):
        raise ValueError(f"cut short at offset {at} ({n} bytes wanted, {len(data) - at} left)")


def _unpack(fmt: str, data: bytes, at: int) -> tuple[Any, int]:
    size = struct.calcsize(fmt)
    _need(data, at, size)
    return struct.unpack_from(fmt, data, at)[0], at + size


def _value(data: bytes, at: int, depth: int) -> tuple[Any, int]:
    if depth > _MAX_DEPTH:
        raise ValueError(f"nested deeper than {_MAX_DEPTH} at offset {at}")
    _need(data, at, 1)
    tag = data[at]
    at += 1
    if tag <= 0x7F:
        return tag, at
    if tag >= 0xE0:
        return tag - 0x100, at
    if 0x80 <= tag <= 0x8F:
        return _map(data, at, tag & 0x0F, depth)
    if 0x90 <= tag <= 0x9F:
        return _array(data, at, tag & 0x0F, depth)
    if 0xA0 <= tag <= 0xBF:
        return _text(data, at, tag & 0x1F)
    simple = {0xC0: None, 0xC2: False, 0xC3: True}
    if tag in simple:
        return simple[tag], at
    numbers = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
               0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
    if tag in numbers:
        return _unpack(numbers[tag], data, at)
    sized = {0xD9: (">B", "str"), 0xDA: (">H", "str"), 0xDB: (">I", "str"),
             0xC4: (">B", "bin"), 0xC5: (">H", "bin"), 0xC6: (">I", "bin"),
             0xDC: (">H", "array"), 0xDD: (">I", "array"),
             0xDE: (">H", "map"), 0xDF: (">I", "map")}
    if tag not in sized:
        raise ValueError(f"type 0x{tag:02x} at offset {at - 1} is not read here (an extension)")
    fmt, kind = sized[tag]
    n, at = _unpack(fmt, data, at)
    if kind == "str":
        return _text(data, at, n)
    if kind == "bin":
        _need(data, at, n)
        return bytes(data[at:at + n]), at + n
    if kind == "array":
        return _array(data, at, n, depth)
    return _map(data, at, n, depth)


def _text(data: bytes, at: int, n: int) -> tuple[str, int]:
    _need(data, at, n)
    try:
        return data[at:at + n].decode("utf-8"), at + n
    except UnicodeDecodeError:
        raise ValueError(f"a string at offset {at} is not UTF-8") from None


def _array(data: bytes, at: int, n: int, depth: int) -> tuple[list[Any], int]:
    out = []
    for _ in range(n):
        item, at = _value(data, at, depth + 1)
        out.append(item)
    return out, at


def _map(data: bytes, at: int, n: int, depth: int) -> tuple[dict[Any, Any], int]:
    out: dict[Any, Any] = {}
    for _ in range(n):
        key, at = _value(data, at, depth + 1)
        if isinstance(key, list | dict):
            raise ValueError(f"a map key before offset {at} is not a number or a string")
        out[key], at = _value(data, at, depth + 1)
    return out, at
