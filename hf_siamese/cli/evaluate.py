"""`hf-siamese eval`: STS Spearman/Pearson of a model on scored pairs, with optional scatter plot and heatmap; on a
BEIR folder the IR table, and with --rerank CE_DIR the first stage's and the two stages' metrics side by side."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from ..data.training_sets import DEMO_DEV_NAME, load_data, scored_pairs_layout, take
from .arguments import (
    add_command,
    add_data_arguments,
    add_first_stage_arguments,
    add_lexical_arguments,
    add_model_arguments,
    add_quantize_argument,
    add_rerank_arguments,
    add_rescore_argument,
    positive_int,
)
from .common import default_model_path, load_cross_encoder, load_inference_model, parse_columns, parse_score_range
from .sparse_options import is_sparse_model_path, load_sparse_model, refuse_dense_flags


def register(commands: Any) -> None:
    """Add `eval` to the `hf-siamese` subparsers."""
    add_command(
        commands, "eval", run_eval, add_arguments,
        summary="STS Spearman/Pearson on scored pairs, or the IR table on a BEIR folder (default: the demo dev split)",
        description="Spearman and Pearson correlation (x100) of cosine, dot, euclidean and manhattan similarity "
        "with gold scores of sentence pairs; on a BEIR folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv) nDCG, "
        "MRR, Recall, MAP and Precision at 1, 3, 5, 10 and 100; with --rerank CE_DIR, those of the first stage and "
        "of the two stages (the cross-encoder reranking the first stage's --rerank-top) side by side.",
    )  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `eval`: the data (scored pairs or a BEIR folder), the model, the plots; for a BEIR folder the
    index, the first stage, BM25's settings and the rerank."""
    parser.add_argument(
        "data",
        nargs="?",
        metavar="SOURCE",
        help="scored pairs (file, folder or Hub dataset id) or a BEIR folder (default: the built-in demo set)",
    )
    add_model_arguments(parser, training=False)
    add_data_arguments(
        parser, "", "test",
        "split of a Hub dataset, a local folder or a BEIR folder's qrels (default: test; with --choose-dense-weight: "
        "dev). A BEIR split that is not there is refused, listing the splits found: never swapped for another",
    )  # fmt: skip
    add_quantize_argument(parser)
    parser.add_argument("--score-range", metavar="LOW,HIGH", help="range of the gold scores (default: 0,1 or 0,5)")
    parser.add_argument("--max-eval", type=positive_int, metavar="N", help="evaluate on N random pairs only")
    parser.add_argument("--batch-size", type=positive_int, default=64, help="default: %(default)s")
    parser.add_argument("--plot", metavar="PNG", help="write a scatter plot of cosine similarity vs gold score")
    parser.add_argument("--sentences", metavar="FILE", help="text file, one sentence per line, for --heatmap")
    parser.add_argument("--heatmap", metavar="PNG", help="write the similarity matrix of --sentences as a heatmap")
    parser.add_argument(
        "--index", metavar="INDEX",
        help="BEIR folder: run the first stage through this index of its corpus ('hf-siamese index BEIR_DIR -o ...': "
        "a folder, or milvus://... / milvus-lite:...), as users search it; --model defaults to the index's",
    )  # fmt: skip
    add_first_stage_arguments(parser, "dense (a BEIR folder; hybrid builds BM25 over its corpus in a moment)")
    add_rescore_argument(parser)
    add_lexical_arguments(parser)
    parser.add_argument(
        "--choose-dense-weight", action="store_true",
        help="BEIR folder: print nDCG@10 of z-score hybrid fusion at dense weights 0, 0.1, ..., 1 on --split and the "
        "best (choose on train or dev queries, then eval test with --fusion zscore --dense-weight W); with --index, "
        "of the two lists its hybrid reads (dense + BM25, or dense + learned sparse)",
    )  # fmt: skip
    parser.add_argument(
        "--choose-fusion", action="store_true",
        help="BEIR folder, with --rerank CE_DIR (a folder): choose the reranker's fusion weights on --split (default "
        "dev) of this corpus and save them in CE_DIR with the corpus they were chosen on; its searches of this corpus "
        "then use them, of any other the setting-free order",
    )  # fmt: skip
    add_rerank_arguments(parser)


