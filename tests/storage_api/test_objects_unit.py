"""Pure helpers of storage.objects: path rules, signatures, content sniffing, own URLs."""

from __future__ import annotations

import pytest

from storage import objects as obj
from storage.errors import ServiceError

KEY = obj.signing_key("test-secret")


@pytest.mark.parametrize("path", ["a.png", "users/1/a b.png", "x/y/z.tar.gz", "ünï/çødé.txt", "a..b/c"])
def test_good_paths_pass_unchanged(path):
    assert obj.clean_path(path) == path


@pytest.mark.parametrize("path", [
    "", "/abs", "../x", "a/../b", "a/./b", ".", "a//b", "a/", "a\\b", "a\x00b", "a\nb", "x" * 1025, "a/" + "y" * 256,
])
def test_bad_paths_are_validation_errors(path):
    with pytest.raises(ServiceError) as info:
        obj.clean_path(path)
    assert info.value.code == "VALIDATION_ERROR"


def test_signatures_bind_bucket_path_and_expiry():
    token = obj.sign(KEY, 7, "a/b.png", 2_000_000_000)
    assert obj.verify(KEY, 7, "a/b.png", token, now=1_000)
    assert not obj.verify(KEY, 8, "a/b.png", token, now=1_000)
    assert not obj.verify(KEY, 7, "a/c.png", token, now=1_000)
    assert not obj.verify(KEY, 7, "a/b.png", token, now=2_000_000_001)
    assert not obj.verify(obj.signing_key("other"), 7, "a/b.png", token, now=1_000)
    forged = "2100000000." + token.split(".", 1)[1]
    assert not obj.verify(KEY, 7, "a/b.png", forged, now=1_000)
    # other scripts' digits (int() refuses "²") and non-ASCII signatures (compare_digest
    # refuses them) are just wrong tokens, not errors
    for junk in (None, "", "abc", "x.y", "1." + "A" * 300, "\u00b2.AAAA", "\u0663\u0663.AAAA",
                 "2100000000.é" + token.split(".", 1)[1][1:]):
        assert not obj.verify(KEY, 7, "a/b.png", junk, now=1_000)


def test_rounded_expiries_are_stable_and_far_enough():
    a, b = obj.rounded_expiry(3600, now=10_000), obj.rounded_expiry(3600, now=10_030)
    assert a == b and a >= 10_030 + 3600


@pytest.mark.parametrize("head,declared,path,expected", [
    (b"\x89PNG\r\n\x1a\n....", None, "x", "image/png"),
    (b"\xff\xd8\xff\xe0", "application/octet-stream", "x", "image/jpeg"),
    (b"%PDF-1.7", "", "x.bin", "application/pdf"),
    (b"RIFF\x00\x00\x00\x00WEBPVP8", None, "x", "image/webp"),
    (b"hello", "text/markdown; charset=utf-8", "x", "text/markdown; charset=utf-8"),
    (b"hello", None, "notes.csv", "text/csv"),
    (b"hello world", None, "x", "text/plain; charset=utf-8"),
    (b"\x00\x01\x02", None, "x", "application/octet-stream"),
    (b"x", "not a type", "x.json", "application/json"),
])
def test_content_type_is_declared_sniffed_or_guessed(head, declared, path, expected):
    assert obj.sniff_content_type(head, declared, path) == expected


@pytest.mark.parametrize("url,expected", [
    ("http://h/storage/v1/object/public/5/a/b.png", ("5", "a/b.png")),
    ("http://h/storage/v1/object/sign/5/a%20b.pdf?token=1.x", ("5", "a b.pdf")),
    ("http://h/storage/v1/object/docs/a.txt", ("docs", "a.txt")),
    ("http://h/storage/v1/object/list/docs", None),
    ("http://other/storage/v1/object/docs/a.txt", None),
    ("https://example.com/x.png", None),
])
def test_own_object_urls_are_recognised(url, expected):
    assert obj.parse_own_url(url, "http://h") == expected


@pytest.mark.parametrize("name,ok", [
    ("docs", True), ("a.b-c_d", True), ("9lives", True), ("123", False), ("list", False), ("-x", False),
    ("a/b", False), ("", False), ("x" * 64, False),
])
def test_bucket_names(name, ok):
    if ok:
        assert obj.clean_bucket_name(name) == name
    else:
        with pytest.raises(ServiceError):
            obj.clean_bucket_name(name)
