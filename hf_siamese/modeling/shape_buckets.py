"""Few shapes for packed batches: the token count of a packed batch rounded up to one of a small set of sizes.

A packed batch (packing.py) has as many tokens as its texts: a new size nearly every step. A step compiled for fixed
shapes (`torch.compile` with static shapes, and above all CUDA graphs, which replay one recorded shape) would then
compile or record again every step. With buckets the packed row's length is the smallest bucket at or above the real
token count: geometric sizes, `per_octave` of them between each power of two, each a multiple of `multiple`, so the
padding added is at most 1 - 2**(-1/per_octave) of the row (4.2% with the default 16 an octave; about half that on
average: 2.4% on SciFact's (title, abstract) batches of 64 at 256 tokens, in 4 sizes) and a run over one data set meets
a handful of sizes.

The padding is laid out so that no real token sees it and the shapes depend on the bucket alone:
- the varlen route (one row): the padding forms `pad_segments(bucket)` segments of its own at the row's end (each at
  most `text_tokens` long, some possibly empty), so the kernel's segment count and its longest segment
  (`text_tokens`) are the same for every batch of that bucket and text count;
- the block-mask route (rows of `capacity` tokens): the capacity is `text_tokens` and the number of rows is bucketed
  too (whole rows of padding, each its own block).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def bucket_value(n: int, per_octave: int = 16, multiple: int = 64) -> int:
    """The smallest size >= `n` of the form ceil(multiple * 2 ** (k / per_octave)) rounded up to `multiple`, k >= 0."""
    if n <= multiple:
        return multiple
    k = max(0, math.floor(per_octave * math.log2(n / multiple)) - 1)
    while True:
        value = _size(k, per_octave, multiple)
        if value >= n:
            return value
        k += 1


def previous_bucket(value: int, per_octave: int = 16, multiple: int = 64) -> int:
    """The largest bucket below `value` (0 below the smallest): totals in (previous, value] go to `value`."""
    below, k = 0, 0
    while (size := _size(k, per_octave, multiple)) < value:
        below, k = size, k + 1
    return below


def _size(k: int, per_octave: int, multiple: int) -> int:
    return multiple * math.ceil(2 ** (k / per_octave) - 1e-12)


@dataclass(frozen=True)
class ShapeBuckets:
    """How packed batches are rounded up to few shapes.

    Attributes:
        text_tokens: the most tokens a text can have (the collator's limit): the varlen kernel's longest segment and
            the block-mask route's row capacity, the same for every batch.
        per_octave: bucket sizes between each power of two (more: less padding, more shapes).
        multiple: every bucket is a multiple of this many tokens.
    """

    text_tokens: int
    per_octave: int = 16
    multiple: int = 64

    def __post_init__(self) -> None:
        for name in ("text_tokens", "per_octave", "multiple"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ShapeBuckets: {name}={value!r} must be a positive whole number.")

    def tokens(self, total: int) -> int:
        """The packed row's length for `total` real tokens."""
        return bucket_value(total, self.per_octave, self.multiple)

    def rows(self, rows: int) -> int:
        """The number of rows of the block-mask route for `rows` filled rows."""
        return bucket_value(rows, self.per_octave, 1)

    def pad_segments(self, bucket: int, total: int) -> list[int]:
        """The lengths of the padding segments that fill a row of `bucket` tokens holding `total` real ones: always
        the same number for a bucket (enough for its largest padding), each at most `text_tokens`, spread evenly."""
        pad = bucket - total
        if pad < 0:
            raise ValueError(f"ShapeBuckets: {total} tokens do not fit a row of {bucket}.")
        widest = bucket - previous_bucket(bucket, self.per_octave, self.multiple)
        count = max(1, math.ceil(widest / self.text_tokens), math.ceil(pad / self.text_tokens))
        return [pad // count + (1 if i < pad % count else 0) for i in range(count)]
