"""Charset labels and decoders as browsers have them: the WHATWG Encoding Standard, and HTML's ``<meta>`` prescan.

A label names an encoding by the standard's table (``webencodings``, the table html5lib uses), and the encoding is
decoded with the decoder the standard specifies, which is often not Python's codec of the same name: EUC-KR is
windows-949 (``cp949``), Shift_JIS is windows-31J (``cp932``), GBK is the gb18030 decoder, Big5 is Big5-HKSCS, and
the windows-125x indexes give the C1 control of the same value where Python's codecs have no character. Decoding
with the strict codec turned the syllables cp949 adds to EUC-KR into U+FFFD, so two pages differing in one of them
had one main text, one content hash, and one was stored as the other's duplicate.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable
from functools import lru_cache

import webencodings

Decoder = Callable[[bytes], str]

_SUPERSETS = {"gbk": "gb18030"}
"""WHATWG names whose decoder ``webencodings`` names by a narrower Python codec: the standard's GBK decoder is its
gb18030 decoder (EUC-KR, Shift_JIS and Big5 already map to cp949, cp932 and big5hkscs there)."""

_SINGLE_BYTE_OVERRIDES = {"koi8-u": {0xAE: "\u045e", 0xBE: "\u040e"}, "windows-1255": {0xCA: "\u05ba"}}
"""Where the standard's single-byte index and Python's codec name different characters (whatwg/encoding's
indexes.json, compared byte by byte): KOI8-U is KOI8-RU there, and windows-1255 has U+05BA."""

_SINGLE_BYTE = frozenset({
    "ibm866", "iso-8859-2", "iso-8859-3", "iso-8859-4", "iso-8859-5", "iso-8859-6", "iso-8859-7", "iso-8859-8",
    "iso-8859-8-i", "iso-8859-10", "iso-8859-13", "iso-8859-14", "iso-8859-15", "iso-8859-16", "koi8-r", "koi8-u",
    "macintosh", "windows-874", "windows-1250", "windows-1251", "windows-1252", "windows-1253", "windows-1254",
    "windows-1255", "windows-1256", "windows-1257", "windows-1258", "x-mac-cyrillic",
})
"""The standard's legacy single-byte encodings: each decoded by a 256-entry table."""


def encoding_name(label: str | bytes | None) -> str | None:
    """The WHATWG name (lower case) of a charset label, or None for a label the standard does not know."""
    if isinstance(label, bytes):
        try:
            label = label.decode("ascii")
        except UnicodeDecodeError:
            return None
    if not label:
        return None
    found = webencodings.lookup(label)
    return None if found is None else str(found.name).lower()


@lru_cache(maxsize=64)
def decoder(name: str) -> tuple[str, Decoder]:
    """(the name ``decode_html`` reports, a function decoding bytes as the standard's decoder does) for a WHATWG name.

    The name reported is the Python codec underneath (``cp1252``, ``cp949``), as before; never raises on bytes."""
    if name == "replacement":  # ISO-2022-KR, HZ-GB-2312 and the like: one U+FFFD for any non-empty input
        return name, _replacement
    if name == "x-user-defined":
        return name, _table_decoder(_X_USER_DEFINED)
    if name in ("utf-16le", "utf-16be"):
        codec = "utf-16-le" if name == "utf-16le" else "utf-16-be"
        return codec, _codec_decoder(codec)
    codec = _SUPERSETS.get(name) or codecs.lookup(webencodings.lookup(name).codec_info.name).name
    if name in _SINGLE_BYTE:
        return codec, _table_decoder(_single_byte_table(codec, _SINGLE_BYTE_OVERRIDES.get(name, {})))
    return codec, _codec_decoder(codec)


def _replacement(body: bytes) -> str:
    return "\ufffd" if body else ""


def _codec_decoder(codec: str) -> Decoder:
    def decode(body: bytes) -> str:
        return body.decode(codec, errors="replace")

    return decode


def _table_decoder(table: str) -> Decoder:
    def decode(body: bytes) -> str:
        return codecs.charmap_decode(body, "replace", table)[0]

    return decode


def _single_byte_table(codec: str, overrides: dict[int, str]) -> str:
    """The standard's index for a single-byte encoding, from Python's codec: a byte the codec leaves undefined in
    0x80-0x9F is the C1 control of its value (U+0081 for 0x81 in windows-1252); one undefined elsewhere stays
    undefined (U+FFFE in the table: U+FFFD when decoded)."""
    chars = []
    for byte in range(256):
        if byte in overrides:
            chars.append(overrides[byte])
            continue
        try:
            chars.append(bytes((byte,)).decode(codec))
        except UnicodeDecodeError:
            chars.append(chr(byte) if 0x80 <= byte <= 0x9F else "\ufffe")
    return "".join(chars)