def run_eval(args: argparse.Namespace) -> int:
    """Spearman/Pearson x100 of cosine, dot, euclidean and manhattan similarity on scored pairs; optional plots. On a
    BEIR folder: the IR table instead."""
    from ..data.beir import is_beir_folder
    from ..data.readers import load_demo_dataset, read_text_lines
    from ..evaluation.evaluator import EmbeddingSimilarityEvaluator
    from ..metrics import paired_similarities
    from .search_options import lexical_settings

    if args.data is not None and is_beir_folder(args.data):
        return run_retrieval_eval(args)
    retrieval_only = {
        "--rerank": args.rerank, "--rerank-top": args.rerank_top, "--first-stage": args.first_stage,
        "--index": args.index,
        "--fusion": args.fusion, "--dense-weight": args.dense_weight, "--choose-dense-weight": args.choose_dense_weight,
        "--choose-fusion": args.choose_fusion, "--no-rerank": args.no_rerank,
        "--language/--no-stemmer/--no-stopwords/--k1/--b": lexical_settings(args),
    }  # fmt: skip
    given = [flag for flag, value in retrieval_only.items() if value not in (None, False)]
    if given:
        raise ValueError(f"{', '.join(given)} apply to a BEIR folder (retrieval), not to scored pairs")

    if (args.sentences is None) != (args.heatmap is None):
        raise ValueError("--sentences and --heatmap go together: the heatmap shows the sentences of the file")
    columns = parse_columns(args.columns)
    score_range = parse_score_range(args.score_range)
    if args.data is None:
        if columns or args.dataset_config:
            raise ValueError("--columns/--dataset-config describe a data source; give one")
        data, name = load_demo_dataset()["dev"], DEMO_DEV_NAME
    else:
        data, name = load_data(args.data, args.split or "test", columns, args.dataset_config), args.data
    data = take(data, args.max_eval, 0)
    first, second, score = scored_pairs_layout(data, name)
    sentences = read_text_lines(args.sentences) if args.sentences else None

    if is_sparse_model_path(args.model):
        raise ValueError(f"{args.model} is a sparse model: evaluate it on a BEIR folder, not on scored pairs")
    model, tokenizer = load_inference_model(
        args.model, args.pooling, args.normalize, args.max_seq_length, quantize=args.quantize, device=args.device
    )
    gold = list(data[score])
    if score_range is None:
        from ..training.objective import infer_score_range

        score_range = infer_score_range(gold, name, "--score-range")
    evaluator = EmbeddingSimilarityEvaluator(
        list(data[first]), list(data[second]), gold, score_range=score_range, tokenizer=tokenizer,
        batch_size=args.batch_size, percent=True, show_progress_bar=True,
    )  # fmt: skip
    metrics = evaluator(model)

    print(f"STS evaluation of {args.model or default_model_path()}")
    print(f"on {name}: {len(gold)} pairs, scores {score_range[0]:g}..{score_range[1]:g}")
    print(f"{'similarity':<12}{'Spearman':>10}{'Pearson':>10}   (x100)")
    for function in ("cosine", "dot", "euclidean", "manhattan"):
        print(f"{function:<12}{metrics[f'spearman_{function}']:>10.2f}{metrics[f'pearson_{function}']:>10.2f}")

    if args.plot:
        from ..plots import plot_similarity_scatter

        predicted = paired_similarities(*evaluator.last_embeddings, "cosine")
        written = plot_similarity_scatter(predicted, gold, args.plot, title=f"Cosine similarity vs gold: {name}")
        print(f"scatter plot: {written}")
    if sentences is not None:
        from ..plots import plot_similarity_heatmap

        vectors = model.encode(sentences, tokenizer=tokenizer, batch_size=args.batch_size)
        matrix = model.similarity(vectors, vectors).numpy()
        written = plot_similarity_heatmap(sentences, matrix, args.heatmap, title=f"Similarity: {args.sentences}")
        print(f"heatmap: {written}")
    return 0


