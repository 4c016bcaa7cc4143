import torch
from datasets import Dataset
from transformers import Trainer, TrainingArguments

from hf_plm_ext import MacBertForSequenceClassification

from conftest import tiny_macbert_config


def _one_optimizer_step(tmp_path, batch_size, accumulation):
    torch.manual_seed(0)
    model = MacBertForSequenceClassification(tiny_macbert_config(hidden_dropout_prob=0.0,
                                                                 attention_probs_dropout_prob=0.0))
    generator = torch.Generator().manual_seed(1)
    data = Dataset.from_dict({"input_ids": torch.randint(5, 1500, (8, 12), generator=generator).tolist(),
                              "labels": [0, 1, 1, 0, 1, 0, 0, 1]})
    args = TrainingArguments(output_dir=str(tmp_path / f"run{accumulation}"), per_device_train_batch_size=batch_size,
                             gradient_accumulation_steps=accumulation, max_steps=1, learning_rate=0.1, optim="sgd",
                             lr_scheduler_type="constant", train_sampling_strategy="sequential", report_to="none",
                             save_strategy="no", use_cpu=True, disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=data).train()
    return model.classifier.weight.detach().clone()


def test_gradient_accumulation_matches_one_big_batch(tmp_path):
    """The heads return batch means (accepts_loss_kwargs = False), so the Trainer divides by the
    accumulation steps; a model that claimed to normalise itself would take a 2x step here."""
    assert MacBertForSequenceClassification.accepts_loss_kwargs is False
    big_batch = _one_optimizer_step(tmp_path, batch_size=8, accumulation=1)
    accumulated = _one_optimizer_step(tmp_path, batch_size=4, accumulation=2)
    assert torch.allclose(big_batch, accumulated, atol=1e-6)