_X_USER_DEFINED = "".join(chr(b) if b < 0x80 else chr(0xF700 + b) for b in range(256))
"""The standard's x-user-defined decoder: ASCII, and byte b >= 0x80 as U+F780 + (b - 0x80)."""


_WHITESPACE = b"\t\n\f\r "
_RAW_TEXT = re.compile(rb"<(script|style|title|textarea)[\t\n\f\r />]", re.IGNORECASE)
"""Elements whose text the parser never reads as tags. The one deviation from the prescan: a ``<meta>`` written in a
script's string is no declaration to the tree builder, which "changes the encoding" to the page's real ``<meta>``
after it; skipping their text here gives the encoding browsers end with (the prescan alone gave UTF-8 to a
windows-1252 page with ``'<meta charset="utf-8">'`` in its script)."""
_RAW_TEXT_END = {name: re.compile(b"</" + name, re.IGNORECASE) for name in (b"script", b"style", b"title", b"textarea")}


def prescan(data: bytes) -> str | None:
    """HTML §13.2.3.2 "prescan a byte stream to determine its encoding" over ``data``: a WHATWG name, or None.

    Comments are skipped (a ``<meta charset>`` commented out declares nothing), a ``<meta>`` counts by the
    attribute-based algorithm (``charset``, or ``http-equiv="content-type"`` with a ``content`` naming a charset,
    in either order; the first of a repeated attribute wins), and running out of bytes ends the scan, leaving only
    an XML declaration's encoding. UTF-16 from a ``<meta>`` means UTF-8, x-user-defined windows-1252."""
    if data.startswith(b"<\x00?\x00x\x00"):
        return "utf-16le"
    if data.startswith(b"\x00<\x00?\x00x"):
        return "utf-16be"
    end = len(data)
    pos = data.find(b"<")
    while 0 <= pos < end:
        if data.startswith(b"<!--", pos):
            close = data.find(b"-->", pos + 2)
            if close < 0:
                break
            pos = close + 3
        elif data[pos + 1:pos + 5].lower() == b"meta" and pos + 5 < end and data[pos + 5] in b"\t\n\f\r /":
            found, pos = _meta(data, pos + 6)
            if found is not None:
                return found
            if pos < 0:
                break
        elif data[pos + 1:pos + 2].isalpha() or (data[pos + 1:pos + 2] == b"/" and data[pos + 2:pos + 3].isalpha()):
            raw = _RAW_TEXT.match(data, pos)
            pos = _skip_tag(data, pos + 1)
            if pos >= 0 and raw is not None:  # past the element's text, to its end tag
                end_tag = _RAW_TEXT_END[raw.group(1).lower()].search(data, pos)
                pos = end_tag.start() if end_tag is not None else -1
            if pos < 0:
                break
        elif data[pos + 1:pos + 2] in (b"!", b"/", b"?"):
            close = data.find(b">", pos + 1)
            if close < 0:
                break
            pos = close + 1
        else:
            pos += 1
        pos = data.find(b"<", pos)
    return xml_encoding(data)


def _meta(data: bytes, pos: int) -> tuple[str | None, int]:
    """The attributes of a ``<meta>`` from ``pos`` (after ``<meta`` and its space or slash): (its encoding or None,
    where to go on; -1 when the bytes ran out)."""
    seen: set[bytes] = set()
    got_pragma = False
    need_pragma: bool | None = None
    charset: str | None = None
    charset_failed = False
    while True:
        attribute, pos = _attribute(data, pos)
        if pos < 0:
            return None, -1
        if attribute is None:
            break
        name, value = attribute
        if name in seen:
            continue
        seen.add(name)
        if name == b"http-equiv":
            got_pragma = got_pragma or value == b"content-type"
        elif name == b"content":
            declared = _content_charset(value)
            found = encoding_name(declared) if declared is not None else None
            if found is not None and charset is None and not charset_failed:
                charset, need_pragma = found, True
        elif name == b"charset":
            charset = encoding_name(value)
            charset_failed = charset is None
            need_pragma = False
    if need_pragma is None or (need_pragma and not got_pragma) or charset is None:
        return None, pos
    if charset in ("utf-16le", "utf-16be"):
        return "utf-8", pos
    return ("windows-1252" if charset == "x-user-defined" else charset), pos


