#!/usr/bin/env bash
# The GPU training benchmark in one device call: the rows/s, memory and useful-MFU table (both libraries, both orders)
# and the profile by kind, about 8 minutes on one H200 (each process takes 30-50 s to start, build and warm up; the
# parts' timeouts are sized from that); the remaining rows (MiniLM, cosine, fp32, cross-encoder) as the part "rest"
# (about 5 minutes) in a second call.
# Needs, beside the checkout: .whl/ (datasets, evaluate, dill, multiprocess, xxhash and transformers>=5.20 wheels for
# the machine's Python (its image had transformers 5.17, which hf-siamese cannot import):
# see /work/.library/device/README.md), .gpu/data/ (nli_triplets.tsv, sts-train.csv, scifact_corpus.jsonl) and
# .gpu/tokenizer/ (all-MiniLM-L6-v2's tokenizer files). Writes its tables and JSON under $OUT (default: ./gpu-out).
#   bash benchmarks/gpu_train_step.sh                        # main profile (about 8 minutes)
#   PARTS="routes compile" bash benchmarks/gpu_train_step.sh # some of: main profile rest routes varlen compile fused
#   PARTS=fused bash benchmarks/gpu_train_step.sh            # issue 64: the default step (CUDA graphs over shape
#                                                            # buckets) beside the one before it and theirs, < 9 min
set -u
PARTS=${PARTS:-main profile}
want() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
# the table a part printed at its end, or, where its timeout cut it short, each finished process's JSON line
table() { grep -q '^## bench_train_step' "$1" && sed -n '/^## bench_train_step/,$p' "$1" || grep '^{' "$1"; }
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
python3 -c "import torch, transformers, pyarrow, datasets, sentence_transformers as st; print('torch', torch.__version__, 'transformers', transformers.__version__, 'st', st.__version__, 'pyarrow', pyarrow.__version__, torch.cuda.get_device_name())" 2>&1 | tee "$OUT/versions.txt"
B="python3 benchmarks/bench_train_step.py --data .gpu/data --tokenizer .gpu/tokenizer --steps ${STEPS:-40} --warmup ${WARMUP:-12} --timeout 100"
if want main; then  # the table: BERT-base (title, abstract) and NLI, ours and theirs in both orders
  timeout 330 $B --runs scifact,nli --orders ours,st,st,ours --json "$OUT/main.json" >"$OUT/main.log" 2>&1
  table "$OUT/main.log"
fi
if want profile; then  # time by kind, one profiled process per (run, library)
  timeout 220 $B --runs scifact --orders ours,st --profile --steps 20 --json "$OUT/profile.json" >"$OUT/profile.log" 2>&1
  table "$OUT/profile.log"
fi
if want rest; then  # MiniLM size, cosine, fp32, the cross-encoder (PListMLE lists); one order each
  timeout 330 $B --runs minilm-nli,cosine,nli-fp32,ce-plistmle --orders ours,st --json "$OUT/rest.json" >"$OUT/rest.log" 2>&1
  table "$OUT/rest.log"
fi
if want routes; then
  timeout 100 python3 benchmarks/gpu_routes.py --tokenizer .gpu/tokenizer 2>&1 | tee "$OUT/routes.md"
fi
if want varlen; then
  timeout 120 $B --runs nli,scifact --orders ours --attn varlen_attn --json "$OUT/varlen.json" >"$OUT/varlen.log" 2>&1
  tail -8 "$OUT/varlen.log"
fi
if want compile; then  # torch_compile=True (layers compiled, dynamic shapes) beside the same run without it
  timeout 300 $B --runs nli,scifact --orders ours+plain,ours+compile --timeout 200 --json "$OUT/compile.json" >"$OUT/compile.log" 2>&1
  tail -10 "$OUT/compile.log"
fi
if want fused; then  # issue 64: ours (the default: CUDA graphs over shape buckets) beside the step before it and theirs
  start=$SECONDS
  F="$B --warmup 20 --steps 30 --timeout 130"
  timeout 250 $F --runs scifact --orders ours,ours+plain,st,ours --json "$OUT/fused_scifact.json" \
    >"$OUT/fused_scifact.log" 2>&1
  table "$OUT/fused_scifact.log"
  timeout 250 $F --runs nli,minilm-nli,cosine,ce-plistmle --orders ours,st --json "$OUT/fused_rest.json" \
    >"$OUT/fused_rest.log" 2>&1
  table "$OUT/fused_rest.log"
  left=$((530 - (SECONDS - start)))
  if [ "$left" -gt 60 ]; then  # the host gap, profiled (what is left of the 9 minutes)
    timeout "$left" $B --runs scifact --orders "" --profile --profile-libraries "ours,ours+plain" --steps 10 \
      --warmup 30 --timeout 90 --json "$OUT/fused_profile.json" >"$OUT/fused_profile.log" 2>&1
    table "$OUT/fused_profile.log"
  fi
fi
