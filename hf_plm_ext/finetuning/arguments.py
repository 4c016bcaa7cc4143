"""What ``finetune glue|clue`` takes besides the Trainer's own ``TrainingArguments``."""

from dataclasses import dataclass, field

from hf_plm_ext.errors import UserInputError

ADAPTERS = ["houlsby", "pfeiffer", "parallel", "lora"]


@dataclass
class FinetuneArguments:
    task: str = field(metadata={"help": "task name (see the task table)"})
    model: str = field(metadata={"help": "checkpoint directory (or Hub id, when online)"})
    output: str = field(metadata={"help": "new directory for the fine-tuned model and eval_results.json"})
    data_dir: str | None = field(default=None, metadata={"help": "folder with the task's files under their "
                                                                  "official names (train.tsv/dev.tsv, ...)"})
    train_file: str | None = field(default=None, metadata={"help": "training file instead of --data-dir's (a "
                                                                   "relative name is looked up in --data-dir "
                                                                   "first)"})
    validation_file: str | None = field(default=None, metadata={"help": "validation file instead of --data-dir's "
                                                                        "(looked up as --train-file)"})
    max_seq_length: int = field(default=128, metadata={"help": "longer inputs are truncated"})
    max_train_samples: int | None = field(default=None, metadata={"help": "use only the first N training "
                                                                         "examples"})
    ignore_mismatched_sizes: bool = field(default=False, metadata={"help": "replace a checkpoint's classifier "
                                                                           "whose label count differs"})
    layerwise_lr_decay: float | None = field(default=None, metadata={"help": "layer-wise learning-rate decay for "
                                                                            "BERT-like encoders (ELECTRA: 0.8)"})
    peft_config: str | None = field(default=None, metadata={"help": "a PEFT config JSON (e.g. {\"peft_type\": "
                                                                     "\"LORA\", \"r\": 8, \"target_modules\": "
                                                                     "[\"query\", \"value\"]}): train only that "
                                                                     "adapter and the task head, save only them"})
    adapter: str | None = field(default=None, metadata={
        "help": "train an adapter and the task head only: houlsby, pfeiffer or parallel (this package's bottleneck "
                "adapters, AdapterHub's presets) or lora (PEFT's, r=8 on the attention's query and value)",
        "choices": ADAPTERS})
    freeze_adapters: bool = field(default=False, metadata={
        "help": "a K-Adapter checkpoint: keep its knowledge adapters frozen, train the fusion and the head only "
                "(the paper's --freeze_adapter)"})

    def __post_init__(self):
        if self.peft_config is not None and self.adapter is not None:
            raise UserInputError("--adapter and --peft-config do not go together: --adapter is a ready-made PEFT "
                                 "config")
        if self.layerwise_lr_decay is not None and (self.peft_config or self.adapter):
            raise UserInputError("--layerwise_lr_decay and an adapter do not go together (the decay is for full "
                                 "fine-tuning of an encoder's layers)")
        if self.adapter is not None and self.adapter not in ADAPTERS:
            raise UserInputError(f"--adapter must be one of {', '.join(ADAPTERS)}, got {self.adapter!r}")
