"""Text files as token blocks (``[CLS] ... [SEP]`` for masked-LM pre-training), with a held-out split."""

from datasets import load_dataset

from hf_plm_ext.errors import UserInputError
from hf_plm_ext.files import check_text_file


def block_frame(tokenizer, causal=False) -> tuple[list, list]:
    """The ids that open and close each block: ``[CLS]`` / ``[SEP]`` for an encoder (required); for a causal
    model its bos / eos (else ``[CLS]`` / ``[SEP]``), each where the tokenizer has one (a ``chars`` tokenizer:
    none / ``<eos>``)."""
    if not causal:
        if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
            raise UserInputError("the tokenizer has no [CLS]/[SEP] tokens; encoders need both")
        return [tokenizer.cls_token_id], [tokenizer.sep_token_id]
    first_given = lambda *ids: [i for i in ids if i is not None][:1]  # noqa: E731
    return (first_given(tokenizer.bos_token_id, tokenizer.cls_token_id),
            first_given(tokenizer.eos_token_id, tokenizer.sep_token_id))


def token_blocks(corpus_files, tokenizer, block_length, seed=0, validation_fraction=0.05, causal=False):
    """Tokenise text files and cut the token stream into blocks of ``block_length``, each framed by
    :func:`block_frame` (``[CLS] ... [SEP]`` for an encoder).

    Returns a ``DatasetDict`` with ``train`` and ``test`` (held-out) splits of ``input_ids``.
    """
    files = [str(check_text_file(f)) for f in corpus_files]
    opening, closing = block_frame(tokenizer, causal)
    if block_length < 8:
        raise UserInputError(f"--max_seq_length must be at least 8, got {block_length}")
    raw = load_dataset("text", data_files={"train": files})["train"]
    body = block_length - len(opening) - len(closing)

    def to_blocks(batch):
        ids = [i for line in tokenizer(batch["text"], add_special_tokens=False)["input_ids"] for i in line]
        blocks = [ids[start:start + body] for start in range(0, len(ids) - body + 1, body)]
        return {"input_ids": [[*opening, *b, *closing] for b in blocks]}

    blocks = raw.map(to_blocks, batched=True, batch_size=2000, remove_columns=["text"], desc="token blocks")
    if len(blocks) < 2:
        raise UserInputError(f"the corpus ({', '.join(files)}) gives fewer than 2 blocks of {block_length} tokens")
    return hold_out(blocks, validation_fraction, seed)


def hold_out(dataset, fraction, seed):
    """``train`` and ``test`` splits, at least one example held out."""
    return dataset.train_test_split(test_size=max(1, int(len(dataset) * fraction)), seed=seed)
