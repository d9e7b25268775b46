"""The tables and target lines of the `index` scenario (index_build.py) from its rows."""

from __future__ import annotations

import argparse
import datetime
import os
import re
import statistics
from typing import Any

from common import cpu_flags
from index_build import BUILDS, QUERIES, QUIET_LOAD, SEARCHES, TARGET_RSS_RATIO, TARGET_SLOWDOWN, TOP_K


def load_cell(row: dict[str, Any]) -> str:
    mark = " contended" if row.get("quiet") is False or (row.get("quiet") is None and row["load"] >= 1.0) else ""
    return f"{row['load']:.1f}{mark}"


def build_table(rows: dict[str, dict[str, Any]], sizes: list[int], old_sizes: list[int]) -> list[str]:
    lines = [
        f"| code | command | texts | peak RSS MiB | RSS vs its {min(sizes):,} | seconds | load | index MiB | backend "
        "| factory | nprobe | recall@10 (on) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|---|",
    ]
    for key in ("new", "old", "old-streamed"):
        code, _, name = BUILDS[key]
        for n in sizes if key == "new" else old_sizes:
            row = rows.get(f"{key}-{n}")
            if row is None:
                continue
            if "error" in row:
                lines.append(f"| {code} | {name} | {n:,} | failed ({row['error']}) | | | | | | | | |")
                continue
            first = rows.get(f"{key}-{min(sizes)}")
            ratio = f"{row['peak_mib'] / first['peak_mib']:.2f}x" if first and "error" not in first else "-"
            on = row["recall_on"] or "held-out corpus rows"  # the old code's only kind
            recall = f"{row['recall']:.3f} ({row['recall_queries']} {on})" if row.get("recall") else "-"
            lines.append(
                f"| {code} | {name} | {n:,} | {row['peak_mib']:,.0f} | {ratio} | {row['seconds']:,.0f} | "
                f"{load_cell(row)} | {row['disk_mib']:,.0f} | {row['backend']} | {row['factory'] or '-'} | "
                f"{row['nprobe'] or '-'} | {recall} |"
            )
    return lines


def composition(rows: dict[str, dict[str, Any]], n: int) -> list[str]:
    """What the new build's peak RSS at n is made of, from its index.json and the baseline child."""
    row, base = rows.get(f"new-{n}"), rows.get("baseline")
    if not row or "error" in row or not base:
        return []
    dim = 384
    match = re.match(r"IVF(\d+)", row.get("factory") or "")
    parts = [f"the process and the model (a child that loads it and embeds one batch: {base['peak_mib']:,.0f} MiB)"]
    parts.append(f"one shard of 10,000 texts and their vectors ({10_000 * dim * 4 / 2**20:.0f} MiB of vectors)")
    if match:
        lists = int(match.group(1))
        sample = (39 * lists + 1000) * dim * 4 / 2**20
        parts.append(
            f"the ANN training sample (39 x {lists} + 1,000 held-out vectors x 4 x {dim} bytes = {sample:.0f} MiB)"
        )
        parts.append("one part of the inverted lists being filled (64 MiB)")
        expected = base["peak_mib"] + 10_000 * dim * 4 / 2**20 + sample + 64
    else:
        expected = base["peak_mib"] + 10_000 * dim * 4 / 2**20
    return [
        f"- At {n:,} texts the new build peaks at {row['peak_mib']:,.0f} MiB; what it holds: "
        + "; ".join(parts)
        + f": {expected:,.0f} MiB if all were resident at once (an upper estimate: the shard is freed before the "
        "ANN pass)."
    ]


