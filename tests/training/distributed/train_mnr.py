"""Short MNR training of the tiny model under `accelerate launch` (2 processes), then save and shut down.

Usage: `accelerate launch ... train_mnr.py OUT_DIR [--no-use-cpu] [--stream]`. With `--stream` the rows come as a
`datasets.IterableDataset` of 4 shards and the loss is the cached MNR (chunks of 3 rows); each rank also reports the
anchors it trained on. Every rank writes `OUT_DIR/rank{N}.json` with
what the test checks: world size, the accelerate distributed type, the loss, and a checksum of the trained weights
(equal on all ranks when DDP synchronised them; different when each rank silently trained its own copy). The model
is saved by `trainer.save_model` to `OUT_DIR/model`.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import torch
from datasets import Dataset
from transformers import BertTokenizer, TrainingArguments

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for conftest.make_tiny_model

from conftest import VOCAB, WORDS, make_tiny_model  # noqa: E402

from hf_siamese import SiamesePairCollator, SiameseTrainer  # noqa: E402
from hf_siamese.losses import CachedMultipleNegativesRankingLoss, MultipleNegativesRankingLoss  # noqa: E402
from hf_siamese.modeling.distributed import shutdown_process_group  # noqa: E402


class RecordingCollator(SiamesePairCollator):
    """Remembers the anchors of every batch it collates."""

    anchors: list[str] = []

    def __call__(self, rows):
        self.anchors.extend(row["anchor"] for row in rows)
        return super().__call__(rows)


def triplets(n: int, seed: int = 0) -> Dataset:
    """(anchor, positive, negative) rows with unique anchors; the same on every rank."""
    rng = random.Random(seed)

    def sentence() -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6)))

    anchors = [f"{sentence()} {WORDS[i % len(WORDS)]}" for i in range(n)]
    return Dataset.from_dict(
        {"anchor": anchors, "positive": [a + " ." for a in anchors], "negative": [sentence() for _ in anchors]}
    )


def checksum(model: torch.nn.Module) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def main() -> None:
    out = Path(sys.argv[1])
    use_cpu = "--no-use-cpu" not in sys.argv
    stream = "--stream" in sys.argv
    tokenizer = BertTokenizer(vocab={token: i for i, token in enumerate(VOCAB)}, model_max_length=64)
    model = make_tiny_model(seed=0)
    initial = checksum(model)
    args = TrainingArguments(
        output_dir=str(out / "run"),
        use_cpu=use_cpu,
        per_device_train_batch_size=8,
        max_steps=4,
        learning_rate=1e-3,
        save_strategy="no",
        report_to=[],
        logging_steps=1,
        disable_tqdm=True,
        seed=7,
    )
    collator = RecordingCollator(tokenizer)
    trainer = SiameseTrainer(
        model=model,
        args=args,
        train_dataset=triplets(64).to_iterable_dataset(num_shards=4) if stream else triplets(64),
        data_collator=collator,
        loss=CachedMultipleNegativesRankingLoss(3, gather_across_processes=True)
        if stream
        else MultipleNegativesRankingLoss(gather_across_processes=True),
    )
    result = trainer.train()
    trainer.save_model(str(out / "model"))
    state = trainer.accelerator.state
    info = {
        "rank": state.process_index,
        "num_processes": state.num_processes,
        "distributed_type": str(state.distributed_type),
        "backend": state.backend,
        "wrapped_class": type(trainer.model_wrapped).__name__,  # DistributedDataParallel under DDP
        "should_save": trainer.args.should_save,  # Trainer writes files from the main process only
        "train_loss": result.training_loss,
        "initial_checksum": initial,
        "checksum": checksum(trainer.accelerator.unwrap_model(trainer.model)),
        "anchors": collator.anchors,
    }
    (out / f"rank{state.process_index}.json").write_text(json.dumps(info))
    shutdown_process_group()


if __name__ == "__main__":
    main()
