"""Compare MNR loss and gradients of 2 gloo processes (DDP) with those of one process holding the global batch.

Run with `python -m torch.distributed.run --nproc_per_node 2 mnr_gradients.py OUT.json`. Every rank builds the same
tiny model and the same global batch of `2 * ROWS` rows; rank r keeps rows `r*ROWS:(r+1)*ROWS`. For each case the
reference (one process, all rows, no gathering) is computed in-process on a plain copy of the model, then the DDP
model computes the local loss and backward; DDP averages the gradients over ranks as Trainer's DDP does. Rank 0
writes the maximum absolute differences (over both ranks) to OUT.json.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for conftest.make_tiny_model

from conftest import VOCAB_SIZE, make_tiny_model  # noqa: E402

from hf_siamese.losses import CachedMultipleNegativesRankingLoss, MultipleNegativesRankingLoss  # noqa: E402
from hf_siamese.modeling.distributed import shutdown_process_group  # noqa: E402

ROWS = 4  # rows per process; the global batch has 2 * ROWS
SEQ_LEN = 7


def global_batch(num_texts: int, world_size: int) -> dict[str, torch.Tensor]:
    """Random token ids and ragged attention masks, identical on every rank (fixed generator seed)."""
    generator = torch.Generator().manual_seed(1234)
    shape = (world_size * ROWS, num_texts, SEQ_LEN)
    input_ids = torch.randint(5, VOCAB_SIZE, shape, generator=generator)
    input_ids[..., 0] = 2  # [CLS]
    lengths = torch.randint(3, SEQ_LEN + 1, shape[:2], generator=generator)
    attention_mask = (torch.arange(SEQ_LEN) < lengths[..., None]).long()
    return {"input_ids": input_ids * attention_mask, "attention_mask": attention_mask}


def gradients(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.use_deterministic_algorithms(True)
    model = make_tiny_model(seed=0).double()  # float64: differences then measure the method, not rounding
    reference_model = copy.deepcopy(model)
    ddp = DistributedDataParallel(model)
    results = []
    for num_texts in (2, 3):  # (anchor, positive) and (anchor, positive, negative)
        batch = global_batch(num_texts, world_size)
        local = {k: v[rank * ROWS : (rank + 1) * ROWS] for k, v in batch.items()}
        for symmetric in (False, True):
            reference_model.zero_grad(set_to_none=True)
            reference_loss_fn = MultipleNegativesRankingLoss(symmetric=symmetric, gather_across_processes=False)
            reference_loss = reference_loss_fn(reference_model(**batch), None)
            reference_loss.backward()
            reference_grad = gradients(reference_model)
            # (gather, cached): the cached loss embeds 3 rows at a time (4 local rows: chunks of 3 and 1).
            for gather, cached in ((True, False), (False, False), (True, True)):
                ddp.zero_grad(set_to_none=True)
                if cached:
                    loss_fn = CachedMultipleNegativesRankingLoss(3, symmetric=symmetric, gather_across_processes=True)
                else:
                    loss_fn = MultipleNegativesRankingLoss(symmetric=symmetric, gather_across_processes=gather)
                loss, _ = loss_fn.compute(ddp, local, None)
                loss.backward()  # DDP all-reduces and averages the parameter gradients here
                # The global loss is the mean of the per-process means (equal batch sizes), as Trainer logs it.
                mean_loss = loss.detach().clone()
                dist.all_reduce(mean_loss)
                mean_loss /= world_size
                diffs = torch.tensor(
                    [
                        (mean_loss - reference_loss.detach()).abs().item(),
                        (gradients(model) - reference_grad).abs().max().item(),
                        reference_grad.abs().max().item(),
                    ],
                    dtype=torch.float64,
                )
                dist.all_reduce(diffs, op=dist.ReduceOp.MAX)  # worst case over ranks
                results.append(
                    {
                        "negatives": num_texts - 2,
                        "symmetric": symmetric,
                        "gather": gather,
                        "cached": cached,
                        "loss_diff": diffs[0].item(),
                        "grad_diff": diffs[1].item(),
                        "grad_max": diffs[2].item(),
                    }
                )
    if rank == 0:
        out.write_text(json.dumps(results, indent=1))
    shutdown_process_group()


if __name__ == "__main__":
    main()