def run_retrieval_eval(args: argparse.Namespace) -> int:
    """nDCG, MRR, Recall, MAP and Precision at 1, 3, 5, 10, 100 (x100) of a model on a BEIR folder's split; with
    --rerank, each metric@k of the first stage and of the two stages side by side."""
    from ..data.beir import read_beir
    from ..evaluation.retrieval import RetrievalEvaluator
    from ..retrieval.fusion.hybrid import check_first_stage
    from ..retrieval.index.compact import describe_precision
    from .multivector_options import load_multivector_option
    from .search_options import index_query_model, lexical_settings, rerank_options

    for option in ("columns", "score_range", "sentences", "plot"):
        if getattr(args, option, None):
            raise ValueError(f"--{option.replace('_', '-')} applies to scored pairs, not to a BEIR folder")
    settings = lexical_settings(args)
    own = _own_ranking(args, settings)
    if args.choose_dense_weight:
        return _choose_dense_weight(args, settings)
    if args.choose_fusion:
        return _choose_fusion(args, settings)
    split = args.split or "test"
    data = read_beir(args.data, split=split)  # the split asked for, or an error listing the splits there are
    index, weight, stages = None, args.first_stage_weight, None
    stage, fusion, dense_weight = args.first_stage, args.fusion, args.dense_weight
    if args.index is not None:
        from ..retrieval.stores import load_index

        index = load_index(args.index, args.rescore)  # a folder or an engine's collection of this set's corpus
    if args.rescore is not None and index is None:
        raise ValueError("--rescore applies to an --index of compact vectors (index --precision); give --index")
    if args.no_rerank and (index is None or args.rerank is not None):
        raise ValueError(
            "--no-rerank measures the first stage alone of an --index that keeps a reranker: give --index, no --rerank"
        )
    recorded = index.pipeline if index is not None and not args.no_rerank else None
    reranker, rerank_top = rerank_options(args, recorded=recorded is not None)
    if reranker is None and recorded is not None:  # the pipeline the index keeps, measured as it searches
        plan = index.plan(None, stage, fusion, dense_weight, rerank_top, weight)  # the library's one setup
        reranker, stage, fusion, dense_weight = plan.reranker, plan.first_stage, plan.fusion, plan.dense_weight
        rerank_top, weight, stages = plan.rerank_top, plan.first_stage_weight, plan.stage_weights
    has_sparse = index is not None and index.has_sparse  # the first stage "sparse": an index's learned-sparse part
    first_stage = check_first_stage(stage or "dense", fusion, dense_weight, settings, sparse_part=has_sparse)
    lists: tuple[str, ...] = (first_stage,)
    if index is not None:
        index.check_first_stage(first_stage, fusion, dense_weight)
        lists = index.stage_lists(first_stage, fusion)
    if own == "sparse":
        model, tokenizer = load_sparse_model(args.model, args.max_seq_length, args.device)
    elif own:
        model, tokenizer = load_multivector_option(args.model, args.device, "--model")
    elif index is not None:  # the index's model, at its max length, and its recorded sparse model: as in search
        flags = {"--model": args.model, "--pooling": args.pooling, "--normalize": args.normalize}
        flags |= {"--max-seq-length": args.max_seq_length, "--quantize": args.quantize}
        model, tokenizer = index_query_model(args, index, first_stage, lists, flags)
    else:
        model, tokenizer = _retrieval_model(args, first_stage)
    evaluator = RetrievalEvaluator(
        data, tokenizer=tokenizer, batch_size=args.batch_size, percent=True, show_progress_bar=True,
        rerank=reranker, rerank_top=rerank_top, first_stage=first_stage, fusion=fusion, dense_weight=dense_weight,
        lexical_settings=settings, index=index, first_stage_weight=None if reranker is None else weight,
        stage_weights=stages,
    )  # fmt: skip
    metrics = evaluator(model)
    model_name = "BM25" if first_stage == "lexical" else args.model or getattr(index, "model_name", None)
    model_name = model_name or default_model_path()
    if "sparse" in lists:
        sparse_name = f"sparse part by {index.sparse.model_name}"
        model_name = sparse_name if first_stage == "sparse" else f"{model_name} + {sparse_name}"
    shown = own or _stage_name(first_stage, lists)
    if index is not None:  # the index keeps what was measured with it, in its record and card
        from ..retrieval.index.pipeline import record_measurement

        search = _stage_name(first_stage, lists, fusion, dense_weight) + describe_precision(index)
        if reranker is not None:
            search += f", top {metrics['rerank_top']} reranked"
        record_measurement(index, Path(args.data).name, split, search, metrics)
    print(f"Retrieval evaluation of {model_name}, first stage: {shown}")
    through = "" if index is None else f", through {args.index}{describe_precision(index)}"
    print(f"on {args.data} ({split} split{through}): {metrics['num_queries']} queries, {len(data.corpus)} documents")
    ks = list(data.k_values)
    columns = [(shown, "")]
    if first_stage == "hybrid":  # each list alone, then fused
        fused = f"fused ({fusion or 'rrf'})"
        alone = [s for s in ("lexical", "dense", "sparse") if f"{s}_ndcg@{ks[0]}" in metrics]
        columns = [*((s, f"{s}_") for s in alone), (fused, "")]
    if reranker is not None:
        by = args.rerank or f"{index.pipeline['reranker']} (the index's pipeline)"
        print(f"reranked by {by}: the first stage's top {metrics['rerank_top']} per query")
        columns.append(("reranked", "rerank_"))
        if first_stage == "hybrid":  # the reranker's order and each list's, no setting
            columns.append((f"RRF of {len(alone) + 1}", f"rerank_rrf{len(alone) + 1}_"))
    _print_metrics(metrics, list(data.k_values), columns, two_stages=reranker is not None and first_stage != "hybrid")
    return 0


