"""MatryoshkaLoss against hand computations, and `truncate_dim` through save, AutoModel, remote code and
sentence-transformers."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import SENTENCES, make_tiny_model
from helpers import BLOCKED_IMPORT, run_isolated
from test_cached_mnr import chunked_embeddings, gradients, random_batch
from transformers import AutoModel

from hf_siamese import SiameseBertConfig, SiameseBertOutput
from hf_siamese.losses import (
    CachedMultipleNegativesRankingLoss,
    CosineSimilarityLoss,
    MatryoshkaLoss,
    MultipleNegativesRankingLoss,
    SoftmaxLoss,
)

DIMS, WEIGHTS = [32, 16, 8], [1.0, 0.5, 0.25]


def test_mnr_sum_by_hand() -> None:
    torch.manual_seed(0)
    embeddings = torch.randn(6, 3, 32)
    loss = MatryoshkaLoss(MultipleNegativesRankingLoss(scale=20), DIMS, WEIGHTS)(
        SiameseBertOutput(sentence_embedding=embeddings), None
    )
    expected = 0.0
    for dim, weight in zip(DIMS, WEIGHTS, strict=True):
        anchors = F.normalize(embeddings[:, 0, :dim], dim=-1)
        candidates = F.normalize(torch.cat([embeddings[:, 1, :dim], embeddings[:, 2, :dim]]), dim=-1)
        expected += weight * F.cross_entropy(20 * anchors @ candidates.T, torch.arange(6))
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_cosine_sum_by_hand_with_the_model(tiny_tokenizer) -> None:
    model = make_tiny_model(normalize=True, similarity="dot")
    batch = tiny_tokenizer(SENTENCES[:4] + SENTENCES[1:5], padding=True, return_tensors="pt")
    inputs = {k: v.reshape(2, 4, -1).transpose(0, 1) for k, v in batch.items()}
    labels = torch.tensor([0.9, 0.2, 0.5, 0.7])
    loss, output = MatryoshkaLoss(CosineSimilarityLoss(), DIMS, WEIGHTS).compute(model, inputs, labels)
    full = output.sentence_embedding
    expected = 0.0
    for dim, weight in zip(DIMS, WEIGHTS, strict=True):
        u, v = F.normalize(full[:, 0, :dim], dim=-1), F.normalize(full[:, 1, :dim], dim=-1)  # the model normalizes
        expected += weight * ((u * v).sum(-1) - labels).pow(2).mean()  # dot: the model's similarity
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_around_cached_mnr_equals_around_plain_mnr() -> None:
    """The sum over dims taken on the cached embeddings: the gradient of Matryoshka(plain MNR) on the same chunks."""
    model = make_tiny_model(seed=0).train()
    batch = random_batch(3)
    torch.manual_seed(4)
    embeddings = chunked_embeddings(model, batch, 3)
    plain = MatryoshkaLoss(MultipleNegativesRankingLoss(), DIMS, WEIGHTS)(
        SiameseBertOutput(sentence_embedding=embeddings), None, model
    )
    plain.backward()
    reference = gradients(model)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(4)
    cached = MatryoshkaLoss(CachedMultipleNegativesRankingLoss(mini_batch_size=3), DIMS, WEIGHTS)
    loss, _ = cached.compute(model, batch, None)
    loss.backward()
    assert loss.item() == pytest.approx(plain.item(), rel=1e-6)
    assert (gradients(model) - reference).abs().max().item() < 1e-5  # float32, as for cached vs plain MNR


def test_bad_matryoshka_arguments() -> None:
    with pytest.raises(ValueError, match=r"cannot wrap SoftmaxLoss: its classifier head"):
        MatryoshkaLoss(SoftmaxLoss(), DIMS)
    with pytest.raises(ValueError, match=r"dims=\[16, 16\] must be distinct positive ints"):
        MatryoshkaLoss("mnr", [16, 16])
    with pytest.raises(ValueError, match=r"weights=\[1.0\] must be 3 positive numbers"):
        MatryoshkaLoss("mnr", DIMS, [1.0])
    with pytest.raises(ValueError, match=r"dims \[64\] exceed the model's embedding size 32"):
        MatryoshkaLoss("mnr", [64, 16])(SiameseBertOutput(sentence_embedding=torch.randn(4, 2, 32)), None)


def test_truncate_dim_everywhere(tmp_path: Path, tiny_tokenizer) -> None:
    model = make_tiny_model(normalize=True)
    full = model.encode(SENTENCES, tokenizer=tiny_tokenizer)
    expected = F.normalize(full[:, :8], dim=-1)

    model.config.truncate_dim = 8
    assert torch.allclose(model.encode(SENTENCES, tokenizer=tiny_tokenizer), expected, atol=1e-6)
    model.save_pretrained(tmp_path / "saved", tokenizer=tiny_tokenizer)
    reloaded = AutoModel.from_pretrained(tmp_path / "saved")
    assert reloaded.config.truncate_dim == 8
    assert torch.allclose(reloaded.encode(SENTENCES), expected, atol=1e-6)

    model.config.truncate_dim = None
    model.save_pretrained(tmp_path / "full", tokenizer=tiny_tokenizer)
    at_load = AutoModel.from_pretrained(tmp_path / "full", truncate_dim=8)  # set when loading
    assert torch.allclose(at_load.encode(SENTENCES), expected, atol=1e-6)
    assert AutoModel.from_pretrained(tmp_path / "full").encode(SENTENCES).shape == (len(SENTENCES), 32)

    st = pytest.importorskip("sentence_transformers")
    their = st.SentenceTransformer(str(tmp_path / "saved"), device="cpu").encode(SENTENCES, convert_to_tensor=True)
    assert torch.allclose(their, expected, atol=1e-5)  # the cut is written as an identity-slice Dense layer

    torch.save(expected, tmp_path / "expected.pt")
    script = BLOCKED_IMPORT + textwrap.dedent(
        f"""
        import torch
        from transformers import AutoModel
        for path, kwargs in (({str(tmp_path / "saved")!r}, {{}}), ({str(tmp_path / "full")!r}, {{"truncate_dim": 8}})):
            model = AutoModel.from_pretrained(path, trust_remote_code=True, **kwargs)
            got = model.encode({SENTENCES!r})
            print("MAXDIFF", float((got - torch.load({str(tmp_path / "expected.pt")!r})).abs().max()))
        """
    )
    output = run_isolated(script, tmp_path)
    diffs = [float(line.split()[1]) for line in output.splitlines() if line.startswith("MAXDIFF")]
    assert len(diffs) == 2 and max(diffs) < 1e-6, output


def test_bad_truncate_dim() -> None:
    encoder = make_tiny_model().config.encoder_config
    with pytest.raises(ValueError, match=r"truncate_dim=64 must be an int from 1 to the embedding size 32"):
        SiameseBertConfig(encoder_config=encoder, truncate_dim=64)
    with pytest.raises(ValueError, match=r"truncate_dim=8 with a classifier head"):
        SiameseBertConfig(encoder_config=encoder, truncate_dim=8, num_labels=3)
