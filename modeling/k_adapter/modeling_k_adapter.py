"""K-Adapter (Wang et al., 2021): knowledge adapters chained beside a frozen backbone, as in ``microsoft/K-Adapter``.

``KAdapterModel`` runs the backbone (frozen, ``output_hidden_states``) and every adapter over the chosen hidden
states, then fuses the adapters' outputs with the backbone's last hidden state. The heads read the fused states:
sequence classification (first token), token classification, entity typing (multi-label over a marked entity) and
relation classification (subject and object markers), as the paper's OpenEntity / TACRED heads.

The adapters' transformer layers are transformers' ``BertLayer``s of the adapter's width.
"""

import re
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AutoModel, BertConfig, PreTrainedModel
from transformers import initialization as init
from transformers.dynamic_module_utils import custom_object_save
from transformers.modeling_outputs import SequenceClassifierOutput, TokenClassifierOutput
from transformers.models.bert.modeling_bert import BertLayer
from transformers.utils import ModelOutput, can_return_tuple
from transformers.utils.output_capturing import selected_hidden_states

from .configuration_k_adapter import KAdapterConfig


@dataclass
class KAdapterModelOutput(ModelOutput):
    """
    last_hidden_state: ``[batch, seq, hidden]``, the backbone's last hidden state fused with the adapters'.
    backbone_last_hidden_state: ``[batch, seq, hidden]``, the backbone's alone.
    adapter_states: every adapter's last output (in ``config.adapter_names`` order), ``[batch, adapters, seq,
        hidden]``: batch first, as the Trainer's gathering and pipelines' batching take every output.
    hidden_states, attentions: the backbone's (with ``output_hidden_states`` / ``output_attentions``).
    """

    last_hidden_state: torch.Tensor | None = None
    backbone_last_hidden_state: torch.Tensor | None = None
    adapter_states: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


def adapter_layer_config(config: KAdapterConfig) -> BertConfig:
    return BertConfig(hidden_size=config.adapter_size, num_attention_heads=config.adapter_num_attention_heads,
                      intermediate_size=config.adapter_intermediate_size, hidden_act=config.adapter_hidden_act,
                      hidden_dropout_prob=config.adapter_dropout, attention_probs_dropout_prob=config.adapter_dropout,
                      layer_norm_eps=getattr(config.backbone_config, "layer_norm_eps", 1e-12),
                      attn_implementation=getattr(config, "_attn_implementation", None) or "sdpa")


class KAdapterBlock(nn.Module):
    """One adapter at one backbone layer: ``x + up(transformer(down(x)))``, ``[batch, seq, hidden]`` both ways."""

    def __init__(self, config: KAdapterConfig):
        super().__init__()
        self.down_project = nn.Linear(config.hidden_size, config.adapter_size)
        inner = adapter_layer_config(config)
        self.layers = nn.ModuleList([BertLayer(inner) for _ in range(config.adapter_num_layers)])
        self.up_project = nn.Linear(config.adapter_size, config.hidden_size)
        for module in self.modules():  # _init_weights: the paper's near-identity init, for the adapters alone
            module.is_knowledge_adapter = True

    def forward(self, hidden_states, attention_mask=None):
        """``attention_mask``: additive, ``[batch, 1, 1, seq]`` (0 for tokens, a large negative for padding)."""
        x = self.down_project(hidden_states)
        for layer in self.layers:
            x = layer(x, attention_mask)
        return hidden_states + self.up_project(x)


