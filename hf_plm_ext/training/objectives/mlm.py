"""``mlm``: token blocks, BERT's random-token masking, a masked-LM head (any family that has one)."""

from dataclasses import dataclass, field

from transformers import AutoModelForMaskedLM, DataCollatorForLanguageModeling

from hf_plm_ext.data.token_blocks import block_frame, token_blocks
from hf_plm_ext.data.token_store.datasets import ExampleMasking, stack_examples, store_blocks
from hf_plm_ext.training.objectives.base import MaskedInputArguments, Objective, encoder_config

TINY_ENCODER = "hidden_size=128,num_hidden_layers=2,num_attention_heads=2,intermediate_size=512"


@dataclass
class MaskedLMArguments(MaskedInputArguments):
    model_type: str = field(default="macbert", metadata={"help": "family of a fresh model"})


class MaskedLM(Objective):
    name = "mlm"
    help = "masked-LM pre-training (BERT's 80/10/10 token masking) of any family with a masked-LM head"
    arguments_class = MaskedLMArguments
    head = AutoModelForMaskedLM
    card_fields = ("mlm_probability", "max_seq_length")
    demo_training = dict(per_device_train_batch_size=32, per_device_eval_batch_size=64, learning_rate=1e-3,
                         weight_decay=0.01)

    def fresh_config(self, tokenizer):
        return encoder_config(self.args.model_type, tokenizer, self.args.max_seq_length)

    def collator(self, tokenizer, seed):
        if self.args.data:  # blocks of one length, masked by the dataset (by example: exact on a resume)
            return stack_examples
        return DataCollatorForLanguageModeling(tokenizer, mlm_probability=self.args.mlm_probability,
                                               pad_to_multiple_of=8)

    def build_data(self, tokenizer, training_args):
        return token_blocks(self.args.corpus, tokenizer, self.args.max_seq_length, training_args.seed,
                            self.args.validation_fraction)

    def build_store_data(self, tokenizer, training_args):
        opening, closing = block_frame(tokenizer)
        masking = ExampleMasking(tokenizer, self.args.mlm_probability, training_args.seed)
        return store_blocks(self.args.data, tokenizer, self.args.tokenizer, self.args.max_seq_length,
                            self.args.validation_fraction, masking, opening, closing)

    @classmethod
    def demo_arguments(cls, corpus, tokenizer, output, validation_corpus=None):
        return MaskedLMArguments(corpus=corpus, tokenizer=tokenizer, output=output, config_overrides=TINY_ENCODER,
                                 max_seq_length=64)

    @classmethod
    def demo_model(cls):
        return f"a tiny macbert encoder ({TINY_ENCODER})"
