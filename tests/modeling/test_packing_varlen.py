"""The padding-free route of GPU attention kernels: all texts of a batch in one row, boundaries from the host.

Flash attention (`cu_seq_lens`, no mask) cannot run on the CPU: its tests run transformers' own flash attention code
(`_flash_attention_forward`, its varlen branch) with the kernel replaced by SDPA per text, and check what the encoder
is given. Flex attention runs on the CPU, forward only (torch: "FlexAttention does not support backward on CPU"),
so its gradients are not tested here. The padded path (SDPA) is the reference throughout.
"""

from __future__ import annotations

import shutil

import pytest
import torch
import transformers.integrations.flex_attention as transformers_flex
import transformers.modeling_flash_attention_utils as flash_utils
from conftest import SENTENCES
from test_packing import PAIRS, TRIPLETS, _model
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from hf_siamese.losses import CosineSimilarityLoss
from hf_siamese.modeling.packing import (
    can_pack,
    document_block_mask,
    pack_for_encoder,
    pack_varlen,
    packed_route,
    unpack_states,
)
from hf_siamese.training.collator import SiamesePairCollator


def _varlen_kernel(calls: list[dict]):
    """Stands in for `flash_attn_varlen_func` (same signature): SDPA on each text between `cu_seqlens`."""

    def flash_attn_varlen_func(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
        causal=False,
    ):  # fmt: skip
        calls.append({"cu_seqlens": cu_seqlens_q, "max_seqlen": (max_seqlen_q, max_seqlen_k), "tokens": q.shape[0]})
        assert cu_seqlens_q is cu_seqlens_k and cu_seqlens_q.dtype == torch.int32
        bounds = cu_seqlens_q.tolist()
        out = []
        for start, end in zip(bounds[:-1], bounds[1:], strict=True):
            q_, k_, v_ = (x[start:end].transpose(0, 1) for x in (q, k, v))  # (heads, length, dim)
            out.append(
                torch.nn.functional.scaled_dot_product_attention(q_, k_, v_, scale=softmax_scale).transpose(0, 1)
            )
        return torch.cat(out)

    return flash_attn_varlen_func


@pytest.fixture
def flash_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """transformers' flash attention path with an SDPA varlen kernel: only the varlen function exists, so any other
    branch (padded flash, unpadding a 2-D mask) would fail."""
    calls: list[dict] = []
    kernel = _varlen_kernel(calls)
    functions = ((None, kernel, None, None, None), (flash_utils._lazy_define_process_function(kernel), dict))
    monkeypatch.setattr(flash_utils, "lazy_import_flash_attention", lambda *args, **kwargs: functions)
    return calls


