"""Stock checkpoints as users download them, made offline: the published ``config.json`` fields (each entry names
where they were read), random weights, and a tokenizer of the checkpoint's kind saved beside them.

Sources of the fields (read with the project's search tool, 2026-12-07):
- bert-base-chinese, hfl/chinese-macbert-base, hfl/chinese-roberta-wwm-ext: the bert-base-chinese config.json as
  printed by its users (e.g. the excerpts of find_string '"vocab_size": 21128': 12 x 768, heads 12, FFN 3072,
  512 positions, 2 token types, vocab 21128, the pooler_* fields of Google's release); the hfl releases keep
  these fields (ymcui/Chinese-BERT-wwm, ymcui/MacBERT: "the same as BERT-base / BERT-large").
- hfl/chinese-macbert-large: BERT-large's fields (24 x 1024, heads 16, FFN 4096) with vocab 21128, as in the
  Dureader log of find_string '"vocab_size": 21128' (a chinese large BERT config).
- roberta-base: "RobertaForMaskedLM", 12 x 768, FFN 3072, layer_norm_eps 1e-05, max_position_embeddings 514,
  type_vocab_size 1, vocab 50265, bos 0 / pad 1 / eos 2 (find_string '"RobertaForMaskedLM"').
- huawei-noah/TinyBERT_General_4L_312D and 6L_768D: PaddlePaddle/PaddleNLP tinybert configuration
  ("tinybert-4l-312d": 4 x 312, heads 12, FFN 1200; "tinybert-6l-768d": 6 x 768, heads 12, FFN 3072; vocab 30522).
- google/electra-{small,base,large}-{generator,discriminator}: transformers' ElectraConfig defaults are
  electra-small-discriminator's (12 x 256, heads 4, FFN 1024, embedding 128); the generators are 256 wide
  (heads 4, FFN 1024) with the discriminator's embedding size and depth, as the parameter counts of
  keras-team/keras-hub electra_presets.py confirm (small generator 13,548,800 = the small discriminator;
  base generator 33,576,960 = 12 x 256 layers over 768-wide embeddings, with its pooler).
"""

import json
from pathlib import Path

BERT_BASE_CHINESE = dict(
    architectures=["BertForMaskedLM"], attention_probs_dropout_prob=0.1, directionality="bidi", hidden_act="gelu",
    hidden_dropout_prob=0.1, hidden_size=768, initializer_range=0.02, intermediate_size=3072, layer_norm_eps=1e-12,
    max_position_embeddings=512, model_type="bert", num_attention_heads=12, num_hidden_layers=12, pad_token_id=0,
    pooler_fc_size=768, pooler_num_attention_heads=12, pooler_num_fc_layers=3, pooler_size_per_head=128,
    pooler_type="first_token_transform", type_vocab_size=2, vocab_size=21128)
PUBLISHED = {
    "bert-base-chinese": BERT_BASE_CHINESE,
    "hfl/chinese-macbert-base": BERT_BASE_CHINESE,
    "hfl/chinese-roberta-wwm-ext": {**BERT_BASE_CHINESE, "bos_token_id": 0, "eos_token_id": 2},
    "hfl/chinese-macbert-large": {**BERT_BASE_CHINESE, "hidden_size": 1024, "intermediate_size": 4096,
                                  "num_attention_heads": 16, "num_hidden_layers": 24},
    "roberta-base": dict(
        architectures=["RobertaForMaskedLM"], attention_probs_dropout_prob=0.1, bos_token_id=0, eos_token_id=2,
        hidden_act="gelu", hidden_dropout_prob=0.1, hidden_size=768, initializer_range=0.02, intermediate_size=3072,
        layer_norm_eps=1e-05, max_position_embeddings=514, model_type="roberta", num_attention_heads=12,
        num_hidden_layers=12, pad_token_id=1, type_vocab_size=1, vocab_size=50265),
    "huawei-noah/TinyBERT_General_4L_312D": dict(
        model_type="bert", vocab_size=30522, hidden_size=312, num_hidden_layers=4, num_attention_heads=12,
        intermediate_size=1200, hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
        max_position_embeddings=512, type_vocab_size=2, initializer_range=0.02, pad_token_id=0),
    "huawei-noah/TinyBERT_General_6L_768D": dict(
        model_type="bert", vocab_size=30522, hidden_size=768, num_hidden_layers=6, num_attention_heads=12,
        intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
        max_position_embeddings=512, type_vocab_size=2, initializer_range=0.02, pad_token_id=0),
}
ELECTRA = dict(model_type="electra", attention_probs_dropout_prob=0.1, hidden_act="gelu", hidden_dropout_prob=0.1,
               initializer_range=0.02, layer_norm_eps=1e-12, max_position_embeddings=512, pad_token_id=0,
               type_vocab_size=2, vocab_size=30522)
