# Sourced by the recipe drivers here (device_run.sh, seq_run.sh, parallel_run.sh) on the GPU machine: llmcompressor
# and compressed-tensors from the carried .whl/, the SmolLM2-135M-Instruct GGUF joined from its two halves (/tmp/smol/a
# from the previous call, .blob_b now), dequantized once to a bf16 HF folder at /tmp/smol-hf that both arms load.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD COMPRESS_DATA_DIR=$PWD/.data HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
gguf=/tmp/smol/SmolLM2-135M-Instruct.Q4_1.gguf
test -f $gguf || cat /tmp/smol/a .blob_b/part > $gguf
test -f /tmp/smol-hf/model.safetensors || python3 - <<'PY'
import torch
from compress.model_source import load_model, load_tokenizer, resolve_model
src = resolve_model("/tmp/smol/SmolLM2-135M-Instruct.Q4_1.gguf")
m, t = load_model(src, "cpu"), load_tokenizer(src)
m.to(torch.bfloat16).save_pretrained("/tmp/smol-hf"); t.save_pretrained("/tmp/smol-hf")
PY