@pytest.fixture
def eager_flex(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' flex attention with torch's uncompiled flex_attention (the same attention, unfused): compiling
    it takes ~30 s on this CPU. test_flex_packed_compiled runs the compiled kernel."""

    def uncompiled(query, key, value, training=False, **kwargs):
        return flex_attention(query, key, value, **kwargs)

    monkeypatch.setattr(transformers_flex, "compile_friendly_flex_attention", uncompiled)


def _embeddings(model, batch, attention: str, packing: bool, **extra) -> torch.Tensor:
    model.encoder.config._attn_implementation = attention
    model.packing = packing
    with torch.no_grad():
        return model(**batch, **extra).sentence_embedding


def _batch(tiny_tokenizer, rows) -> dict:
    batch = SiamesePairCollator(tiny_tokenizer)(rows)
    batch.pop("labels", None)
    return batch


def test_routes_by_attention_implementation() -> None:
    model = _model("bert", "sdpa")
    routes = {
        "sdpa": "block_mask",
        "eager": "block_mask",
        "flash_attention_2": "varlen",
        "flash_attention_3": "varlen",
        "kernels-community/flash-attn2": "varlen",
        "flex_attention": "flex",
        "paged|flash_attention_2": None,
        "some-other-kernel": None,
    }
    for attention, route in routes.items():
        model.encoder.config._attn_implementation = attention
        assert packed_route(model.encoder) == route, attention
        assert can_pack(model.encoder) == (route is not None), attention


def test_pack_varlen_by_hand() -> None:
    # Texts of 3, 1 and 2 tokens, right-padded to 4: one row of 6 tokens, in input order, nothing padded.
    input_ids = torch.tensor([[11, 12, 13, 0], [21, 0, 0, 0], [31, 32, 0, 0]])
    types = torch.tensor([[0, 0, 1, 0], [0, 0, 0, 0], [1, 1, 0, 0]])
    packed = pack_varlen(input_ids, [3, 1, 2], types, first_position=2)
    assert packed.input_ids.tolist() == [[11, 12, 13, 21, 31, 32]]
    assert packed.token_type_ids.tolist() == [[0, 0, 1, 0, 1, 1]]
    assert packed.position_ids.tolist() == [[2, 3, 4, 2, 2, 3]]
    assert packed.attention_mask is None
    kwargs = packed.attention_kwargs
    assert kwargs["cu_seq_lens_q"] is kwargs["cu_seq_lens_k"]
    assert kwargs["cu_seq_lens_q"].dtype == torch.int32 and kwargs["cu_seq_lens_q"].tolist() == [0, 3, 4, 6]
    assert kwargs["max_length_q"] == kwargs["max_length_k"] == 3 and type(kwargs["max_length_q"]) is int
    assert packed.text_mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert packed.padding_share == 0.0
    states = packed.input_ids.unsqueeze(-1).float()
    unpacked = unpack_states(states, packed).squeeze(-1) * packed.text_mask
    assert unpacked.tolist() == [[11, 12, 13], [21, 0, 0], [31, 32, 0]]


@pytest.mark.parametrize("lengths", [[3, 1, 2], [8, 8, 4, 9, 1, 2], [5] * 7, [1], [17, 3, 11, 4, 4, 9]])
@pytest.mark.parametrize("block_size", [4, 8, 128])
def test_document_block_mask_equals_create_block_mask(lengths: list[int], block_size: int) -> None:
    # The host-built block structure equals the one torch derives from the dense mask: same partial and full
    # blocks, same dense mask, and a mask_mod that is the block-diagonal mask.
    total = sum(lengths)
    document = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    expected = create_block_mask(
        lambda b, h, q, k: document[q] == document[k], None, None, total, total, device="cpu", BLOCK_SIZE=block_size
    )
    built = document_block_mask(lengths, torch.device("cpu"), block_size)
    assert built.seq_lengths == expected.seq_lengths == (total, total)
    assert built.shape == expected.shape
    for name in ("kv_num_blocks", "full_kv_num_blocks", "q_num_blocks", "full_q_num_blocks"):
        assert torch.equal(getattr(built, name), getattr(expected, name)), name
    assert torch.equal(built.to_dense(), expected.to_dense())
    q, k = torch.arange(total)[:, None], torch.arange(total)[None, :]
    assert torch.equal(built.mask_mod(0, 0, q, k), document[q] == document[k])


@pytest.mark.parametrize("route", ["varlen", "flex"])
def test_varlen_packing_reads_nothing_back_from_the_device(route: str) -> None:
    # On the meta device no value can be read: any .tolist() / .item() / bool() would raise. Given the lengths from
    # the host, the varlen and flex routes need none (the block-mask route reads the lengths from the mask).
    model = _model("bert", "sdpa")
    model.encoder.config._attn_implementation = "flash_attention_2" if route == "varlen" else "flex_attention"
    input_ids = torch.zeros(4, 9, dtype=torch.long, device="meta")
    mask = torch.ones(4, 9, dtype=torch.long, device="meta")
    packed = pack_for_encoder(model.encoder, input_ids, mask, input_ids, text_lengths=[[9, 2], [5, 7]])
    assert packed.input_ids.shape == packed.position_ids.shape == (1, 23)
    assert packed.gather.shape == packed.text_mask.shape == (4, 9)
    assert packed.input_ids.device.type == packed.gather.device.type == "meta"
    if route == "varlen":
        assert packed.attention_kwargs["cu_seq_lens_q"].device.type == "meta"
        assert packed.attention_kwargs["max_length_q"] == 9
    else:
        assert packed.attention_mask.kv_num_blocks.device.type == "meta"
        assert packed.attention_mask.seq_lengths == (23, 23)


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
@pytest.mark.parametrize("pooling", ["mean", "cls", "lasttoken"])
def test_flash_varlen_packed_equals_padded(tiny_tokenizer, flash_calls, model_type: str, pooling: str) -> None:
    model = _model(model_type, "sdpa", pooling=pooling)
    for rows in (PAIRS, TRIPLETS):
        batch = _batch(tiny_tokenizer, rows)
        lengths = batch["attention_mask"].sum(-1).reshape(-1).tolist()
        flash_calls.clear()
        packed = _embeddings(model, batch, "flash_attention_2", True)
        padded = _embeddings(model, batch, "sdpa", False)
        assert (packed - padded).abs().max() < 1e-5
        # Each of the 2 layers ran the varlen kernel once on one row of all texts, boundaries as given.
        assert len(flash_calls) == 2
        for call in flash_calls:
            assert call["tokens"] == sum(lengths)
            assert call["max_seqlen"] == (max(lengths), max(lengths))
            assert all(type(n) is int for n in call["max_seqlen"])
            assert call["cu_seqlens"].tolist() == torch.tensor([0, *lengths]).cumsum(0).tolist()


def test_flash_varlen_encoder_inputs_and_gradients(tiny_tokenizer, flash_calls) -> None:
    model = _model("bert", "sdpa")
    batch = SiamesePairCollator(tiny_tokenizer)(PAIRS)
    labels = batch.pop("labels")
    lengths = batch["attention_mask"].sum(-1).reshape(-1).tolist()
    seen: list[dict] = []
    hook = model.encoder.register_forward_pre_hook(lambda module, args, kwargs: seen.append(kwargs), with_kwargs=True)
    gradients = []
    for attention, packing in (("flash_attention_2", True), ("sdpa", False)):
        model.encoder.config._attn_implementation = attention
        model.packing = packing
        model.zero_grad()
        loss, _ = CosineSimilarityLoss(score_range=(0, 5)).compute(model, batch, labels)
        loss.backward()
        gradients.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    hook.remove()
    inputs = seen[0]  # the packed call: one row of all texts, no mask, boundaries as varlen arguments
    assert inputs["attention_mask"] is None
    assert inputs["input_ids"].shape == inputs["position_ids"].shape == (1, sum(lengths))
    assert inputs["cu_seq_lens_q"].tolist() == torch.tensor([0, *lengths]).cumsum(0).tolist()
    assert inputs["max_length_q"] == inputs["max_length_k"] == max(lengths)
    assert len(seen) == 3  # 1 packed call, then 2 padded columns
    assert gradients[0].keys() == gradients[1].keys()
    for name, grad in gradients[0].items():
        assert (grad - gradients[1][name]).abs().max() < 1e-6, name


@pytest.mark.parametrize("attention", ["flash_attention_2", "flex_attention"])
def test_host_lengths_spare_reading_the_mask(tiny_tokenizer, flash_calls, eager_flex, attention: str) -> None:
    # Given `text_lengths` (the collator computes them on the host), the forward never reads the attention mask: here
    # it lies on the meta device, where reading it would raise.
    model = _model("bert", "sdpa")
    batch = _batch(tiny_tokenizer, TRIPLETS)
    lengths = batch.pop("text_lengths")
    assert lengths == batch["attention_mask"].sum(-1).tolist()
    padded = _embeddings(model, batch, "sdpa", False)
    batch["attention_mask"] = batch["attention_mask"].to("meta")
    packed = _embeddings(model, batch, attention, True, text_lengths=lengths)
    assert (packed - padded).abs().max() < 1e-5


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
@pytest.mark.parametrize("pooling", ["mean", "cls", "max"])
def test_flex_packed_equals_padded(tiny_tokenizer, eager_flex, model_type: str, pooling: str) -> None:
    model = _model(model_type, "sdpa", pooling=pooling)
    seen: list[object] = []
    hook = model.encoder.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["attention_mask"]), with_kwargs=True
    )
    for rows in (PAIRS, TRIPLETS):
        batch = _batch(tiny_tokenizer, rows)
        packed = _embeddings(model, batch, "flex_attention", True)
        padded = _embeddings(model, batch, "sdpa", False)
        assert (packed - padded).abs().max() < 1e-5
    hook.remove()
    assert type(seen[0]).__name__ == "BlockMask"


def test_flex_packed_with_many_blocks(tiny_tokenizer, eager_flex) -> None:
    # 24 pairs: ~500 tokens in one row, 4 blocks of 128, texts crossing block edges.
    model = _model("bert", "sdpa")
    rows = [{"sentence1": SENTENCES[i % 5] * (1 + i % 3), "sentence2": SENTENCES[(i + 2) % 5]} for i in range(24)]
    batch = _batch(tiny_tokenizer, rows)
    assert batch["attention_mask"].sum() > 3 * 128
    packed = _embeddings(model, batch, "flex_attention", True)
    padded = _embeddings(model, batch, "sdpa", False)
    assert (packed - padded).abs().max() < 1e-5


@pytest.mark.slow
@pytest.mark.skipif(
    not (shutil.which("g++") or shutil.which("clang++")), reason="torch.compile on the CPU needs a C++ compiler"
)
def test_flex_packed_compiled(tiny_tokenizer) -> None:
    # transformers' own flex path, torch.compile'd (inductor's C++ kernel on the CPU): ~30 s to compile.
    model = _model("bert", "sdpa")
    batch = _batch(tiny_tokenizer, PAIRS)
    packed = _embeddings(model, batch, "flex_attention", True)
    padded = _embeddings(model, batch, "sdpa", False)
    assert (packed - padded).abs().max() < 1e-5
