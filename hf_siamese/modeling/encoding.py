"""`encode()` for `SiameseBertModel`: tokenize once, sort by length, batch, run the batches (one per CPU core on the
CPU), put the embeddings back in input order; prompts. A mixin, so the modeling file stays readable; it is copied
next to the weights with the modeling file (remote code).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from transformers import AutoTokenizer

from .batching import SortedBatches, StreamedBatches, check_cpu_workers, run_batches
from .devices import resolve_device
from .low_precision import cpu_dtype, encode_runner
from .short_attention import short_attention

logger = logging.getLogger(__name__)

# Where `save_pretrained` puts the encoder (config, weights, tokenizer) in the sentence-transformers layout.
ENCODER_FOLDER = "0_Transformer"


def streams_batches(device: torch.device) -> bool:
    """Whether encode() makes batches in a background thread while `device` runs (accelerators: yes; the CPU: no,
    the thread would compete with the forward passes for the same cores)."""
    return device.type != "cpu"


class SiameseEncodingMixin:
    """Inference methods of `SiameseBertModel` (which provides `config`, `tokenizer`, `device` and `forward`)."""

    def _resolve_tokenizer(self, tokenizer: Any) -> Any:
        if tokenizer is not None:
            return tokenizer
        if self.tokenizer is None:
            source = self.config.name_or_path
            if not source:
                raise ValueError(
                    "encode() needs a tokenizer: pass tokenizer=AutoTokenizer.from_pretrained(...), or set "
                    "model.tokenizer, or load the model from a folder or Hub id that holds the tokenizer files."
                )
            # Running as Hub remote code means the user already trusted this repository; without that flag
            # AutoTokenizer would stop at a trust prompt because config.json names our remote config class.
            trusted = type(self).__module__.startswith("transformers_modules") or None
            try:
                self.tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trusted)
            except (OSError, ValueError, KeyError):
                # A folder saved without a tokenizer at its root may still hold one with its encoder.
                try:
                    self.tokenizer = AutoTokenizer.from_pretrained(source, subfolder=ENCODER_FOLDER)
                except (OSError, ValueError, KeyError):
                    raise ValueError(
                        f"encode() found no tokenizer in {source!r} (nor in its {ENCODER_FOLDER}/ folder): pass "
                        "tokenizer=AutoTokenizer.from_pretrained(...) or set model.tokenizer."
                    ) from None
        return self.tokenizer

    @torch.inference_mode()
    def encode(
        self,
        texts: str | Sequence[str],
        tokenizer: Any = None,
        batch_size: int = 64,
        show_progress_bar: bool = False,
        convert_to_numpy: bool = False,
        max_length: int | None = None,
        dtype: torch.dtype | None = None,
        device: str | torch.device | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
        cpu_workers: int | None = None,
    ) -> torch.Tensor | np.ndarray:
        """Embed texts for inference.

        Texts are tokenized once, sorted by length and batched so that each batch pads only to its own longest text;
        results come back in the input order. No gradients are kept.

        Args:
            texts: a string or a sequence of strings (an empty string is fine; `None` is not).
            tokenizer: the encoder's tokenizer; defaults to `model.tokenizer` or the one saved with the model.
            batch_size: texts per forward pass (64: the fastest measured here on the CPU, in bf16 and float32).
            show_progress_bar: show a tqdm bar over batches.
            convert_to_numpy: return a float32 `np.ndarray` instead of a tensor on the CPU.
            max_length: truncate to this many tokens; defaults to `config.max_seq_length`.
            dtype: run the encoder in this dtype (`torch.bfloat16`, `torch.float16`): with `LOW_PRECISION_COPY`
                batches or more (on the CPU: bfloat16 only) a copy of the weights in `dtype` runs them (faster than
                autocast; the copy, half the size of the weights, is kept on the device for later calls until a
                weight changes), else autocast. On a CPU that only emulates the dtype (no AVX512-BF16/AMX for
                bfloat16), float32 instead, with a warning.
            device: where to run (`"cuda"`, `"cuda:1"`, `"cpu"`, `"mps"`, or `"auto"`: see `resolve_device`);
                defaults to the model's device. The model is moved there and stays there.
            prompt_name: put the prompt `config.prompts[prompt_name]` before each text (e.g. `"query"`). Defaults to
                `config.default_prompt_name`, if the model has one.
            prompt: a prompt text to put before each text instead (wins over `prompt_name`; `""` for none).
            cpu_workers: on the CPU, batches run this many at a time, each on one thread, instead of one at a time
                on all threads: sentence-sized matmuls split badly across cores (measured here: 1.3x the texts/s on
                2 cores). Defaults to `torch.get_num_threads()`; 1 runs one batch at a time on all threads. The
                thread setting is restored afterwards. Ignored on other devices.

        Returns:
            `(len(texts), hidden)` embeddings, or `(hidden,)` for a single string.
        """
        texts, single = checked_texts(texts, batch_size)
        check_cpu_workers(cpu_workers)
        prompt = self.resolve_prompt(prompt_name, prompt)
        if len(texts) == 0:
            empty = torch.empty(0, self.config.embedding_size)
            return empty.numpy() if convert_to_numpy else empty

        tokenizer = self._resolve_tokenizer(tokenizer)
        max_length = max_length or self.config.effective_max_seq_length
        device = self._encode_device(device)
        # Repeated texts (common in pair datasets) are encoded once.
        unique = list(dict.fromkeys(texts))
        inputs = [self.prepare_text(text, prompt) for text in unique]
        prompt_length = prompt_token_count(tokenizer, self.prepare_text("", prompt)) if prompt else None
        # On an accelerator, batches are made in a background thread while the device runs the previous ones (the
        # tokenizer, not the GPU, bounded speed when it ran first); on the CPU they share the cores, so all are made
        # first, sorted by exact token length.
        streamed = streams_batches(device)
        if streamed:
            source = StreamedBatches(inputs, tokenizer, max_length, batch_size, pin_memory=device.type == "cuda")
        else:
            source = SortedBatches(inputs, tokenizer, max_length, batch_size)

        workers = cpu_workers if cpu_workers is not None else torch.get_num_threads()
        workers = min(workers, len(source)) if not streamed else 1
        dtype = cpu_dtype(dtype, device)
        runner, use_autocast = encode_runner(self, dtype, len(source), streamed)

        def embed(batch: dict[str, torch.Tensor]) -> torch.Tensor:
            # Autocast and no_grad are per thread: set them in the thread that runs the batch.
            with torch.no_grad(), torch.autocast(device_type=device.type, dtype=dtype, enabled=use_autocast):
                batch = {k: v.to(device, non_blocking=streamed) for k, v in batch.items()}
                # Results stay on the device until all batches ran: one copy back, no sync per batch.
                return runner(**batch, prompt_length=prompt_length).sentence_embedding.float()

        # On the CPU, short batches run attention key-major (short_attention.py: 2-5x faster than sdpa there).
        fast_attention = short_attention(runner.encoder) if device.type == "cpu" else contextlib.nullcontext()
        positions, chunks = self._run_in_eval_mode(embed, source, workers, fast_attention, show_progress_bar)
        self._warn_truncated(texts, unique, inputs, source.truncated, max_length)
        embeddings = in_input_order(positions, chunks, texts, unique, single)
        return embeddings.numpy() if convert_to_numpy else embeddings

    def _encode_device(self, device: str | torch.device | None) -> torch.device:
        """The device encode() runs on: the model's, or `device` (resolved), where the model moves (and stays):
        inputs and weights must share one device."""
        if device is None:
            return self.device
        device = resolve_device(device)
        if device.type != self.device.type or (device.index is not None and device != self.device):
            self.to(device)
        return device

    def _run_in_eval_mode(
        self, embed: Any, source: Any, workers: int, fast_attention: Any, show_progress_bar: bool
    ) -> tuple[list, list]:
        """`run_batches` (batching.py) with the model in eval mode and `fast_attention` on, a progress bar if asked;
        the training mode and torch's thread count are restored afterwards, whatever happens."""
        was_training = self.training
        self.eval()
        progress = None
        if show_progress_bar:
            from tqdm.auto import tqdm

            progress = tqdm(total=len(source), desc="Encoding", unit="batch")
        try:
            with fast_attention:
                return run_batches(embed, source, workers, progress)
        finally:
            self.train(was_training)
            if progress is not None:
                progress.close()

    @staticmethod
    def _warn_truncated(
        texts: Sequence[str], unique: Sequence[str], inputs: Sequence[str], cut: set[str], max_length: int
    ) -> None:
        """One warning with the number of `texts` (counting repeats) whose prepared input `max_length` cut."""
        if not cut:
            return
        truncated = {text for text, prepared in zip(unique, inputs, strict=True) if prepared in cut}
        logger.warning(
            "%d of %d texts were longer than max_length=%d tokens and were truncated.",
            sum(1 for text in texts if text in truncated),
            len(texts),
            max_length,
        )

    def resolve_prompt(self, prompt_name: str | None = None, prompt: str | None = None) -> str:
        """The prompt text to put before inputs: `prompt` if given, else `config.prompts[prompt_name]`, else the
        default prompt, else `""`. An unknown `prompt_name` raises `ValueError` listing the known ones."""
        if prompt is not None:
            if not isinstance(prompt, str):
                raise TypeError(f"prompt={prompt!r} must be a string.")
            return prompt
        prompts = self.config.prompts or {}
        if prompt_name is None:
            prompt_name = self.config.default_prompt_name
            if prompt_name is None:
                return ""
        if prompt_name not in prompts:
            raise ValueError(
                f"prompt_name={prompt_name!r} is not one of this model's prompts {sorted(prompts)}; set them with "
                "model.config.prompts = {name: text} or pass prompt='...'."
            )
        return prompts[prompt_name]

    def prepare_text(self, text: str, prompt: str = "") -> str:
        """The string the tokenizer sees: the prompt, then the text, lowercased when `config.do_lower_case`."""
        text = prompt + text
        return text.lower() if self.config.do_lower_case else text


