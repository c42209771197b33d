"""Write a tiny model directory (a byte-level BPE tokenizer and a Llama config, no weights) for
Dynamo's mocker, built locally with `tokenizers` (no model hub). Deterministic for one set of
package versions. Usage: tiny_model.py DIR"""
import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel()
tok.train_from_iterator(
    ["hello world this is a tiny model for tests ping pong"] * 100,
    trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"]),
)
fast = PreTrainedTokenizerFast(
    tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
)
fast.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
fast.save_pretrained(str(out))
config = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 4,
    "intermediate_size": 128,
    "vocab_size": 300,
    "max_position_embeddings": 2048,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float16",
}
(out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
print(out)