class KAdapter(nn.Module):
    """A named adapter: one block per read backbone layer, chained (each takes the backbone's state there plus the
    previous block's output)."""

    def __init__(self, config: KAdapterConfig):
        super().__init__()
        self.blocks = nn.ModuleList([KAdapterBlock(config) for _ in config.adapter_layers])
        self.layers, self.skip = list(config.adapter_layers), config.adapter_skip_layers

    def forward(self, backbone_hidden_states, attention_mask=None):
        """``backbone_hidden_states``: the backbone's hidden states (the embeddings first); -> ``[batch, seq, hidden]``."""
        last = torch.zeros_like(backbone_hidden_states[-1])
        outputs = []
        for count, (block, index) in enumerate(zip(self.blocks, self.layers), start=1):
            last = block(backbone_hidden_states[index] + last, attention_mask)
            outputs.append(last)
            if self.skip and count % self.skip == 0:  # the reference's adapter_skip_layers
                last = last + outputs[count // self.skip - 1]
        return last


class KAdapterFusion(nn.Module):
    """The backbone's last hidden state with the adapters': ``concat`` or ``add`` (see :class:`KAdapterConfig`)."""

    def __init__(self, config: KAdapterConfig):
        super().__init__()
        hidden, count = config.hidden_size, len(config.adapter_names)
        self.mode = config.fusion
        if self.mode == "concat":
            self.per_adapter = nn.ModuleList([nn.Linear(2 * hidden, hidden) for _ in range(count)])
            self.combine = nn.Linear(count * hidden, hidden) if count > 1 else None
        else:
            self.dense = nn.Linear(hidden, hidden)

    def forward(self, backbone_last, adapter_states):
        if self.mode == "add":
            return self.dense(backbone_last + sum(adapter_states))
        fused = [dense(torch.cat([backbone_last, state], dim=-1)) for dense, state in zip(self.per_adapter,
                                                                                           adapter_states)]
        return self.combine(torch.cat(fused, dim=-1)) if self.combine is not None else fused[0]


BACKBONE_KEY = re.compile(r"(^|\.)backbone\.")

def chosen_hidden_states(hidden_states: tuple, chosen) -> tuple:
    """``output_hidden_states=True`` keeps all; an index or indices (transformers' reading), those alone in place."""
    wanted = selected_hidden_states(chosen)
    return hidden_states if wanted is None else tuple(
        h if i in {w % len(hidden_states) for w in wanted} else None for i, h in enumerate(hidden_states))



class KAdapterPreTrainedModel(PreTrainedModel):
    config: KAdapterConfig
    config_class = KAdapterConfig
    base_model_prefix = "k_adapter"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    accepts_loss_kwargs = False
    # not saved when the backbone is referenced by path: loaded from there (load_backbone). Its weights only: the
    # backbone's non-persistent buffers (BERT's position_ids, token_type_ids) are never in a checkpoint
    _keys_to_ignore_on_load_missing = [r"backbone\..*(weight|bias)$"]
    renamed_keys = None  # {old key pattern: new}, for checkpoints written before a rename

    def _init_weights(self, module):
        """The adapters at ``adapter_initializer_range`` (the paper's 0.0002); the fusion and heads as the backbone's
        layers (its ``initializer_range``; the reference leaves them at PyTorch's default, about as wide): at
        0.0002 they passed on almost nothing of the backbone, and training collapsed to a constant output. The
        backbone, a sub-model, initialises itself."""
        if getattr(module, "is_knowledge_adapter", False):
            std = self.config.adapter_initializer_range
        else:
            std = getattr(self.config.backbone_config, "initializer_range", 0.02)
        if isinstance(module, nn.Linear):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)

    def save_pretrained(self, save_directory, *args, state_dict=None, **kwargs):
        """Without the backbone's weights when ``config.backbone_name_or_path`` names them (unless
        ``embed_backbone``): the checkpoint holds the adapters and heads, and loading fetches the backbone. A
        backbone of remote code (its config has an ``auto_map``, e.g. hf-plm-ext's ``macbert``) has its code copied
        beside the K-Adapter's, so that ``trust_remote_code=True`` alone loads the checkpoint."""
        if not self.config.saves_backbone():
            state_dict = state_dict if state_dict is not None else self.state_dict()
            state_dict = {key: value for key, value in state_dict.items() if not BACKBONE_KEY.search(key)}
        saved = super().save_pretrained(save_directory, *args, state_dict=state_dict, **kwargs)
        if getattr(self.config.backbone_config, "auto_map", None):
            custom_object_save(self.base_model.backbone, save_directory)
        return saved

    def resize_token_embeddings(self, *args, **kwargs):
        """The backbone's vocabulary, recorded in its sub-config (which ``from_pretrained`` builds it from)."""
        embeddings = self.base_model.backbone.resize_token_embeddings(*args, **kwargs)
        self.config.backbone_config.vocab_size = self.vocab_size = embeddings.num_embeddings
        return embeddings

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        renaming = cls.renamed_keys and kwargs.get("key_mapping") is None
        if renaming:
            kwargs["key_mapping"] = cls.renamed_keys
        loaded = super().from_pretrained(*args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded  # (with output_loading_info)
        if renaming:  # transformers would save with the old names again (it reverts a load's key mapping)
            model._weight_conversions = None
        if not model.config.saves_backbone():
            model.load_backbone()
        model.base_model.freeze()  # loading makes new parameters, which require grad
        return loaded

    def load_backbone(self, name_or_path=None, **kwargs):
        """The backbone's weights from ``name_or_path`` (default ``config.backbone_name_or_path``)."""
        source = name_or_path or self.config.backbone_name_or_path
        backbone = AutoModel.from_pretrained(source, config=self.config.backbone_config, **kwargs)
        target = self.base_model.backbone
        missing, unexpected = target.load_state_dict(backbone.state_dict(), strict=False)
        if missing:
            raise ValueError(f"the backbone at {source} lacks weights this K-Adapter's backbone has: {missing[:5]}")
        self.base_model.freeze()
        return self


class KAdapterModel(KAdapterPreTrainedModel):
    """The frozen backbone, the adapters and their fusion: ``last_hidden_state`` ``[batch, seq, hidden]``."""

    def __init__(self, config: KAdapterConfig):
        super().__init__(config)
        # the modules that train first: transformers' and PEFT's tools that take "the first layer" find an adapter's
        # (the backbone is a frozen feature extractor, never in training mode, so it is never checkpointed)
        self.adapters = nn.ModuleDict({name: KAdapter(config) for name in config.adapter_names})
        self.fusion = KAdapterFusion(config)
        self.backbone = AutoModel.from_config(config.backbone_config)
        self.post_init()
        self.freeze()

    def freeze(self):
        """The backbone frozen, as the paper's, and the adapters of ``config.frozen_adapters``."""
        self.backbone.requires_grad_(False)
        for name in self.config.frozen_adapters:
            self.adapters[name].requires_grad_(False)
        return self

    def get_input_embeddings(self):
        return self.backbone.get_input_embeddings()

    def set_input_embeddings(self, embeddings):
        self.backbone.set_input_embeddings(embeddings)

    def train(self, mode: bool = True):
        super().train(mode)
        self.backbone.train(False)  # frozen: no dropout either, as a fixed feature extractor
        return self

    @can_return_tuple
    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, output_hidden_states=None, output_attentions=None) -> KAdapterModelOutput:
        r"""
        Args:
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds: the backbone's,
                ``[batch, seq]`` (``inputs_embeds`` ``[batch, seq, hidden]``).
        """
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        if output_attentions is None:
            output_attentions = self.config.output_attentions
        backbone_inputs = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                               inputs_embeds=inputs_embeds)
        if token_type_ids is not None:
            backbone_inputs["token_type_ids"] = token_type_ids
        outputs = self.backbone(**backbone_inputs, output_hidden_states=True, output_attentions=output_attentions,
                                return_dict=True)
        hidden_states = outputs.hidden_states
        additive_mask = None
        if attention_mask is not None:
            additive_mask = (1.0 - attention_mask[:, None, None, :].to(hidden_states[-1].dtype)) * torch.finfo(
                hidden_states[-1].dtype).min
        adapter_states = tuple(self.adapters[name](hidden_states, additive_mask) for name in self.config.adapter_names)
        fused = self.fusion(hidden_states[-1], adapter_states)
        return KAdapterModelOutput(last_hidden_state=fused, backbone_last_hidden_state=hidden_states[-1],
                                   adapter_states=torch.stack(adapter_states, dim=1),
                                   hidden_states=None if output_hidden_states in (None, False) else
                                   chosen_hidden_states(hidden_states, output_hidden_states),
                                   attentions=outputs.attentions if output_attentions else None)


