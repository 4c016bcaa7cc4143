"""Train a tokenizer from raw text files with the ``tokenizers`` library.

Every kind uses BERT's special tokens (``[PAD] [UNK] [CLS] [SEP] [MASK]``, ids 0-4) and BERT's
``[CLS] A [SEP] B [SEP]`` template, so any kind works with the package's encoders and with the
GLUE/CLUE runner. The result is a ``PreTrainedTokenizerFast`` that ``AutoTokenizer`` reloads.

* ``wordpiece``: BERT's normaliser and pre-tokeniser. CJK characters are split apart before the
  model sees them, so a Chinese corpus gives a character-level vocabulary like bert-base-chinese's.
* ``wordlevel``: the same pipeline with whole words only.
* ``bpe``: byte-level BPE (GPT-2/RoBERTa): no unknown tokens.
* ``unigram``: SentencePiece-style unigram LM over ``▁``-marked words.

Two kinds serve left-to-right language models (Transformer-XL) instead: no template, special
tokens ``<unk>`` and ``<eos>`` (ids 0, 1; the LM appends ``<eos>`` to every line):

* ``words``: whitespace-separated words, as the Transformer-XL reference reads WikiText; every word decodes
  with the space before it (as GPT-2's byte-level BPE with a prefix space does), so a continuation decoded
  alone — ``pipeline("text-generation")`` decodes only the new tokens — does not stick to its prompt;
* ``chars``: every character a token (bits per character for enwik8/text8-style models).

Their ``model_max_length`` is unlimited unless given: a segment-memory model has no length limit, and a
limit of 512 only made transformers warn about every long text.
"""

import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from hf_plm_ext.errors import UserInputError
from hf_plm_ext.files import check_text_file

KINDS = ("wordpiece", "bpe", "wordlevel", "unigram", "words", "chars")
LM_KINDS = ("words", "chars")
LM_SPECIAL_TOKENS = {"unk_token": "<unk>", "eos_token": "<eos>"}
SPECIAL_TOKENS = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]",
                  "sep_token": "[SEP]", "mask_token": "[MASK]"}


def _bert_normalizer(lowercase):
    return normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                      strip_accents=lowercase, lowercase=lowercase)


def _pipeline(kind, vocab_size, min_frequency, lowercase):
    """Return ``(tokenizer, trainer)`` for one kind, untrained."""
    specials = list(SPECIAL_TOKENS.values())
    unk = SPECIAL_TOKENS["unk_token"]
    if kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token=unk))
        tok.normalizer = _bert_normalizer(lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                            special_tokens=specials)
    elif kind == "wordlevel":
        tok = Tokenizer(models.WordLevel(unk_token=unk))
        tok.normalizer = _bert_normalizer(lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordLevelTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                            special_tokens=specials)
    elif kind == "bpe":
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.Sequence([normalizers.NFC()] + ([normalizers.Lowercase()] if lowercase else []))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    elif kind == "unigram":
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.Sequence([normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else []))
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=specials, unk_token=unk)
    elif kind in LM_KINDS:
        tok = Tokenizer(models.WordLevel(unk_token=LM_SPECIAL_TOKENS["unk_token"]))
        if lowercase:
            tok.normalizer = normalizers.Lowercase()
        if kind == "words":
            tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
            tok.decoder = decoders.Replace(Regex("^"), " ")
        else:
            tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
            tok.decoder = decoders.Fuse()
        trainer = trainers.WordLevelTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                            special_tokens=list(LM_SPECIAL_TOKENS.values()))
    else:
        raise UserInputError(f"unknown tokenizer kind {kind!r}; choose one of {', '.join(KINDS)}")
    return tok, trainer


def _train_wordpiece_reproducibly(tok, trainer, files):
    """The WordPiece trainer numbers the ``##`` pieces of single characters as it meets them in a hash map, and breaks
    ties between equally frequent merges by those numbers, so one corpus gave other ids and other merges on every
    run, and a model pre-trained on them did not reproduce (huggingface/tokenizers#1794). Those pieces are given to
    it in sorted order, as special tokens to fix their ids, and made plain vocabulary again afterwards."""
    pieces = set()
    for file in files:
        with open(file, encoding="utf-8") as handle:
            for line in handle:
                for word, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(line)):
                    pieces.update(word[1:])
    specials = list(SPECIAL_TOKENS.values())
    trainer.special_tokens = specials + sorted("##" + character for character in pieces)
    tok.train(files, trainer)
    trained = Tokenizer(models.WordPiece(tok.get_vocab(), unk_token=SPECIAL_TOKENS["unk_token"]))
    trained.normalizer, trained.pre_tokenizer, trained.decoder = tok.normalizer, tok.pre_tokenizer, tok.decoder
    trained.add_special_tokens(specials)
    return trained