def _own_ranking(args: argparse.Namespace, settings: Any) -> str | None:
    """ "sparse" / "maxsim" where --model is a sparse / multi-vector model, ranked exactly by its own term weights /
    token vectors (the dense-only flags then refused, each named); None for a dense one."""
    from ..retrieval.fusion.multivector_rerank import is_multivector_model_path

    own = "sparse" if is_sparse_model_path(args.model) else "maxsim" if is_multivector_model_path(args.model) else None
    if own:
        stage = args.first_stage if args.first_stage not in (None, "dense") else None
        refuse_dense_flags(args.model, {
            "--pooling": args.pooling, "--normalize": args.normalize is not None, "--quantize": args.quantize,
            "--index": args.index, f"--first-stage {stage}": stage, "--fusion": args.fusion,
            "--dense-weight": args.dense_weight, "--choose-dense-weight": args.choose_dense_weight,
            "--choose-fusion": args.choose_fusion, "--no-rerank": args.no_rerank,
            "--language/--no-stemmer/--no-stopwords/--k1/--b": settings,
        }, "sparse" if own == "sparse" else "multi-vector")  # fmt: skip
    return own


def _print_metrics(metrics: dict[str, Any], ks: list[int], columns: list[tuple[str, str]], two_stages: bool) -> None:
    """The IR table: first stage against reranked with the change (`two_stages`), one column a list (`columns`:
    title, metric prefix), or one row a metric with a column a cut-off."""
    if two_stages:
        print(f"{'metric':<14}{'first stage':>12}{'reranked':>10}{'change':>9}   (x100)")
        for name in ("ndcg", "mrr", "recall", "map", "precision"):
            for k in ks:
                first, second = metrics[f"{name}@{k}"], metrics[f"rerank_{name}@{k}"]
                print(f"{name + '@' + str(k):<14}{first:>12.2f}{second:>10.2f}{second - first:>+9.2f}")
        return
    if len(columns) > 1:
        width = 2 + max(len(title) for title, _ in columns)  # two spaces at least between the column titles
        print(f"{'metric':<14}" + "".join(f"{title:>{width}}" for title, _ in columns) + "   (x100)")
        for name in ("ndcg", "mrr", "recall", "map", "precision"):
            for k in ks:
                cells = "".join(f"{metrics[f'{prefix}{name}@{k}']:>{width}.2f}" for _, prefix in columns)
                print(f"{name + '@' + str(k):<14}{cells}")
        return
    print(f"{'metric':<12}" + "".join(f"{'@' + str(k):>9}" for k in ks) + "   (x100)")
    for name in ("ndcg", "mrr", "recall", "map", "precision"):
        print(f"{name:<12}" + "".join(f"{metrics[f'{name}@{k}']:>9.2f}" for k in ks))


