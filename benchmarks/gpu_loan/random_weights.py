"""Device smoke test only: a random-weight SmolLM2 where dpsynth looks for the dequantised one."""
import sys
from pathlib import Path

from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from dpsynth.backends.smollm import weights

folder = weights.cache_root() / weights.gguf_digest() / "hf"
source = Path(sys.argv[1])
AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source)).save_pretrained(folder)
AutoTokenizer.from_pretrained(source).save_pretrained(folder)
print("random weights at", folder)
