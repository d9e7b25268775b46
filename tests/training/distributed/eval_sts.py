"""`trainer.evaluate()` of the tiny model on scored pairs, in one process or under `torchrun` / `accelerate launch`.

Usage: `[torchrun --nproc_per_node 2] eval_sts.py OUT_DIR`. Every rank writes `OUT_DIR/rank{N}.json` with the number of
processes, the number of unique eval texts and the metrics. The test imports `evaluate_tiny` to get the
single-process numbers in its own process.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

from datasets import Dataset
from transformers import BertTokenizer, TrainingArguments

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for conftest.make_tiny_model

from conftest import VOCAB, WORDS, make_tiny_model  # noqa: E402

from hf_siamese import SiameseTrainer  # noqa: E402
from hf_siamese.data import RetrievalDataset  # noqa: E402
from hf_siamese.losses import CosineSimilarityLoss  # noqa: E402
from hf_siamese.modeling.distributed import shutdown_process_group  # noqa: E402

NUM_PAIRS = 21


def scored_pairs(seed: int = 3) -> Dataset:
    """21 pairs over 41 unique texts (odd, so the two shards differ in size); no pair repeats a text.

    Pairs of identical texts are avoided on purpose: their cosine is 1 up to rounding, and rounding depends on how
    texts are batched, which differs between one and two processes and would reorder the tied ranks.
    """
    rng = random.Random(seed)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9))) + f" {i}" for i in range(2 * NUM_PAIRS)]
    first, second = texts[:NUM_PAIRS], texts[NUM_PAIRS:]
    second[-1] = first[0]  # one shared text: 41 unique texts
    scores = [round(rng.uniform(0, 5), 3) for _ in range(NUM_PAIRS)]
    return Dataset.from_dict({"sentence1": first, "sentence2": second, "score": scores})


def evaluate_tiny(out: Path) -> dict[str, Any]:
    tokenizer = BertTokenizer(vocab={token: i for i, token in enumerate(VOCAB)}, model_max_length=64)
    eval_set = scored_pairs()
    args = TrainingArguments(
        output_dir=str(out / "run"),
        use_cpu=True,
        per_device_eval_batch_size=4,  # several batches per shard, each padded differently
        report_to=[],
        disable_tqdm=True,
    )
    trainer = SiameseTrainer(
        model=make_tiny_model(seed=0),
        args=args,
        eval_dataset=eval_set,
        processing_class=tokenizer,
        loss=CosineSimilarityLoss(score_range=(0, 5)),
    )
    metrics = trainer.evaluate()
    # A retrieval set from the same texts: sentence1 as queries, all texts as the corpus, each query's partner as
    # its relevant document (41 documents: shards of 21 and 20 when split over 2 processes).
    first, second = list(eval_set["sentence1"]), list(eval_set["sentence2"])
    texts = list(dict.fromkeys(first + second))
    retrieval = RetrievalDataset(
        queries={f"q{i}": text for i, text in enumerate(first)},
        corpus={f"d{i}": text for i, text in enumerate(texts)},
        qrels={f"q{i}": {f"d{texts.index(other)}": 1} for i, other in enumerate(second)},
        k_values=(1, 5, 10),
    )
    ir_metrics = trainer.evaluate(eval_dataset=retrieval, metric_key_prefix="eval_ir")
    unique = len(set(eval_set["sentence1"]) | set(eval_set["sentence2"]))
    return {
        "rank": trainer.accelerator.process_index,
        "num_processes": trainer.accelerator.num_processes,
        "unique_texts": unique,
        "metrics": metrics,
        "ir_metrics": ir_metrics,
    }


def main() -> None:
    out = Path(sys.argv[1])
    result = evaluate_tiny(out)
    (out / f"rank{result['rank']}.json").write_text(json.dumps(result))
    shutdown_process_group()


if __name__ == "__main__":
    main()
