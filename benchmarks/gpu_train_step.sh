#!/usr/bin/env bash
# The GPU training benchmark in one device call (issue: host-free training step), about 8 minutes on one H100/H200.
# Needs, beside the checkout: .whl/ (datasets, evaluate, dill, multiprocess, xxhash and transformers>=5.20 wheels for
# the machine's Python (its image had transformers 5.17, which hf-siamese cannot import):
# see /work/.library/device/README.md), .gpu/data/ (nli_triplets.tsv, sts-train.csv, scifact_corpus.jsonl) and
# .gpu/tokenizer/ (all-MiniLM-L6-v2's tokenizer files). Writes its tables and JSON under $OUT (default: ./gpu-out).
#   bash benchmarks/gpu_train_step.sh                  # every part
#   PARTS="rest compile" bash benchmarks/gpu_train_step.sh   # some of: routes main varlen rest compile
set -u
PARTS=${PARTS:-routes main varlen rest compile}
want() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
python3 -c "import torch, transformers, pyarrow, datasets, sentence_transformers as st; print('torch', torch.__version__, 'transformers', transformers.__version__, 'st', st.__version__, 'pyarrow', pyarrow.__version__, torch.cuda.get_device_name())" 2>&1 | tee "$OUT/versions.txt"
B="python3 benchmarks/bench_train_step.py --data .gpu/data --tokenizer .gpu/tokenizer --steps ${STEPS:-50} --warmup ${WARMUP:-15} --timeout 150"
want routes && timeout 100 python3 benchmarks/gpu_routes.py --tokenizer .gpu/tokenizer 2>&1 | tee "$OUT/routes.md"
if want main; then
  timeout 330 $B --runs nli,scifact --orders ours,st,st,ours --phases --json "$OUT/main.json" >"$OUT/main.log" 2>&1
  tail -25 "$OUT/main.log"
fi
if want varlen; then
  timeout 120 $B --runs nli,scifact --orders ours --attn varlen_attn --json "$OUT/varlen.json" >"$OUT/varlen.log" 2>&1
  tail -8 "$OUT/varlen.log"
fi
if want rest; then
  timeout 240 $B --runs minilm-nli,cosine,nli-fp32,ce-plistmle --orders ours,st --json "$OUT/rest.json" >"$OUT/rest.log" 2>&1
  tail -16 "$OUT/rest.log"
fi
if want compile; then  # torch_compile=True (layers compiled, dynamic shapes) beside the same run without it
  timeout 300 $B --runs nli,scifact --orders ours,ours+compile --timeout 200 --json "$OUT/compile.json" >"$OUT/compile.log" 2>&1
  tail -10 "$OUT/compile.log"
fi