def train_tokenizer(corpus_files, kind="wordpiece", vocab_size=8000, min_frequency=2, lowercase=True,
                    model_max_length=None) -> PreTrainedTokenizerFast:
    """Train a tokenizer of ``kind`` on ``corpus_files`` (plain UTF-8 text, read line by line).

    ``model_max_length``: default 512 for the encoder kinds, unlimited for ``words`` and ``chars``.
    """
    if not corpus_files:
        raise UserInputError("no corpus files given")
    files = [str(check_text_file(f)) for f in corpus_files]
    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise UserInputError(f"--vocab-size must be larger than the {len(SPECIAL_TOKENS)} special tokens, "
                             f"got {vocab_size}")
    if model_max_length is not None and model_max_length < 1:
        raise UserInputError(f"--model-max-length must be positive, got {model_max_length}")
    tok, trainer = _pipeline(kind, vocab_size, min_frequency, lowercase)
    trainer.show_progress = sys.stderr.isatty()  # its bars are blank lines in a log
    if kind == "wordpiece":
        tok = _train_wordpiece_reproducibly(tok, trainer, files)
    else:
        tok.train(files, trainer)
    specials = LM_SPECIAL_TOKENS if kind in LM_KINDS else SPECIAL_TOKENS
    if tok.get_vocab_size() <= len(specials):
        raise UserInputError(f"the corpus ({', '.join(files)}) yielded no vocabulary: is it empty?")
    if kind in LM_KINDS:
        length_limit = {} if model_max_length is None else {"model_max_length": model_max_length}
        # padded with eos, as transformers users pad GPT-2: clients pad batches (sentence-transformers, pipelines)
        return PreTrainedTokenizerFast(tokenizer_object=tok, model_input_names=["input_ids", "attention_mask"],
                                       **length_limit, **specials, pad_token=specials["eos_token"])
    cls, sep = SPECIAL_TOKENS["cls_token"], SPECIAL_TOKENS["sep_token"]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}",
        pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, tok.token_to_id(cls)), (sep, tok.token_to_id(sep))],
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok,
                                   model_max_length=512 if model_max_length is None else model_max_length,
                                   model_input_names=["input_ids", "token_type_ids", "attention_mask"],
                                   **SPECIAL_TOKENS)


def pad_with_eos(tokenizer) -> None:
    """Pad with the eos token where a tokenizer has none to pad with (a causal LM's: GPT-2's, a Transformer-XL's
    words), as transformers users do, and return attention masks, so that padded batches say where the padding is
    (a causal classifier pools each row's last real token; sentence-transformers averages the real ones)."""
    tokenizer.pad_token = tokenizer.eos_token
    if "attention_mask" not in tokenizer.model_input_names:
        tokenizer.model_input_names = [*tokenizer.model_input_names, "attention_mask"]


CONTINUATION_SAMPLE = "the queen said two several things, and it rained."


def check_continuations_decode(tokenizer, where: str, sample: str = CONTINUATION_SAMPLE) -> None:
    """Refuse a causal LM's tokenizer whose generated tokens, decoded alone (as ``pipeline("text-generation")``'s
    new text and lm-eval's ``generate_until`` are), do not read as they read in the whole text: WordPiece's
    continuations lose their space and start with ``##``, WordLevel's and Unigram's lose their space. Every split of
    ``sample`` must decode, in two parts, to the whole's text."""
    ids = tokenizer(sample, add_special_tokens=False)["input_ids"]
    whole = tokenizer.decode(ids)
    for split in range(1, len(ids)):
        head, tail = tokenizer.decode(ids[:split]), tokenizer.decode(ids[split:])
        if head + tail != whole:
            raise UserInputError(
                f"--tokenizer {where}: a causal LM's continuation decoded alone must read as in the whole text, and "
                f"this tokenizer's do not ({head!r} + {tail!r} is not {whole!r}); pipelines and lm-eval would print "
                f"that. Train one whose tokens carry their spaces: hf-plm-ext tokenizer train --kind bpe (byte-level "
                f"BPE), or --kind words / chars")


def make_causal(tokenizer) -> None:
    """A BERT-style tokenizer as a causal LM's (GPT-2's convention): bos / eos are ``[CLS]`` / ``[SEP]`` where it has
    none, a text gets the bos in front and no eos after (a prompt that ended in the eos would say the text is over),
    and it returns only what a causal model reads (no ``token_type_ids``). Documents in pre-training blocks are still
    framed by bos / eos (:func:`~hf_plm_ext.data.token_blocks.block_frame`). In place; ``save_pretrained`` keeps it,
    so this also re-saves a tokenizer of a checkpoint written before it existed."""
    for name, block_token in (("bos_token", tokenizer.cls_token), ("eos_token", tokenizer.sep_token)):
        if getattr(tokenizer, name) is None and block_token is not None:
            setattr(tokenizer, name, block_token)
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is None:
        raise UserInputError(f"make_causal needs a fast tokenizer (tokenizers' backend), got "
                             f"{type(tokenizer).__name__}")
    bos = tokenizer.bos_token
    if bos is None:
        backend.post_processor = None
    else:
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A $B:1", special_tokens=[(bos, tokenizer.bos_token_id)])
    tokenizer.model_input_names = [name for name in tokenizer.model_input_names if name != "token_type_ids"]