class KAdapterClassificationHead(nn.Module):
    """RoBERTa's classification head: dropout -> ``dense`` -> tanh -> dropout -> ``out_proj``. Named ``classifier``
    on the model, the name PEFT's ``task_type="SEQ_CLS"`` trains by default (its layers' own names are also the
    backbone's)."""

    def __init__(self, in_width, hidden_size, num_labels, dropout):
        super().__init__()
        self.dense = nn.Linear(in_width, hidden_size)
        self.out_proj = nn.Linear(hidden_size, num_labels)
        self.dropout = dropout

    def forward(self, features):
        """``features`` ``[batch, in_width]`` -> ``[batch, num_labels]``."""
        return self.out_proj(self.dropout(torch.tanh(self.dense(self.dropout(features)))))


# checkpoints written before the head was one module (its layers at the top level)
OLD_HEAD_KEYS = {r"^dense\.": "classifier.dense.", r"^out_proj\.": "classifier.out_proj."}


class _KAdapterWithHead(KAdapterPreTrainedModel):
    def __init__(self, config: KAdapterConfig):
        super().__init__(config)
        self.k_adapter = KAdapterModel(config)
        dropout = config.classifier_dropout
        if dropout is None:
            dropout = getattr(config.backbone_config, "hidden_dropout_prob", 0.1)
        self.dropout = nn.Dropout(dropout)

    def _encode(self, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_hidden_states,
                output_attentions):
        return self.k_adapter(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                              position_ids=position_ids, inputs_embeds=inputs_embeds,
                              output_hidden_states=output_hidden_states, output_attentions=output_attentions,
                              return_dict=True)

    def _add_tanh_head(self, in_width):
        self.classifier = KAdapterClassificationHead(in_width, self.config.hidden_size, self.config.num_labels,
                                                     self.dropout)

    def _tanh_head(self, features):
        return self.classifier(features)

    @staticmethod
    def _at(hidden, positions):
        """``hidden[b, positions[b]]`` for each row: ``[batch, hidden]``."""
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), positions]


