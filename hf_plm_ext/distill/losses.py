"""Distillation losses: TinyBERT's (embeddings, hidden states, attention, prediction), DistilBERT's (KL·T²,
cosine hidden states) and MiniLM's value relation, as tensor functions.

Shapes: ``b`` batch, ``T`` positions, ``h`` heads, ``d`` width, ``C`` classes. ``attention_mask`` is the batch's
``[b, T]`` (1: a token, 0: padding); ``None`` counts every position. Where the reference code differs (TinyBERT's
``task_distill.py``), the docstring says how.
"""

import torch
import torch.nn.functional as F
from torch import nn


def _token_mask(attention_mask, reference: torch.Tensor) -> torch.Tensor:
    """``[b, T]`` float mask (ones where ``attention_mask`` is None)."""
    if attention_mask is None:
        return reference.new_ones(reference.shape[:2])
    return attention_mask.to(reference.dtype)


def _pair_mask(attention_mask, scores: torch.Tensor) -> torch.Tensor:
    """``[b, 1, T, T]`` float mask of the (query, key) pairs where both are tokens."""
    tokens = _token_mask(attention_mask, scores[:, 0, :, 0])
    return (tokens[:, :, None] * tokens[:, None, :])[:, None]


def hidden_mse(student_hidden, teacher_hidden, attention_mask=None) -> torch.Tensor:
    """Mean squared error of ``[b, T, d]`` hidden states (the student's already projected to the teacher's width)
    over the tokens' elements. TinyBERT's embedding-layer and hidden-state loss; its ``MSELoss()`` averages over
    the padding positions too."""
    tokens = _token_mask(attention_mask, student_hidden)[..., None]
    squared = (student_hidden - teacher_hidden).pow(2) * tokens
    return squared.sum() / (tokens.sum() * student_hidden.shape[-1]).clamp(min=1)


def hidden_cosine(student_hidden, teacher_hidden, attention_mask=None) -> torch.Tensor:
    """``1 - cos`` of ``[b, T, d]`` hidden states (same width), averaged over the tokens: DistilBERT's
    ``CosineEmbeddingLoss(target=1)`` on its last hidden state, which also skips the padding."""
    tokens = _token_mask(attention_mask, student_hidden)
    distance = 1 - F.cosine_similarity(student_hidden, teacher_hidden, dim=-1)
    return (distance * tokens).sum() / tokens.sum().clamp(min=1)


def attention_score_mse(student_scores, teacher_scores, attention_mask=None) -> torch.Tensor:
    """Mean squared error of ``[b, h, T, T]`` pre-softmax attention scores (``q·k / √d``, no mask added) over the
    (query, key) pairs of two tokens. TinyBERT zeroes the entries at or below -100 (its added mask) and averages
    over everything, padding queries included; here the attention mask says what counts. The heads must agree."""
    if student_scores.shape[1] != teacher_scores.shape[1]:
        raise ValueError(f"the attention-score MSE compares head by head: the student has "
                         f"{student_scores.shape[1]} heads, the teacher {teacher_scores.shape[1]}; use the "
                         f"attention KL (probabilities, averaged over the heads) for different head counts")
    pairs = _pair_mask(attention_mask, student_scores)
    squared = (student_scores - teacher_scores).pow(2) * pairs
    return squared.sum() / (pairs.sum() * student_scores.shape[1]).clamp(min=1)


def _masked_log_softmax(scores, attention_mask):
    if attention_mask is not None:
        scores = scores.masked_fill(attention_mask[:, None, None, :] == 0, torch.finfo(scores.dtype).min)
    return scores.log_softmax(-1)


def _head_averaged_log_probs(scores, attention_mask):
    """``[b, 1, T, T]`` log of the attention probabilities averaged over the heads."""
    return _masked_log_softmax(scores, attention_mask).exp().mean(1, keepdim=True).clamp(min=1e-12).log()


def _row_kl(student_log_probs, teacher_log_probs, attention_mask) -> torch.Tensor:
    """KL(teacher ‖ student) of ``[b, h, T, T]`` rows, averaged over the heads and the tokens' query rows."""
    kl = (teacher_log_probs.exp() * (teacher_log_probs - student_log_probs)).sum(-1)  # [b, h, T]
    queries = _token_mask(attention_mask, kl[:, 0])[:, None]
    return (kl * queries).sum() / (queries.sum() * kl.shape[1]).clamp(min=1)