GENERATOR = dict(hidden_size=256, num_attention_heads=4, intermediate_size=1024)
for size, layers, width, heads, embedding in (("small", 12, 256, 4, 128), ("base", 12, 768, 12, 768),
                                              ("large", 24, 1024, 16, 1024)):
    PUBLISHED[f"google/electra-{size}-discriminator"] = dict(
        ELECTRA, architectures=["ElectraForPreTraining"], num_hidden_layers=layers, hidden_size=width,
        num_attention_heads=heads, intermediate_size=4 * width, embedding_size=embedding)
    PUBLISHED[f"google/electra-{size}-generator"] = dict(
        ELECTRA, **GENERATOR, architectures=["ElectraForMaskedLM"], num_hidden_layers=layers, embedding_size=embedding)


def published_config(name: str, **changes):
    """The published config of ``name`` as transformers reads its config.json."""
    from transformers import AutoConfig

    fields = {**PUBLISHED[name], **changes}
    return AutoConfig.for_model(fields.pop("model_type"), **fields)


def roberta_tokenizer(folder: Path, vocab_size=1000):
    """A byte-level BPE tokenizer of RoBERTa's kind (``<s> A </s></s> B </s>``, no token types), trained on the
    embedded demo text."""
    from importlib.resources import files

    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaTokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train([str(files("hf_plm_ext") / "demo_data" / "alice.txt")], vocab_size=vocab_size,
              special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    folder.mkdir(parents=True, exist_ok=True)
    bpe.save_model(str(folder))
    vocab = json.loads((folder / "vocab.json").read_text())
    merges = [tuple(line.split()) for line in (folder / "merges.txt").read_text().splitlines()[1:] if line]
    return RobertaTokenizer(vocab=vocab, merges=merges)


def save_stock(model, tokenizer, folder: Path) -> Path:
    """A stock checkpoint folder as the Hub serves one: weights, config, tokenizer."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


LOGITS = """
import sys, torch, transformers
from safetensors.torch import load_file, save_file
folder, class_name, inputs, out = sys.argv[1:5]
model = getattr(transformers, class_name).from_pretrained(folder).eval()
batch = load_file(inputs)
with torch.no_grad():
    output = model(**batch)
save_file({name: getattr(output, name).contiguous() for name in sys.argv[5:]}, out)
print(type(model).__name__, model.config.model_type, getattr(model.config, "auto_map", None))
"""


def outputs_without_package(folder, class_name, batch: dict, names, scratch: Path) -> tuple[dict, str]:
    """``class_name.from_pretrained(folder)``'s outputs ``names`` on ``batch``, in a process where hf_plm_ext cannot
    be imported; with what that process printed (the class, the model type, the auto_map)."""
    from safetensors.torch import load_file, save_file

    from conftest import fresh_python

    inputs, out = scratch / "inputs.safetensors", scratch / "outputs.safetensors"
    save_file({k: v.contiguous() for k, v in batch.items()}, str(inputs))
    done = fresh_python(LOGITS, folder, class_name, inputs, out, *names)
    assert done.returncode == 0, done.stderr[-3000:]
    return load_file(str(out)), done.stdout.strip()