def _retrieval_model(args: argparse.Namespace, first_stage: str) -> tuple[Any, Any]:
    """(model, tokenizer) of a retrieval evaluation over the set itself; (None, None) for the lexical first stage,
    which embeds nothing (a model flag given to it is refused: it would not be used). Through an --index:
    `index_query_model`."""
    if first_stage == "lexical":
        given = {"--model": args.model, "--pooling": args.pooling, "--normalize": args.normalize}
        given |= {"--max-seq-length": args.max_seq_length, "--quantize": args.quantize}
        flags = [flag for flag, value in given.items() if value is not None]
        if flags:
            raise ValueError(
                f"{', '.join(flags)} {'sets' if len(flags) == 1 else 'set'} the model that embeds the texts; "
                "--first-stage lexical ranks by BM25 alone, with no model"
            )
        return None, None
    return load_inference_model(
        args.model, args.pooling, args.normalize, args.max_seq_length, quantize=args.quantize, device=args.device
    )


def _stage_name(
    first_stage: str, lists: tuple[str, ...], fusion: str | None = None, dense_weight: float | None = None
) -> str:
    """The first stage as printed ("hybrid"), and with its fusion as recorded with a measurement ("hybrid (zscore,
    dense weight 0.5)"); a hybrid over an index's sparse part names its lists ("hybrid (dense + lexical + sparse)")."""
    details = [" + ".join(lists)] if first_stage == "hybrid" and "sparse" in lists else []
    if fusion:
        details.append(fusion + (f", dense weight {dense_weight}" if dense_weight is not None else ""))
    return first_stage + (f" ({', '.join(details)})" if details else "")


def _choose_dense_weight(args: argparse.Namespace, settings: Any) -> int:
    """--choose-dense-weight: nDCG@10 of z-score hybrid fusion at each dense weight on held-out queries (--split,
    default dev: never test unless asked for), and the best. With --index, the two lists its hybrid reads (dense +
    BM25, or dense + learned sparse), run through it."""
    from ..evaluation.retrieval import choose_hybrid_weight
    from .search_options import index_query_model

    given = {"--rerank": args.rerank, "--dense-weight": args.dense_weight, "--rescore": args.rescore}
    given["--first-stage " + str(args.first_stage)] = args.first_stage not in (None, "hybrid")
    given["--fusion " + str(args.fusion)] = args.fusion not in (None, "zscore")
    given["--language/--no-stemmer/--no-stopwords/--k1/--b (the index's BM25 keeps its own)"] = (
        args.index is not None and settings is not None
    )
    refused = [flag for flag, value in given.items() if value not in (None, False)]
    if refused:
        raise ValueError(
            f"--choose-dense-weight measures every dense weight of the z-score hybrid first stage (--first-stage "
            f"hybrid --fusion zscore): give no {', '.join(refused)}"
        )
    data, split = _held_out_split(args, "--choose-dense-weight")
    index, lists = None, ("dense", "lexical")
    if args.index is not None:
        from ..retrieval.stores import load_index

        index = load_index(args.index)
        lists = index.stage_lists(index.check_first_stage("hybrid", "zscore"), "zscore")
        flags = {"--model": args.model, "--pooling": args.pooling, "--normalize": args.normalize}
        model, tokenizer = index_query_model(args, index, "hybrid", lists, flags | {"--quantize": args.quantize})
    else:
        model, tokenizer = _retrieval_model(args, "hybrid")
    best, measured = choose_hybrid_weight(
        model, data, tokenizer=tokenizer, batch_size=args.batch_size, lexical_settings=settings,
        show_progress_bar=True, index=index,
    )  # fmt: skip
    through = "" if index is None else f", {' + '.join(lists)} through {args.index}"
    print(f"z-score hybrid fusion on {args.data} ({split} split{through}): nDCG@10 x100 by the dense list's weight")
    for weight, value in measured.items():
        print(f"  {weight:.1f}  {value:6.2f}" + ("  <- best" if weight == best else ""))
    print(f"use: --first-stage hybrid --fusion zscore --dense-weight {best}" + ("" if index is None else " --index"))
    return 0


