"""Under ``torchrun``: one epoch of the Trainer's own training loader over a token store's blocks, with dataloader
workers; each rank writes the block numbers it was given (``STORE TOKENIZER OUT``)."""

import json
import sys

import torch
from transformers import AutoTokenizer, Trainer, TrainingArguments

from hf_plm_ext.data.token_blocks import block_frame
from hf_plm_ext.data.token_store.datasets import ExampleMasking, stack_examples, store_blocks

store, tokenizer_dir, out = sys.argv[1:4]
tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
blocks = store_blocks(store, tokenizer, tokenizer_dir, 32, 0.05, ExampleMasking(tokenizer, 0.15, 0),
                      *block_frame(tokenizer))["train"]


class Numbered(torch.utils.data.Dataset):
    def __len__(self):
        return len(blocks)

    def __getitem__(self, index):
        return {**blocks[index], "block": torch.tensor(blocks.block_number(index))}


args = TrainingArguments(output_dir=out, per_device_train_batch_size=8, dataloader_num_workers=2, use_cpu=True,
                         report_to="none", seed=0, remove_unused_columns=False)
trainer = Trainer(model=torch.nn.Linear(1, 1), args=args, train_dataset=Numbered(), data_collator=stack_examples)
seen = [int(b) for batch in trainer.get_train_dataloader() for b in batch["block"]]
with open(f"{out}/rank-{args.process_index}.json", "w") as stream:
    json.dump({"seen": seen, "blocks": [blocks.block_number(i) for i in range(len(blocks))],
               "world_size": args.world_size}, stream)