def attention_kl(student_scores, teacher_scores, attention_mask=None) -> torch.Tensor:
    """KL(teacher ‖ student) of the attention distributions of ``[b, h, T, T]`` scores (padding keys masked),
    averaged over the heads and the tokens' query rows. Head counts that differ compare the head-averaged
    distributions (``[b, 1, T, T]``)."""
    if student_scores.shape[1] == teacher_scores.shape[1]:
        student, teacher = (_masked_log_softmax(s, attention_mask) for s in (student_scores, teacher_scores))
    else:
        student, teacher = (_head_averaged_log_probs(s, attention_mask) for s in (student_scores, teacher_scores))
    return _row_kl(student, teacher, attention_mask)


def value_relation_kl(student_values, teacher_values, num_relation_heads: int, attention_mask=None) -> torch.Tensor:
    """MiniLM's value-relation loss: ``[b, T, d]`` value projections (any widths) split into
    ``num_relation_heads`` heads; per head the relation ``softmax(V·Vᵀ / √d_head)`` over the token keys;
    KL(teacher ‖ student), averaged over the heads and the tokens' rows."""
    relations = []
    for values in (student_values, teacher_values):
        batch, length, width = values.shape
        if width % num_relation_heads:
            raise ValueError(f"value relations split the values into {num_relation_heads} heads; a width of "
                             f"{width} does not split evenly")
        heads = values.view(batch, length, num_relation_heads, -1).transpose(1, 2)  # [b, r, T, d/r]
        scores = heads @ heads.transpose(-1, -2) / heads.shape[-1] ** 0.5
        relations.append(_masked_log_softmax(scores, attention_mask))
    return _row_kl(*relations, attention_mask)


def soft_cross_entropy(student_logits, teacher_logits, temperature: float = 1.0) -> torch.Tensor:
    """``-Σ_c softmax(t/T)·log_softmax(s/T)`` of ``[b, C]`` logits, averaged over the batch (TinyBERT's prediction
    loss; TinyBERT's ``.mean()`` also divides by the number of classes). No T² factor, as TinyBERT."""
    teacher_probs = (teacher_logits / temperature).softmax(-1)
    return -(teacher_probs * (student_logits / temperature).log_softmax(-1)).sum(-1).mean()


def kl_div_t2(student_logits, teacher_logits, temperature: float = 1.0) -> torch.Tensor:
    """DistilBERT's ``KL(softmax(t/T) ‖ softmax(s/T))`` of ``[b, C]`` logits, averaged over the batch, times T²
    (so the gradients keep their size as T changes)."""
    kl = F.kl_div((student_logits / temperature).log_softmax(-1), (teacher_logits / temperature).log_softmax(-1),
                  reduction="batchmean", log_target=True)
    return kl * temperature**2


def regression_mse(student_predictions, targets) -> torch.Tensor:
    """Mean squared error of ``[b, 1]`` (or ``[b]``) predictions against ``[b]`` targets. TinyBERT's prediction loss
    for regression tasks (STS-B) uses the gold scores, not the teacher's."""
    return F.mse_loss(student_predictions.view(-1).float(), targets.view(-1).float())


PREDICTION_LOSSES = {"soft_ce": soft_cross_entropy, "kl": kl_div_t2}
ATTENTION_LOSSES = {"mse": attention_score_mse, "kl": attention_kl}
HIDDEN_LOSSES = {"mse": hidden_mse, "cosine": hidden_cosine}


class HiddenProjection(nn.Module):
    """The student's hidden states brought to the teacher's width before the hidden-state loss: one linear map
    shared by every matched layer, embeddings included (TinyBERT's ``fit_dense``), or one per matched layer
    (TextBrewer's ``proj``). Widths that agree need none (``identity``); nor does a run that matches no hidden
    states (``num_matched_layers=0``)."""

    def __init__(self, student_width: int, teacher_width: int, num_matched_layers: int, shared: bool = True):
        super().__init__()
        self.identity = student_width == teacher_width
        count = 0 if self.identity or not num_matched_layers else (1 if shared else num_matched_layers)
        self.maps = nn.ModuleList(nn.Linear(student_width, teacher_width) for _ in range(count))

    def forward(self, hidden: torch.Tensor, match_index: int) -> torch.Tensor:
        """``hidden`` [b, T, student width] of the ``match_index``-th matched layer → [b, T, teacher width]."""
        if self.identity:
            return hidden
        return self.maps[match_index if len(self.maps) > 1 else 0](hidden)
