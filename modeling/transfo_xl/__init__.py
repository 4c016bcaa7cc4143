from .cache_transfo_xl import TransfoXLCache, TransfoXLMemoryLayer
from .configuration_transfo_xl import TransfoXLConfig
from .modeling_transfo_xl import (
    TransfoXLForSequenceClassification,
    TransfoXLLMHeadModel,
    TransfoXLLMHeadModelOutput,
    TransfoXLModel,
    TransfoXLModelOutput,
    TransfoXLPreTrainedModel,
    TransfoXLSequenceClassifierOutput,
)

__all__ = ["TransfoXLConfig", "TransfoXLModel", "TransfoXLLMHeadModel", "TransfoXLForSequenceClassification",
           "TransfoXLPreTrainedModel", "TransfoXLModelOutput", "TransfoXLLMHeadModelOutput",
           "TransfoXLSequenceClassifierOutput", "TransfoXLCache", "TransfoXLMemoryLayer"]

# The family's classes as hf_plm_ext's registry, the README's table and the family tester read them:
# the Auto class each one serves
AUTO_CLASSES = {
    "AutoConfig": TransfoXLConfig,
    "AutoModel": TransfoXLModel,
    "AutoModelForCausalLM": TransfoXLLMHeadModel,
    "AutoModelForSequenceClassification": TransfoXLForSequenceClassification,
}
# PEFT's default targets (hf_plm_ext/adapters/peft_targets.py registers them), by kind of method: LoRA-like (the
# attention's projections), IA3 (and the feed-forward modules it scales at the input), LayerNorm tuning
PEFT_TARGETS = dict(lora=["qkv_net"], ia3=["qkv_net", "CoreNet.3"], ia3_feedforward=["CoreNet.3"],
                    ln_tuning=["layer_norm"])
# bottleneck adapters' places (hf_plm_ext/adapters/bottleneck/targets.py reads them), by slot
BOTTLENECK_TARGETS = dict(layer=r"(?:.*\.)?layers\.(\d+)", attention="dec_attn.o_net",
                          attention_ln="dec_attn.layer_norm", output="pos_ff.CoreNet", output_ln="pos_ff.layer_norm",
                          output_parallel="pos_ff.CoreNet")