def trace_lines(rows: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    for key, row in sorted(rows.items()):
        if not key.startswith("trace-") or not row.get("phases"):
            continue
        lines += [
            "",
            f"Phases of one new build of {row['n']:,} texts (`build_index` called in a child with its phases "
            "wrapped; at each event the peak RSS since the previous event, then reset, and the RSS then, split into "
            "anonymous memory and mapped file pages): highest interval peak "
            f"{max(p['peak'] for p in row['phases']):,.0f} MiB.",
            "",
            "| interval | peak in it MiB | RSS at its end MiB | anonymous | mapped files | seconds |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for p in row["phases"]:
            lines.append(
                f"| {p['interval']} | {p['peak']:,.0f} | {p['rss']:,.0f} | {p['anon']:,.0f} | {p['file']:,.0f} | "
                f"{p['seconds']:.1f} |"
            )
    return lines


def search_table(row: dict[str, Any] | None) -> list[str]:
    if not row:
        return []
    lines = [
        f"Exact search, {row['n']:,}-document index, {QUERIES:,} precomputed query vectors, "
        f"`search_embeddings(q, top_k={TOP_K})`; {len(next(iter(row['rates'].values())))} interleaved rounds "
        f"(each one process per variant, loaded once); load {load_cell(row)}; {row['when']}.",
        "",
        "| variant | backend | queries/s (median) | range | new vs it |",
        "|---|---|---:|---:|---:|",
    ]
    new = statistics.median(row["rates"]["new"])
    for key, (_, name) in SEARCHES.items():
        rates = row["rates"][key]
        median = statistics.median(rates)
        versus = "-" if key == "new" else f"{new / median:.2f}x"
        lines.append(
            f"| {name} | {row['backends'][key]} | {median:,.0f} | {min(rates):,.0f}-{max(rates):,.0f} | {versus} |"
        )
    lines.append("")
    for key, name in (("vs_old_exact", "old exact"), ("vs_old_faiss", "old faiss Flat")):
        check = row[key]
        swaps = (
            ""
            if check["same_ids"]
            else f" (the others swap documents whose scores differ by at most {check['swap_gap']:.1e}: near-ties)"
        )
        lines.append(
            f"- Hits, new vs {name}: ids identical in {QUERIES - check['rows_differing']:,} of {QUERIES:,} queries"
            f"{swaps}; largest score difference at the same rank {check['max_score_diff']:.1e}."
        )
    lines.append(
        f"- The random model's scores are crowded: median step between consecutive top-{TOP_K} scores "
        f"{row['vs_old_exact']['median_step']:.1e}, so float32 rounding (summation order) can swap neighbours."
    )
    return lines


def target_lines(rows: dict[str, dict[str, Any]], sizes: list[int]) -> list[str]:
    lines = []
    low, high = rows.get(f"new-{min(sizes)}"), rows.get("new-200000")
    if low and high and "error" not in low and "error" not in high:
        ratio = high["peak_mib"] / low["peak_mib"]
        verdict = "met" if ratio <= TARGET_RSS_RATIO else "NOT met"
        lines.append(
            f"- Target: new `index` peak RSS at 200,000 within {TARGET_RSS_RATIO}x its {min(sizes):,} peak: "
            f"**{verdict}**: {low['peak_mib']:,.0f} -> {high['peak_mib']:,.0f} MiB ({ratio:.2f}x)."
        )
    search = rows.get("search")
    if search:
        new = statistics.median(search["rates"]["new"])
        for key in ("old-faiss", "old-exact"):
            old = statistics.median(search["rates"][key])
            verdict = "met" if new >= old * (1 - TARGET_SLOWDOWN) else "NOT met"
            lines.append(
                f"- Target: new exact search not slower than {SEARCHES[key][1]} by more than "
                f"{TARGET_SLOWDOWN:.0%}: **{verdict}**: {new:,.0f} vs {old:,.0f} queries/s ({new / old:.2f}x)."
            )
        check = search["vs_old_exact"]
        good = check["max_score_diff"] <= 1e-5 and check["swap_gap"] <= 1e-5
        how = "ids identical" if check["same_ids"] else f"ids equal up to near-ties (swaps <= {check['swap_gap']:.1e})"
        lines.append(
            f"- Check: new hits equal the old exact hits (ids, scores within 1e-5): **{'met' if good else 'NOT met'}**"
            f": {how}, scores within {check['max_score_diff']:.1e}."
        )
    return lines


def report(rows: dict[str, dict[str, Any]], args: argparse.Namespace, old_commit: str) -> str:
    import faiss
    import torch

    sizes = sorted({r["n"] for k, r in rows.items() if k.startswith("new-")})
    old_sizes = sorted({r["n"] for k, r in rows.items() if k.startswith(("old-", "old-streamed-"))})
    head = (
        f"{datetime.date.today().isoformat()}; {cpu_flags()}; torch {torch.__version__}, faiss {faiss.__version__}; "
        f"new code: this tree, old code: {old_commit}; torch and faiss threads: {os.cpu_count()} (the default)."
    )
    notes = [
        "",
        "Model: a 1-layer, 384-wide BERT (12 heads, FFN 1536) with **random weights** and all-MiniLM-L6-v2's "
        f"tokenizer (vocab 30,522), mean pooling, {'normalized' if args.normalize else 'not normalized'} (cosine "
        "similarity), saved with save_pretrained: the vectors are as large as "
        "all-MiniLM-L6-v2's, their neighbours meaningless. Texts: N lines of 8-30 words drawn with a fixed seed from "
        "5,000 whole words of that vocab (a smaller corpus is a prefix of a larger). Each build is "
        "`hf-siamese index TEXTS -o DIR --model M` (old: its default, or `--streamed`) in a child process: peak RSS "
        "is that child's ru_maxrss (os.wait4); seconds are wall time of the whole command (model load included); "
        "load is the mean 1-minute load average during it (2 cores: above ~1 means other work shared them, which "
        "slows seconds, not RSS; 'contended' marks a row measured above the quiet threshold "
        f"{QUIET_LOAD} it waited for, or above 1 when it did not wait); index MiB: every file in the folder.",
    ]
    body = [head, *notes, "", *build_table(rows, sizes, old_sizes), ""]
    body += target_lines(rows, sizes)
    body += composition(rows, max(sizes))
    body += trace_lines(rows)
    if rows.get("search"):
        body += ["", *search_table(rows["search"])]
    commands = sorted({r["command"] for r in rows.values() if r.get("command")})
    body += ["", "Rows measured by: " + "; ".join(f"`{c}`" for c in commands) + "."]
    return "\n".join(body)
