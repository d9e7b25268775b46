"""MultiVectorModel: a multi-vector (ColBERT-style late interaction) encoder. A text's vectors are its token states,
projected to `embedding_dim` and L2-normalised one by one; a query and a document score by MaxSim
(multivector_scoring.py).

This file is copied next to the weights when a model is saved (remote code), so it imports only its configuration,
its scoring, the encoding it shares with the sparse model (text_encoding.py), the CPU batch pool and the
low-precision encoding it shares with the dense model (batching.py, low_precision.py) and public libraries.

Which tokens keep a vector: a document's real tokens except those in the skiplist (punctuation); a query's real
tokens plus, with query expansion, its expansion tokens: the padding up to `query_expansion_length` is replaced by
[MASK] tokens that the encoder does not attend to (unless `query_expansion_attend`) but that still get vectors, which
MaxSim scores (ColBERT's query augmentation).
"""

from __future__ import annotations

import math
import string
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModel, PreTrainedModel
from transformers.utils import ModelOutput

from .batching import check_cpu_workers, run_batches
from .configuration_multivector import MULTIVECTOR_TASKS, MultiVectorConfig
from .low_precision import cpu_dtype, encode_runner
from .multivector_scoring import maxsim, maxsim_pairwise, pad_vectors
from .text_encoding import TextEncoding, checked_texts, evaluating, longest_first, used_width

PUNCTUATION = tuple(string.punctuation)  # ColBERT's document skiplist


@dataclass
class MultiVectorOutput(ModelOutput):
    """`token_embeddings`: `(batch, seq, dim)` token vectors (`(batch, num_texts, seq, dim)` for grouped inputs),
    at every position; `token_mask`: `(batch, seq)` (or `(batch, num_texts, seq)`) bool, the positions that keep a
    vector (MaxSim reads only those)."""

    token_embeddings: torch.FloatTensor | None = None
    token_mask: torch.BoolTensor | None = None


def skiplist_ids_of(tokenizer: Any, words: Iterable[str]) -> list[int]:
    """Token ids of `words` (each a single vocabulary token); words the tokenizer maps to its unknown token are left
    out, so a real [UNK] in a document is not dropped."""
    unk_id, unk_token = getattr(tokenizer, "unk_token_id", None), getattr(tokenizer, "unk_token", None)
    ids = set()
    for word in words:
        token_id = tokenizer.convert_tokens_to_ids(word)
        if token_id is None or (unk_id is not None and token_id == unk_id and word != unk_token):
            continue
        ids.add(int(token_id))
    return sorted(ids)


def _settle_attention(encoder: nn.Module, before: str | None) -> None:
    # PreTrainedModel.__init__ sets sub-configs' attention implementation and can leave the encoder's None; the
    # encoder would then mask nothing in padded batches. Keep what it had, else SDPA where supported, else eager.
    if getattr(encoder.config, "_attn_implementation", None) is None:
        encoder.config._attn_implementation = before or (
            "sdpa" if getattr(encoder, "_supports_sdpa", False) else "eager"
        )


class MultiVectorPreTrainedModel(TextEncoding, PreTrainedModel):
    config_class = MultiVectorConfig
    config: MultiVectorConfig
    base_model_prefix = "multivector"
    accepts_loss_kwargs = False
    supports_gradient_checkpointing = True
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        # The encoder is a PreTrainedModel and initialises itself; the projection starts as a new nn.Linear.
        from transformers import initialization as init

        if isinstance(module, nn.Linear):
            init.kaiming_uniform_(module.weight, a=math.sqrt(5))
            if module.bias is not None:
                init.zeros_(module.bias)


