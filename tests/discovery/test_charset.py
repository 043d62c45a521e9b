"""decode_html's charset rule against the WHATWG Encoding Standard and HTML's <meta> prescan (a stranger's report:
labels decoded with Python's strict codec of the same name lost text, hashes and whole pages)."""

from __future__ import annotations

import pytest

from harvester.discovery._charset import prescan
from harvester.extraction import decode_html, extract_page
from harvester.records import FetchResult
from harvester.settings import Settings

LONG = "This paragraph is long enough to be considered the main content of the article by any extractor. " * 3

# (label, the Python codec that writes what the standard's decoder reads, text only that superset holds)
LABELS = [
    ("euc-kr", "cp949", "똠방각하 효자동"),  # 똠 is a cp949 (UHC) syllable outside strict EUC-KR
    ("ks_c_5601-1987", "cp949", "똠방각하"),
    ("Shift_JIS", "cp932", "①②③ 髙橋 ㈱ Ⅰ"),  # NEC and IBM extensions: windows-31J
    ("windows-31j", "cp932", "①② こんにちは"),
    ("x-sjis", "cp932", "日本語 ①"),
    ("gb2312", "gb18030", "喆喆 镕 頤和園 €"),  # GBK's decoder is gb18030's
    ("gb_2312-80", "gb18030", "简体中文 喆"),
    ("x-gbk", "gb18030", "简体 頤"),
    ("gbk", "gb18030", "頤和園 \U00020000"),  # a four-byte gb18030 sequence
    ("big5", "big5hkscs", "繁體中文 你好 嫺"),  # Big5-HKSCS
    ("x-x-big5", "big5hkscs", "繁體字"),
    ("iso-8859-9", "cp1254", "Türkçe Şığ “q” €"),  # windows-1254
    ("tis-620", "cp874", "ภาษาไทย “q” €"),  # windows-874
    ("iso-8859-11", "cp874", "ภาษาไทย …"),
    ("windows-874", "cp874", "ไทย"),
    ("iso-ir-100", "cp1252", "“Smart” ‘quotes’ – €9 ™ œuvre"),  # the latin-1 family is windows-1252
    ("iso-8859-1", "cp1252", "“Smart” €"),
    ("latin1", "cp1252", "Œuvre “q”"),
    ("us-ascii", "cp1252", "ascii label “q” é"),
    ("iso-8859-8-i", "iso8859_8", "עברית שלום"),
    ("x-mac-cyrillic", "mac_cyrillic", "Привет мир"),
    ("macintosh", "mac_roman", "Mac éè † ß"),
    ("koi8-r", "koi8_r", "Привет мир ё"),
]


def page(label: str, codec: str, text: str, *, where: str) -> tuple[bytes, str | None]:
    head = f'<meta charset="{label}">' if where == "meta" else ""
    html = f"<!DOCTYPE html><html><head>{head}<title>{text}</title></head><body><p>{text}</p></body></html>"
    return html.encode(codec), (f"text/html; charset={label}" if where == "header" else "text/html")


@pytest.mark.parametrize("where", ["header", "meta"])
@pytest.mark.parametrize(("label", "codec", "text"), LABELS)
def test_a_label_is_decoded_with_the_standards_decoder(label, codec, text, where):
    body, content_type = page(label, codec, text, where=where)
    decoded, _ = decode_html(body, content_type)
    assert f"<title>{text}</title>" in decoded
    assert "\ufffd" not in decoded


