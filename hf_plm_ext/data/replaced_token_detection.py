"""ELECTRA's data side: a collator for models that mask their own inputs, and the RTD evaluation metrics."""

from dataclasses import dataclass

import numpy as np
import torch
from transformers import DataCollatorWithPadding


@dataclass
class SpecialTokensMaskCollator:
    """Pads token blocks and marks special tokens, which ELECTRA's own masking leaves alone."""

    tokenizer: object

    def __post_init__(self):
        self._pad = DataCollatorWithPadding(self.tokenizer, pad_to_multiple_of=8)
        self._special_ids = torch.tensor(sorted(self.tokenizer.all_special_ids))

    def __call__(self, features):
        batch = self._pad(features)
        batch["special_tokens_mask"] = torch.isin(batch["input_ids"], self._special_ids).long()
        return batch


def rtd_metrics(eval_prediction):
    """Discriminator AUC / accuracy / precision / recall over non-pad tokens, generator accuracy (mean over batches)."""
    from sklearn.metrics import roc_auc_score

    _, _, generator_accuracy, _, logits, labels = eval_prediction.predictions
    active = labels != -100
    scores, replaced = logits[active], labels[active]
    predicted = scores > 0
    metrics = {
        "generator_accuracy": float(np.mean(generator_accuracy)),
        "discriminator_accuracy": float(np.mean(predicted == replaced)),
        "discriminator_precision": float(np.mean(replaced[predicted])) if predicted.any() else 0.0,
        "discriminator_recall": float(np.mean(predicted[replaced == 1])) if (replaced == 1).any() else 0.0,
        "replaced_share": float(np.mean(replaced)),
    }
    if 0 < replaced.sum() < replaced.size:
        metrics["discriminator_auc"] = float(roc_auc_score(replaced, scores))
    return metrics
