"""ETags: a digest of the body, the same whether remembered or worked out again."""

from __future__ import annotations

import hashlib

import pytest

from buildreport.http.responses import REMEMBERED_ETAG_BYTES, etag_of, json_answer


@pytest.mark.parametrize("size", [0, 1, REMEMBERED_ETAG_BYTES, REMEMBERED_ETAG_BYTES + 1, 100_000])
def test_an_etag_is_the_sha1_of_the_body_at_every_size(size):
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    expected = '"' + hashlib.sha1(body).hexdigest() + '"'
    assert etag_of(body) == expected
    assert etag_of(bytes(body)) == expected  # asked again, with equal bytes in another object


def test_a_remembered_etag_follows_the_body_when_it_changes():
    first, second = b'{"build_id":1,"status":"built"}', b'{"build_id":1,"status":"failed"}'
    assert etag_of(first) != etag_of(second)
    assert etag_of(first) == etag_of(b'{"build_id":1,"status":"built"}')


def test_if_none_match_with_the_remembered_etag_answers_304():
    body = b'{"build_id":7}'
    status, _, _ = json_answer([(b"if-none-match", etag_of(body).encode())], body)
    assert status == 304
    status, headers, sent = json_answer([(b"if-none-match", b'"other"')], body)
    assert (status, sent) == (200, body)
    assert (b"etag", etag_of(body).encode()) in headers