def test_euc_kr_pages_differing_in_one_uhc_syllable_have_different_hashes():
    """The stranger's price list: 똠 (0x8C63) and 뛠 (0x8D63), both outside strict EUC-KR. Decoded strictly, both
    were U+FFFD: one content hash, and the second page was stored as the first's duplicate."""
    settings = Settings()

    def digest(syllable: str) -> str:
        html = (f'<!DOCTYPE html><html><head><meta charset="euc-kr"><title>상품 {syllable}</title></head><body>'
                f"<article><h1>상품 {syllable}</h1><p>제품 이름: {syllable * 3}</p><p>{LONG}</p></article>"
                "</body></html>")
        body = html.encode("cp949")
        fetched = FetchResult(url="http://127.0.0.1/k", final_url="http://127.0.0.1/k", status=200, started_at=0.0,
                              elapsed_s=0.01, content_type="text/html", body=body, bytes_read=len(body))
        out = extract_page(fetched, settings=settings)
        assert syllable in (out.page.title or "")
        return out.content_hash

    assert b"\x8c\x63".decode("cp949") == "똠" and b"\x8d\x63".decode("cp949") == "뛠"
    assert digest("똠") != digest("뛠")


@pytest.mark.parametrize(
    ("label", "undefined"),
    [
        ("windows-1252", b"\x81\x8d\x8f\x90\x9d"),
        ("iso-8859-1", b"\x81\x8d\x8f\x90\x9d"),  # windows-1252 too
        ("windows-1250", b"\x81\x83\x88\x90\x98"),
        ("windows-1251", b"\x98"),
        ("windows-1253", b"\x81\x88\x8a\x8c"),
        ("windows-1254", b"\x81\x8d\x8e\x8f\x90\x9d\x9e"),
        ("windows-1255", b"\x81\x8a\x8c"),
        ("windows-1257", b"\x81\x83\x88\x8a"),
        ("windows-1258", b"\x81\x8a\x8d\x8e"),
        ("windows-874", b"\x81\x82\x90\x98\x9f"),
    ],
)
def test_bytes_pythons_codec_leaves_undefined_are_the_c1_controls_of_the_index(label, undefined):
    body = b"<p>caf\xe9 " + undefined + b"</p>"
    decoded, _ = decode_html(body, f"text/html; charset={label}")
    assert "".join(chr(b) for b in undefined) in decoded
    assert "\ufffd" not in decoded


def test_where_the_standards_single_byte_index_differs_from_pythons_codec():
    assert "ў Ў" in decode_html(b"<p>\xae \xbe</p>", "text/html; charset=koi8-u")[0]  # KOI8-U is KOI8-RU there
    assert "\u05ba" in decode_html(b"<p>\xca</p>", "text/html; charset=windows-1255")[0]
    assert decode_html(b"<p>\xdb</p>", "text/html; charset=windows-874")[0] == "<p>\ufffd</p>"  # undefined there too


def test_header_labels_the_standard_gives_special_decoders():
    assert decode_html(b"<p>\x80\xff</p>", "text/html; charset=x-user-defined")[0] == "<p>\uf780\uf7ff</p>"
    assert decode_html("<p>é</p>".encode("utf-16-le"), "text/html; charset=utf-16")[0] == "<p>é</p>"
    assert decode_html(b"<p>\x1b$)C</p>", "text/html; charset=iso-2022-kr")[0] == "\ufffd"  # the replacement


