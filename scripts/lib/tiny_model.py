"""Write a tiny model directory (a byte-level BPE tokenizer and a Llama config, no weights) for
Dynamo's mocker, built locally with `tokenizers` (no model hub). Deterministic for one set of
package versions. Usage: tiny_model.py DIR"""
import itertools
import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

# The mocker answers with token ids drawn from [1000, 2000) (measured, ai-dynamo 1.6.1): the
# vocabulary must reach past them, or every answer decodes to "" and a load generator that
# reads the text (AIPerf) counts each request as failed. A corpus of made-up words of two or
# three syllables gives a 4096-token vocabulary whose every token decodes to text.
VOCAB = 4096
SYLLABLES = ["ka", "to", "mi", "ra", "ne", "su", "lo", "pe", "di", "gu",
             "fa", "zo", "wi", "be", "ch", "sh", "th", "qu", "an", "or"]
words = ["".join(p) for n in (2, 3) for p in itertools.product(SYLLABLES, repeat=n)]
corpus = ["hello world this is a tiny model for tests ping pong"] + [
    " ".join(words[i:i + 12]) for i in range(0, len(words), 12)
]

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(
    corpus * 3,
    trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    ),
)
assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
assert tok.decode(list(range(1000, 2000))).strip(), "ids 1000..2000 must decode to text"
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
    "vocab_size": VOCAB,
    "max_position_embeddings": 2048,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float16",
}
(out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
print(out)