def checked_texts(texts: str | Sequence[str], batch_size: int) -> tuple[Sequence[str], bool]:
    """`(texts, single)`: the texts as a sequence (one string becomes a list of one) and whether one string was
    given, after encode()'s checks of the texts and the batch size (shared by every encode over batches)."""
    single = isinstance(texts, str)
    if single:
        texts = [texts]
    if not isinstance(texts, Sequence):
        raise TypeError(f"encode() takes a string or a sequence of strings, got {type(texts).__name__}.")
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"encode(): texts[{index}] is {type(text).__name__} ({text!r}); expected str.")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"encode(): batch_size={batch_size!r} must be a positive int.")
    return texts, single


def in_input_order(
    positions: list[torch.Tensor], chunks: list[torch.Tensor], texts: Sequence[str], unique: list[str], single: bool
) -> torch.Tensor:
    """The embeddings of `texts` in their order, on the CPU, from batches of the distinct texts `unique` (`positions`:
    the rows of `unique` each chunk holds); one vector when `single`."""
    order = torch.cat(positions)
    sorted_embeddings = torch.cat(chunks).cpu()
    embeddings = torch.empty_like(sorted_embeddings)
    embeddings[order] = sorted_embeddings
    if len(unique) != len(texts):
        position = {text: i for i, text in enumerate(unique)}
        embeddings = embeddings[[position[text] for text in texts]]
    return embeddings[0] if single else embeddings


def prompt_token_count(tokenizer: Any, prompt: str) -> int:
    """How many leading tokens a prompt takes in a tokenized input: its tokens with the special tokens the
    tokenizer adds in front (e.g. `[CLS]`), without a trailing one (e.g. `[SEP]`), as sentence-transformers counts
    them for `include_prompt=False`."""
    ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    return len(ids) - 1 if ids and ids[-1] in special else len(ids)