def _held_out_split(args: argparse.Namespace, option: str) -> tuple[Any, str]:
    """The BEIR split a choice is made on (--split, default dev: never test unless asked for, with a note) and its
    name; a missing default split is an error that names --split."""
    from ..data.beir import read_beir

    split = args.split or "dev"
    try:
        data = read_beir(args.data, split=split)
    except FileNotFoundError as error:
        if args.split is not None:
            raise
        raise FileNotFoundError(
            2,
            f"{error.strerror}. {option} chooses on held-out queries, --split dev by default: give --split with a "
            "train or dev split of this folder",
            error.filename,
        ) from None
    if split == "test":
        print("note: choosing on the test split; report a test figure only for a choice made on train or dev queries")
    return data, split


def _choose_fusion(args: argparse.Namespace, settings: Any) -> int:
    """--choose-fusion: the reranker's fusion weights chosen on --split of this corpus (`choose_fusion`: two-score
    weight, three-score weights over hybrid candidates), set with the corpus they were chosen on and written into
    the reranker's config.json."""
    from ..evaluation.reranking_set import RerankingDataset
    from ..retrieval.fusion.hybrid import check_first_stage, default_first_stage
    from ..retrieval.fusion.rerank import RERANK_TOP
    from ..storage.files import write_text_atomic
    from .common import choose_and_report_fusion

    given = {"--index": args.index, "--first-stage-weight": args.first_stage_weight, "--no-rerank": args.no_rerank}
    refused = [flag for flag, value in given.items() if value not in (None, False)]
    if refused or args.rerank is None or not os.path.isdir(args.rerank):
        what = f"give no {', '.join(refused)}" if refused else f"--rerank {args.rerank} is no local folder"
        raise ValueError(
            f"--choose-fusion chooses the fusion weights of --rerank CE_DIR (a local folder, where they are saved) "
            f"over this folder's first stage: {what if args.rerank else 'give --rerank CE_DIR'}"
        )
    data, split = _held_out_split(args, "--choose-fusion")
    first_stage = check_first_stage(args.first_stage or default_first_stage(), args.fusion, args.dense_weight, settings)
    reranker = load_cross_encoder(args.rerank, args.device)
    model, tokenizer = _retrieval_model(args, first_stage)
    candidates = RerankingDataset.from_first_stage(
        data, model, args.rerank_top or RERANK_TOP, tokenizer=tokenizer, batch_size=args.batch_size,
        show_progress_bar=True, first_stage=first_stage, fusion=args.fusion, dense_weight=args.dense_weight,
        lexical_settings=settings,
    )  # fmt: skip
    name = Path(args.data).name
    label = f"{split} of {name}, {len(candidates.judged_queries())} queries"
    choose_and_report_fusion(reranker, candidates, label, args.batch_size, corpus=(name, split, data.corpus))
    write_text_atomic(Path(args.rerank) / "config.json", reranker.model.config.to_json_string())
    print(
        f"saved in {args.rerank}/config.json: searches of {name} use these weights, of any other corpus the RRF order"
    )
    return 0
