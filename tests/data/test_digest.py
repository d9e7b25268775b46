"""TextDigest: one content fingerprint of texts, length-prefixed, so no two different row streams hash alike."""

from __future__ import annotations

from hf_siamese.data.digest import TextDigest


def digest_of(*rows: tuple) -> TextDigest:
    digest = TextDigest()
    for row in rows:
        digest.add(*row)
    return digest


def test_the_same_rows_hash_alike_and_other_contents_do_not() -> None:
    assert digest_of(("a", "b"), ("c",)).hexdigest() == digest_of(("a", "b"), ("c",)).hexdigest()
    assert digest_of(("ab",)).hexdigest() != digest_of(("a", "b")).hexdigest()  # no hashing by concatenation
    assert digest_of(("a", 1.0)).hexdigest() != digest_of(("a", 2.0)).hexdigest()
    assert digest_of(("x",), ("y",)).hexdigest() != digest_of(("y",), ("x",)).hexdigest()  # order counts


def test_describe_gives_the_count_and_a_short_hash() -> None:
    digest = digest_of(("a",), ("b",), ("\udc80 lone surrogate",))
    assert digest.count == 3
    assert digest.describe("texts") == f"3 texts, sha256 {digest.hexdigest()[:16]}"
