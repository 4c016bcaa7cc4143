"""``electra``: token blocks; the ``electra-rtd`` model masks, samples and discriminates itself (``--size``),
evaluation reports the discriminator's AUC."""

from dataclasses import dataclass, field
from pathlib import Path

from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig, AutoModelForPreTraining, ElectraForMaskedLM, ElectraForPreTraining

from hf_plm_ext.checkpoints.loading import check_same_tokenizer, check_sequence_length, load_pretrained
from hf_plm_ext.data.replaced_token_detection import SpecialTokensMaskCollator, rtd_metrics
from hf_plm_ext.data.token_blocks import block_frame, token_blocks
from hf_plm_ext.data.token_store.datasets import store_blocks
from hf_plm_ext.errors import UserInputError, last_line
from hf_plm_ext.training.objectives.base import MaskedInputArguments, Objective, special_token_ids
from hf_plm_ext.training.objectives.mlm import MaskedLM


@dataclass
class ElectraArguments(MaskedInputArguments):
    size: str = field(default="small", metadata={"help": "discriminator size: tiny (2 x 128), small (12 x 256) or "
                                                          "base (12 x 768); the generator has 1/4 of its width "
                                                          "(base: 1/3)"})
    generator: str | None = field(default=None, metadata={"help": "continue a stock ELECTRA pair (e.g. Google's "
                                                                   "electra-*-generator): its generator, with "
                                                                   "--discriminator"})
    discriminator: str | None = field(default=None, metadata={"help": "the pair's discriminator (its tokenizer is "
                                                                       "the default --tokenizer)"})

    def __post_init__(self):
        if (self.generator is None) != (self.discriminator is None):
            raise UserInputError("--generator and --discriminator go together: the two halves of a stock ELECTRA "
                                 "pair")
        if self.discriminator is not None:
            if self.model is not None:
                raise UserInputError("--model continues an `pretrain electra` run; --generator/--discriminator a "
                                     "stock pair: give one or the other")
            if self.tokenizer is None:
                self.tokenizer = self.discriminator
        super().__post_init__()


class ElectraRTD(Objective):
    name = "electra"
    help = "ELECTRA replaced-token detection: a generator and a discriminator trained together"
    arguments_class = ElectraArguments
    head = AutoModelForPreTraining
    model_types = ("electra-rtd",)
    label_names = ()  # the model masks its inputs and makes its labels itself
    card_fields = ("mlm_probability", "max_seq_length", "size")
    demo_training = MaskedLM.demo_training

    def fresh_config(self, tokenizer):
        from hf_plm_ext.modeling.electra_rtd import ElectraRTDConfig

        if tokenizer.mask_token_id is None:
            raise UserInputError(f"the tokenizer in {self.args.tokenizer} has no mask token; ELECTRA's generator "
                                 f"needs one")
        try:
            config = ElectraRTDConfig.from_size(self.args.size, vocab_size=len(tokenizer),
                                                **special_token_ids(tokenizer),
                                                mask_token_id=tokenizer.mask_token_id,
                                                mask_prob=self.args.mlm_probability)
        except (ValueError, StrictDataclassError) as err:
            raise UserInputError(f"--size {self.args.size!r}: {last_line(err)}") from None
        for part in (config.discriminator_config, config.generator_config):
            part.max_position_embeddings = max(part.max_position_embeddings, self.args.max_seq_length)
        return config

    def check_checkpoint(self, config, where):
        if config.model_type == "electra":
            raise UserInputError(f"--model {where} is one half of a stock ELECTRA pair ('electra'); continue the pair "
                                 f"with --generator GENERATOR --discriminator DISCRIMINATOR")
        super().check_checkpoint(config, where)

    def start_from(self, tokenizer):
        """The stock pair of ``--generator`` / ``--discriminator``, its embeddings shared (the discriminator's)."""
        if self.args.discriminator is None:
            return None
        from hf_plm_ext.modeling.electra_rtd import ElectraForRTDPreTraining

        halves = {}
        for half, head in (("discriminator", ElectraForPreTraining), ("generator", ElectraForMaskedLM)):
            where = getattr(self.args, half)
            config = load_pretrained(AutoConfig, where, f"{half} config")
            if config.model_type != "electra":
                raise UserInputError(f"--{half} {where} is a {config.model_type!r} checkpoint; a stock ELECTRA pair "
                                     f"is two 'electra' checkpoints (e.g. google/electra-small-generator and "
                                     f"-discriminator)")
            halves[half] = load_pretrained(head, where, half)
        discriminator, generator = halves["discriminator"].config, halves["generator"].config
        for name in ("vocab_size", "embedding_size"):
            if getattr(discriminator, name) != getattr(generator, name):
                raise UserInputError(f"--generator {self.args.generator} and --discriminator "
                                     f"{self.args.discriminator} are not a pair: {name} {getattr(generator, name)} vs "
                                     f"{getattr(discriminator, name)}; ELECTRA's halves share one embedding table")
        if tokenizer.mask_token_id is None:
            raise UserInputError(f"the tokenizer in {self.args.tokenizer} has no mask token; ELECTRA's generator "
                                 f"needs one")
        try:
            model = ElectraForRTDPreTraining.from_discriminator_and_generator(
                halves["discriminator"], halves["generator"], mask_token_id=tokenizer.mask_token_id,
                mask_prob=self.args.mlm_probability, pad_token_id=discriminator.pad_token_id)
        except (ValueError, StrictDataclassError) as err:
            raise UserInputError(f"--generator / --discriminator: {last_line(err)}") from None
        check_same_tokenizer(tokenizer, self.args.tokenizer, self.args.generator)
        self.configure_checkpoint(model, tokenizer, self.args.discriminator)
        return model

    def configure_checkpoint(self, model, tokenizer, where):
        super().configure_checkpoint(model, tokenizer, where)
        check_sequence_length(model.discriminator, self.args.max_seq_length)  # the pair's config has no positions

    def collator(self, tokenizer, seed):
        return SpecialTokensMaskCollator(tokenizer)

    def build_data(self, tokenizer, training_args):
        return token_blocks(self.args.corpus, tokenizer, self.args.max_seq_length, training_args.seed,
                            self.args.validation_fraction)

    def build_store_data(self, tokenizer, training_args):
        # the model masks its own inputs, from torch's generator, which a checkpoint saves and a resume restores
        opening, closing = block_frame(tokenizer)
        return store_blocks(self.args.data, tokenizer, self.args.tokenizer, self.args.max_seq_length,
                            self.args.validation_fraction, None, opening, closing)

    def trainer_kwargs(self):
        return {"compute_metrics": rtd_metrics}

    @classmethod
    def card_rows(cls, results):
        auc = results.get("final_eval_metrics", {}).get("eval_discriminator_auc")
        return {} if auc is None else {"held-out discriminator AUC": round(auc, 4)}

    @classmethod
    def demo_arguments(cls, corpus, tokenizer, output, validation_corpus=None):
        return ElectraArguments(corpus=corpus, tokenizer=tokenizer, output=output, size="tiny", max_seq_length=64)

    @classmethod
    def demo_model(cls):
        return "an ELECTRA tiny pair (discriminator 2 x 128, generator 2 x 32)"

    @classmethod
    def checkpoint_to_finetune(cls, run_dir: Path, scratch: Path) -> Path:
        """Fine-tuning starts from the discriminator alone, a stock ``electra`` checkpoint."""
        from hf_plm_ext.convert.electra import export_electra

        export_electra(run_dir, scratch / "discriminator", "discriminator")
        return scratch / "discriminator"