def _skip_tag(data: bytes, pos: int) -> int:
    """A tag other than ``<meta>``: past its name and its attributes (-1 when the bytes ran out)."""
    name_end = _TAG_NAME_END.search(data, pos)
    if name_end is None:
        return -1
    pos = name_end.start()
    while True:
        attribute, pos = _attribute(data, pos)
        if pos < 0 or attribute is None:
            return pos


_TAG_NAME_END = re.compile(rb"[\t\n\f\r >]")
_BEFORE_ATTRIBUTE = re.compile(rb"[\t\n\f\r /]*")
_ATTRIBUTE_NAME = re.compile(rb"=?[^\t\n\f\r />=]*")
_SPACES = re.compile(rb"[\t\n\f\r ]*")
_UNQUOTED = re.compile(rb"[^\t\n\f\r >]*")


def _attribute(data: bytes, pos: int) -> tuple[tuple[bytes, bytes] | None, int]:
    """HTML's "get an attribute": ((name, value) lower-cased, the position after it), (None, position) at ``>``,
    or (None, -1) when the bytes run out first. The spec's byte loops, as regular expressions: a name runs to a
    space, ``/``, ``>`` or an ``=`` that is not its first byte; an unquoted value to a space or ``>``."""
    end = len(data)
    pos = _BEFORE_ATTRIBUTE.match(data, pos).end()  # type: ignore[union-attr]  # matches the empty string
    if pos >= end:
        return None, -1
    if data[pos] == 0x3E:
        return None, pos
    name_end = _ATTRIBUTE_NAME.match(data, pos).end()  # type: ignore[union-attr]
    name = data[pos:name_end].lower()
    pos = _SPACES.match(data, name_end).end()  # type: ignore[union-attr]
    if pos >= end:
        return None, -1
    if data[pos] != 0x3D:  # no value: "/", ">", or the next attribute's first byte after spaces
        return (name, b""), pos
    pos = _SPACES.match(data, pos + 1).end()  # type: ignore[union-attr]
    if pos >= end:
        return None, -1
    quote = data[pos]
    if quote in (0x22, 0x27):
        close = data.find(bytes((quote,)), pos + 1)
        if close < 0:
            return None, -1
        return (name, data[pos + 1:close].lower()), close + 1
    if quote == 0x3E:
        return (name, b""), pos
    value_end = _UNQUOTED.match(data, pos).end()  # type: ignore[union-attr]
    if value_end >= end:
        return None, -1
    return (name, data[pos:value_end].lower()), value_end


def _content_charset(value: bytes) -> bytes | None:
    """HTML's "algorithm for extracting a character encoding from a meta element" on a ``content`` value (already
    lower-cased): what follows the first ``charset`` that has an ``=`` after it, quoted or up to a space or ``;``."""
    pos = 0
    while True:
        found = value.find(b"charset", pos)
        if found < 0:
            return None
        pos = found + 7
        while pos < len(value) and value[pos] in _WHITESPACE:
            pos += 1
        if pos < len(value) and value[pos] == 0x3D:
            break
    pos += 1
    while pos < len(value) and value[pos] in _WHITESPACE:
        pos += 1
    if pos >= len(value):
        return None
    if value[pos] in (0x22, 0x27):
        close = value.find(value[pos:pos + 1], pos + 1)
        return None if close < 0 else value[pos + 1:close]
    stop = pos
    while stop < len(value) and value[stop] not in b"\t\n\f\r ;":
        stop += 1
    return value[pos:stop]


def xml_encoding(data: bytes) -> str | None:
    """HTML's "get an XML encoding": the ``encoding`` of an XML declaration that opens the bytes (UTF-16 as UTF-8)."""
    if not data.startswith(b"<?xml"):
        return None
    close = data.find(b">")
    if close < 0:
        return None
    declaration = data[:close].lower()
    pos = declaration.find(b"encoding")
    if pos < 0:
        return None
    pos += 8
    while pos < close and data[pos] <= 0x20:
        pos += 1
    if pos >= close or data[pos] != 0x3D:
        return None
    pos += 1
    while pos < close and data[pos] <= 0x20:
        pos += 1
    if pos >= close or data[pos] not in (0x22, 0x27):
        return None
    stop = data.find(data[pos:pos + 1], pos + 1, close)
    if stop < 0:
        return None
    label = data[pos + 1:stop]
    if any(c <= 0x20 for c in label):
        return None
    found = encoding_name(label)
    return "utf-8" if found in ("utf-16le", "utf-16be") else found