class KAdapterForSequenceClassification(_KAdapterWithHead):
    """A dense -> tanh -> projection head on the first token of the fused states; the loss follows
    ``config.problem_type`` (transformers' rule)."""

    renamed_keys = OLD_HEAD_KEYS

    def __init__(self, config: KAdapterConfig):
        super().__init__(config)
        self._add_tanh_head(config.hidden_size)
        self.post_init()

    @can_return_tuple
    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_hidden_states=None, output_attentions=None) -> SequenceClassifierOutput:
        outputs = self._encode(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                               output_hidden_states, output_attentions)
        logits = self._tanh_head(outputs.last_hidden_state[:, 0])
        loss = None if labels is None else self.loss_function(labels=labels, pooled_logits=logits, config=self.config)
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                        attentions=outputs.attentions)


class KAdapterForTokenClassification(_KAdapterWithHead):
    """A projection of every fused token: ``logits`` ``[batch, seq, num_labels]``; ``labels`` -100 where none."""

    def __init__(self, config: KAdapterConfig):
        super().__init__(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_hidden_states=None, output_attentions=None) -> TokenClassifierOutput:
        outputs = self._encode(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                               output_hidden_states, output_attentions)
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        return TokenClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                     attentions=outputs.attentions)


class KAdapterForEntityTyping(_KAdapterWithHead):
    """OpenEntity's head: the fused state at the entity's marker (``entity_positions`` ``[batch]``, e.g. the first
    "@") -> dense -> tanh -> one logit per type; multi-label (``labels`` ``[batch, num_labels]`` of 0/1, binary
    cross-entropy)."""

    renamed_keys = OLD_HEAD_KEYS

    def __init__(self, config: KAdapterConfig):
        super().__init__(config)
        self._add_tanh_head(config.hidden_size)
        self.post_init()

    @can_return_tuple
    def forward(self, input_ids=None, entity_positions=None, attention_mask=None, token_type_ids=None,
                position_ids=None, inputs_embeds=None, labels=None, output_hidden_states=None,
                output_attentions=None) -> SequenceClassifierOutput:
        outputs = self._encode(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                               output_hidden_states, output_attentions)
        if entity_positions is None:
            raise ValueError("KAdapterForEntityTyping needs entity_positions [batch]: where each entity is marked")
        logits = self._tanh_head(self._at(outputs.last_hidden_state, entity_positions))
        loss = None
        if labels is not None:
            loss = nn.functional.binary_cross_entropy_with_logits(logits.float(), labels.float())
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                        attentions=outputs.attentions)


class KAdapterForRelationClassification(_KAdapterWithHead):
    """TACRED's head: the fused states at the subject and object markers (``subject_positions``,
    ``object_positions`` ``[batch]``) side by side -> dense -> tanh -> one logit per relation (cross-entropy)."""

    renamed_keys = OLD_HEAD_KEYS

    def __init__(self, config: KAdapterConfig):
        super().__init__(config)
        self._add_tanh_head(2 * config.hidden_size)
        self.post_init()

    @can_return_tuple
    def forward(self, input_ids=None, subject_positions=None, object_positions=None, attention_mask=None,
                token_type_ids=None, position_ids=None, inputs_embeds=None, labels=None, output_hidden_states=None,
                output_attentions=None) -> SequenceClassifierOutput:
        outputs = self._encode(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                               output_hidden_states, output_attentions)
        if subject_positions is None or object_positions is None:
            raise ValueError("KAdapterForRelationClassification needs subject_positions and object_positions [batch]")
        pair = torch.cat([self._at(outputs.last_hidden_state, subject_positions),
                          self._at(outputs.last_hidden_state, object_positions)], dim=-1)
        logits = self._tanh_head(pair)
        loss = None if labels is None else nn.functional.cross_entropy(logits.float(), labels)
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                        attentions=outputs.attentions)


__all__ = ["KAdapterModel", "KAdapterForSequenceClassification", "KAdapterForTokenClassification",
           "KAdapterForEntityTyping", "KAdapterForRelationClassification", "KAdapterPreTrainedModel",
           "KAdapterModelOutput"]