WIN = "Café “q”"
"""Text whose windows-1252 bytes are not UTF-8: a wrong answer shows as U+FFFD or as mojibake."""


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        ('<!-- <meta charset="utf-8"> --><meta charset="windows-1252">', "windows-1252"),
        ('<!--<meta charset="utf-8">--><meta charset="windows-1252">', "windows-1252"),
        ('<!--><meta charset="windows-1252"><!-- <meta charset="utf-8"> -->', "windows-1252"),  # <!--> closes
        ('<meta http-equiv="content-type" content="text/html; charset=windows-1252">', "windows-1252"),
        ('<meta content="text/html; charset=windows-1252" http-equiv="Content-Type">', "windows-1252"),
        ("<meta http-equiv=Content-Type content=text/html;charset=windows-1252>", "windows-1252"),
        ("<meta http-equiv=\"content-type\" content=\"text/html ; CHARSET = 'windows-1252'\">", "windows-1252"),
        # a content charset counts only with the pragma; the later charset meta wins then
        ('<meta content="text/html; charset=utf-8"><meta charset="windows-1252">', "windows-1252"),
        ('<meta name="x" content="charset=utf-8"><meta charset="windows-1252">', "windows-1252"),
        # the first of a repeated attribute wins
        ('<meta charset="windows-1252" charset="utf-8">', "windows-1252"),
        # an unknown charset attribute makes the content's charset count for nothing; the next meta decides
        ('<meta charset="bogus" http-equiv="content-type" content="charset=utf-8"><meta charset="windows-1252">',
         "windows-1252"),
        ('<meta charset="windows-1252"><meta charset="utf-8">', "windows-1252"),  # the first meta wins
        # a <meta> in another tag's attribute, or in a script's text, is no declaration
        ('<a title=\'<meta charset="utf-8">\'></a><meta charset="windows-1252">', "windows-1252"),
        ("<script>var s = '<meta charset=\"utf-8\">';</script><meta charset=\"windows-1252\">", "windows-1252"),
        ("<meta/charset=windows-1252>", "windows-1252"),
        ('<metadata charset="utf-8"><meta charset="windows-1252">', "windows-1252"),
        ('<meta charset="utf-16"><meta charset="windows-1252">', "utf-8"),  # UTF-16 in a meta is UTF-8
        ('<meta charset="x-user-defined">', "windows-1252"),
    ],
)
def test_the_meta_prescan(head, expected):
    body = f"<!DOCTYPE html><html><head>{head}<title>{WIN}</title></head><body><p>{WIN}</p></body></html>"
    assert prescan(body.encode("cp1252")) == expected
    if expected == "windows-1252":
        text, used = decode_html(body.encode("cp1252"), "text/html")
        assert used == "cp1252"
        assert f"<title>{WIN}</title>" in text


def test_an_xml_declaration_names_the_encoding_when_no_meta_does():
    body = f'<?xml version="1.0" encoding="windows-1252"?>\n<html><head><title>{WIN}</title></head></html>'
    assert prescan(body.encode("cp1252")) == "windows-1252"
    assert prescan(b"<?xml version='1.0' encoding='utf 8'?><p>") is None
    assert prescan("<?xml".encode("utf-16-le")) == "utf-16le"


def test_running_out_of_bytes_inside_a_meta_declares_nothing():
    assert prescan(b'<html><head><meta charset="windows-1252') is None
    assert prescan(b'<html><head><!-- <meta charset="windows-1252">') is None


def test_a_late_meta_behind_a_long_comment_is_found_by_the_same_prescan():
    """The prescan window is 4 KB; past it, in the head, the late-meta rule reads the same way (comments skipped)."""
    filler = "<!-- " + "p" * 6000 + " -->"
    body = (f"<html><head>{filler}<!-- <meta charset=\"koi8-r\"> --><meta charset=\"shift_jis\">"
            "<title>日本語のページ</title></head><body><p>日本語</p></body></html>").encode("cp932")
    text, used = decode_html(body, "text/html")
    assert used == "cp932"
    assert "<title>日本語のページ</title>" in text


def test_the_late_meta_rule_reads_a_page_without_any_charset_as_before():
    """A windows-1252 page with no <head> and no charset anywhere (its body is what the late rule scans) is read as
    windows-1252, a late <meta charset> past 4 KB in such a page still counts, and one in a comment does not."""
    row = b'<tr><td class="c"><a href="/item/123">Caf\xe9 item</a></td><td>12,50 \x80</td></tr>\n'
    body = b"<html><meta name=keywords content=x><body><table>" + row * 4000 + b"</table></body></html>"
    assert decode_html(body) == (body.decode("cp1252"), "cp1252")
    koi8 = "Привет".encode("koi8-r")
    late = b"<html><meta name=keywords content=x>" + b"<!-- x -->" * 600 + b"<meta charset=koi8-r><p>" + koi8
    assert decode_html(late)[1] == "koi8-r" and decode_html(late)[0].endswith("Привет")
    hidden = b"<html>" + b"<!-- x -->" * 600 + b"<!-- <meta charset=koi8-r> --><p>" + koi8
    assert decode_html(hidden)[1] == "cp1252"