class MultiVectorModel(MultiVectorPreTrainedModel):
    """Encoder -> linear projection -> L2 normalisation per token (see the module docstring).

    Call it on `(batch, seq_len)` token ids with `task="query"` or `"document"` for token vectors and the mask of
    kept tokens, or on grouped `(batch, num_texts, seq_len)` inputs (the first text of each row a query, the others
    documents). `encode` tokenizes and batches; `similarity` scores by MaxSim.
    """

    def __init__(self, config: MultiVectorConfig, encoder: PreTrainedModel | None = None) -> None:
        encoder_attention = getattr(encoder.config, "_attn_implementation", None) if encoder is not None else None
        super().__init__(config)
        config.validate_multivector_fields()
        if encoder is None:
            encoder = AutoModel.from_config(config.encoder_config)
        config.encoder_config = encoder.config
        _settle_attention(encoder, encoder_attention)
        if getattr(encoder, "pooler", None) is not None:  # BERT's sentence pooler: unused by token vectors
            encoder.pooler = None
        self.encoder = encoder
        self.projection = nn.Linear(config.hidden_size_of_encoder, config.embedding_dim, bias=config.projection_bias)
        self.tokenizer = None
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.encoder.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.encoder.set_input_embeddings(value)

    # ------------------------------------------------------------------------------------------------ forward

    def kept_tokens(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        task: str,
        expansion_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The bool mask of positions that keep a vector: the real tokens, plus a query's expansion tokens
        (`expansion_mask`, else the expansion token id within the expansion length), less skiplist tokens in the
        tasks the skiplist applies to."""
        config = self.config
        kept = attention_mask.bool()
        if task == "query" and config.query_expansion is not None:
            if expansion_mask is None and config.query_expansion_token_id is not None:
                positions = torch.arange(input_ids.shape[-1], device=input_ids.device)
                expansion_mask = (input_ids == config.query_expansion_token_id) & (
                    positions < config.query_expansion_length
                )
            if expansion_mask is not None:
                kept = kept | expansion_mask.bool()
        if task in config.skiplist_tasks and config.skiplist_ids:
            skip = torch.tensor(config.skiplist_ids, dtype=input_ids.dtype, device=input_ids.device)
            kept = kept & ~torch.isin(input_ids, skip)
        return kept

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        task: str = "document",
        expansion_mask: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> MultiVectorOutput:
        """Token vectors of `(batch, seq_len)` inputs -> `(batch, seq_len, dim)` and the `(batch, seq_len)` mask of
        kept tokens, for `task` "query" or "document" (the skiplist and query expansion differ).

        Grouped inputs `(batch, num_texts, seq_len)` (the training collator's rows: query, positive[, negatives])
        give `(batch, num_texts, seq_len, dim)`: the first text of each row as a query, the others as documents."""
        if task not in MULTIVECTOR_TASKS:
            raise ValueError(f"forward: task={task!r}; accepted: {', '.join(MULTIVECTOR_TASKS)}")
        kwargs.pop("text_lengths", None)  # the collator's host lengths, for packed encoders; this one runs padded
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if input_ids.dim() == 3:
            return self._grouped(input_ids, attention_mask, token_type_ids, **kwargs)
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, **kwargs}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        states = self.encoder(**inputs, return_dict=True).last_hidden_state
        vectors = self.projection(states)
        if self.config.normalize:
            vectors = F.normalize(vectors, p=2, dim=-1)
        mask = self.kept_tokens(input_ids, attention_mask, task, expansion_mask)
        return MultiVectorOutput(token_embeddings=vectors, token_mask=mask)

    def _grouped(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None, **kwargs: Any
    ) -> MultiVectorOutput:
        batch, texts, length = input_ids.shape
        column = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        query = self._cut(**{k: v[:, 0] if v is not None else None for k, v in column.items()}, task="query", **kwargs)
        vectors, masks = [query.token_embeddings[:, None]], [query.token_mask[:, None]]
        if texts > 1:
            rest = {k: v[:, 1:].reshape(-1, length) if v is not None else None for k, v in column.items()}
            documents = self._cut(**rest, task="document", **kwargs)
            vectors.append(documents.token_embeddings.view(batch, texts - 1, length, -1))
            masks.append(documents.token_mask.view(batch, texts - 1, length))
        return MultiVectorOutput(token_embeddings=torch.cat(vectors, dim=1), token_mask=torch.cat(masks, dim=1))

    def _cut(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None, task: str,
        **kwargs: Any,
    ) -> MultiVectorOutput:  # fmt: skip
        """`forward` of `(batch, length)` texts run at their own width (the collator pads a batch's queries to its
        documents' length: a 32-token query ran at 256), the outputs padded back to `length` (masked out)."""
        length = input_ids.shape[1]
        width = used_width(input_ids, attention_mask, getattr(self.encoder.config, "pad_token_id", None))
        cut = {"input_ids": input_ids[:, :width], "attention_mask": attention_mask[:, :width]}
        if token_type_ids is not None:
            cut["token_type_ids"] = token_type_ids[:, :width]
        output = self(**cut, task=task, **kwargs)
        if width == length:
            return output
        return MultiVectorOutput(
            token_embeddings=F.pad(output.token_embeddings, (0, 0, 0, length - width)),
            token_mask=F.pad(output.token_mask, (0, length - width), value=False),
        )

    # ------------------------------------------------------------------------------------------------ encoding

    def _expansion_token_id(self, tokenizer: Any) -> int:
        own = self.config.query_expansion_token_id
        for candidate in (own, getattr(tokenizer, "mask_token_id", None), getattr(tokenizer, "eos_token_id", None)):
            if candidate is not None:
                return int(candidate)
        raise ValueError(
            "query expansion: the tokenizer has neither a mask token nor an end token; set "
            "config.query_expansion_token_id to the token to expand queries with"
        )

    def tokenize(self, texts: Sequence[str], tokenizer: Any = None, task: str = "document") -> dict[str, torch.Tensor]:
        """Token ids of `texts` as `task` (no prompt added): cut to the task's length; queries with query expansion
        widened to the expansion length with expansion tokens (`expansion_mask` marks them)."""
        if task not in MULTIVECTOR_TASKS:
            raise ValueError(f"tokenize: task={task!r}; accepted: {', '.join(MULTIVECTOR_TASKS)}")
        tokenizer = self._resolve_tokenizer(tokenizer)
        config, limit = self.config, self._token_limit(tokenizer)
        own = config.query_length if task == "query" else config.document_length
        length = min(own, self.config.effective_max_seq_length) if own else limit
        expansion = config.query_expansion if task == "query" else None
        floor = config.query_expansion_length
        settings: dict[str, Any] = {"padding": True, "truncation": True, "max_length": length}
        if expansion == "fixed":
            settings = {"padding": "max_length", "truncation": True, "max_length": floor}
        elif expansion == "min":
            settings["max_length"] = max(length, floor)
        tokens = dict(tokenizer(list(texts), return_tensors="pt", **settings))
        if expansion is None:
            return tokens
        ids, attention = tokens["input_ids"], tokens["attention_mask"]
        if ids.shape[1] < floor:  # "min": a batch shorter than the expansion length is widened to it
            tokens = {k: F.pad(v, (0, floor - v.shape[1]), value=0) for k, v in tokens.items()}
            ids, attention = tokens["input_ids"], tokens["attention_mask"]
        positions = (attention == 0) & (torch.arange(ids.shape[1]) < floor)
        tokens["input_ids"] = ids.masked_fill(positions, self._expansion_token_id(tokenizer))
        if config.query_expansion_attend:
            tokens["attention_mask"] = attention.masked_fill(positions, 1)
        tokens["expansion_mask"] = positions
        return tokens

    @torch.no_grad()
    def encode(
        self,
        texts: str | Sequence[str],
        tokenizer: Any = None,
        *,
        task: str = "document",
        batch_size: int = 32,
        padded: bool = False,
        prompt: str | None = None,
        cpu_workers: int | None = None,
        dtype: torch.dtype | None = None,
    ) -> torch.Tensor | list[torch.Tensor] | tuple[torch.Tensor, torch.Tensor]:
        """Token vectors of `texts` as `task` ("query" or "document"; the config's prompt for it is put first unless
        `prompt` is given), float32 on the CPU.

        `cpu_workers`: on the CPU, batches run this many at a time, each on one thread (`batching.run_batches`, as
        the dense model's encode runs sentences: 1.3x there). Default 1, one batch at a time on all threads: for
        SciFact abstracts (210 tokens a text) two workers measured 1.05x the documents/s and 0.97x the queries/s on 2
        cores, at 1.45x the peak memory (benchmarks/RESULTS.md). The thread setting is restored afterwards. Ignored on
        other devices.

        `dtype`: run the encoder in this dtype (`torch.bfloat16`; `torch.float16` on a GPU), as the dense model's
        encode does (`low_precision.encode_runner`: a copy of the weights in `dtype` from a few batches on, else
        autocast; float32 on a CPU that only emulates it); the vectors come back float32. On a CPU with AMX,
        bfloat16 measured 2.6x float32's documents/s on SciFact abstracts, the token vectors within cosine 0.9998.

        Returns a list of `(n_kept_tokens, dim)` tensors, one per text (one string: its tensor); with `padded=True`
        a tuple `(vectors (n, max_kept, dim), mask (n, max_kept))` instead: the kept vectors left-aligned, zeros
        after them, `mask` True at the real rows."""
        single, items = checked_texts(texts, task, MULTIVECTOR_TASKS, batch_size)
        check_cpu_workers(cpu_workers)
        tokenizer = self._resolve_tokenizer(tokenizer)
        prefix = self._task_prompt(task, prompt)
        device = next(self.parameters()).device
        batches = longest_first(items, batch_size)
        workers = min(cpu_workers or 1, len(batches)) if device.type == "cpu" else 1
        dtype = cpu_dtype(dtype, device)
        runner, use_autocast = encode_runner(self, dtype, len(batches), streamed=False)
        # A fast tokenizer sets its padding and truncation on shared state per call: one batch tokenizes at a time
        # (the others' forward passes run meanwhile).
        tokenizing = threading.Lock()

        def embed(chosen: list[int]) -> list[torch.Tensor]:
            with tokenizing:
                tokens = self.tokenize([prefix + items[i] for i in chosen], tokenizer, task)
            # grad mode and autocast are per thread: set them in the thread that runs the batch
            with torch.no_grad(), torch.autocast(device.type, dtype=dtype, enabled=use_autocast):
                output = runner(**{k: v.to(device) for k, v in tokens.items()}, task=task)
            vectors, kept = output.token_embeddings, output.token_mask
            return [vectors[row][kept[row]].float().cpu() for row in range(len(chosen))]

        with evaluating(self):
            positions, results = run_batches(embed, ((chosen, chosen) for chosen in batches), max(1, workers))
        found: list[torch.Tensor | None] = [None] * len(items)
        for chosen, rows in zip(positions, results, strict=True):
            for index, vector in zip(chosen, rows, strict=True):
                found[index] = vector
        vectors = [v for v in found if v is not None]
        if padded:
            if not vectors:
                return torch.zeros(0, 0, self.config.embedding_dim), torch.zeros(0, 0, dtype=torch.bool)
            return pad_vectors(vectors)
        return vectors[0] if single else vectors

    def similarity(
        self,
        queries: torch.Tensor | Sequence[torch.Tensor],
        documents: torch.Tensor | Sequence[torch.Tensor],
        query_mask: torch.Tensor | None = None,
        document_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`(n_queries, n_documents)` scores by the config's similarity (MaxSim, or MeanMaxSim) of token vectors as
        `encode` gives them: lists of `(n_tokens, dim)` tensors, or padded `(n, tokens, dim)` tensors with masks."""
        return maxsim(queries, query_mask, documents, document_mask, length_normalize=self._mean_maxsim)

    def similarity_pairwise(
        self,
        queries: torch.Tensor | Sequence[torch.Tensor],
        documents: torch.Tensor | Sequence[torch.Tensor],
        query_mask: torch.Tensor | None = None,
        document_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`(n,)` scores of matched pairs (query i with document i), forms as `similarity`."""
        return maxsim_pairwise(queries, query_mask, documents, document_mask, length_normalize=self._mean_maxsim)

    @property
    def _mean_maxsim(self) -> bool:
        """Whether the config scores by MeanMaxSim (MaxSim over the query's kept tokens) rather than MaxSim."""
        return self.config.similarity == "meanmaxsim"

    # ------------------------------------------------------------------------------------------------ building

    @classmethod
    def from_encoder(
        cls,
        path: str,
        dim: int = 128,
        *,
        query_length: int | None = 32,
        document_length: int | None = None,
        query_expansion: str | None = "fixed",
        query_expansion_length: int = 32,
        skiplist: Iterable[str] = PUNCTUATION,
        prompts: dict[str, str] | None = None,
        normalize: bool = True,
        similarity: str = "maxsim",
        max_seq_length: int | None = None,
        **kwargs: Any,
    ) -> MultiVectorModel:
        """A multi-vector model around an encoder checkpoint (Hub id or folder: a plain transformers or a
        sentence-transformers one such as all-MiniLM-L6-v2) with a new `dim`-wide projection (random, as
        sentence-transformers starts one: its vectors mean little before training). ColBERT's defaults: queries
        expanded to 32 tokens with [MASK], punctuation skipped in documents. `kwargs` go to
        `AutoModel.from_pretrained`."""
        from transformers import AutoTokenizer

        encoder = AutoModel.from_pretrained(path, **kwargs)
        inner = getattr(encoder, "encoder", None)
        if isinstance(inner, PreTrainedModel):  # a hf-siamese model's folder: its encoder
            encoder = inner
        tokenizer = AutoTokenizer.from_pretrained(path)
        config = MultiVectorConfig(
            encoder_config=encoder.config, embedding_dim=dim, normalize=normalize, prompts=dict(prompts or {}),
            query_length=query_length, document_length=document_length, max_seq_length=max_seq_length,
            query_expansion=query_expansion, query_expansion_length=query_expansion_length,
            query_expansion_token_id=getattr(tokenizer, "mask_token_id", None) if query_expansion else None,
            skiplist_ids=skiplist_ids_of(tokenizer, skiplist), similarity=similarity,
        )  # fmt: skip
        model = cls(config, encoder=encoder)
        model.projection.reset_parameters()
        if model.projection.bias is not None:
            nn.init.zeros_(model.projection.bias)
        model.tokenizer = tokenizer
        model.config.name_or_path = str(path)
        return model

    def save_pretrained(self, save_directory: Any, tokenizer: Any = None, **kwargs: Any) -> None:
        """`PreTrainedModel.save_pretrained` (config, safetensors weights, the remote code), and `tokenizer`
        (default `model.tokenizer`) beside them, so the folder encodes on its own."""
        super().save_pretrained(save_directory, **kwargs)
        tokenizer = tokenizer if tokenizer is not None else self.tokenizer
        if tokenizer is not None:
            tokenizer.save_pretrained(save_directory)


__all__ = ["MultiVectorModel", "MultiVectorOutput", "PUNCTUATION", "skiplist_ids_of"]
