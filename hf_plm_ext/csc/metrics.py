"""Chinese spelling correction scores, as the SIGHAN bake-off defines them, with pycorrector's beside them.

Every sentence is a ``(source, target, prediction)`` triple of one length. An *edit* is a position where a text
differs from the source, with the character it has there.

- **Sentence level** (SIGHAN-15 bake-off, Tseng et al. 2015; the form SpellGCN and later papers compute):
  detection is right for a sentence when its predicted edit positions are exactly the gold ones, correction when
  the predicted edits (positions and characters) are. Precision = right sentences with edits / sentences the
  system edited; recall = right sentences with edits / sentences with errors; accuracy = sentences right
  (clean and untouched included) / all; the false-positive rate = clean sentences the system edited / clean ones.
- **Character level**: detection precision = predicted positions that are errors / predicted positions, recall =
  / gold error positions; correction counts a position right only with the gold character.
- **pycorrector's sentence level** (``compute_sentence_level_prf``, the definition of its published figures): a
  sentence with errors is a true positive when the prediction equals the target, a false negative otherwise; a
  clean sentence is a false positive when changed. So a wrong correction of an erroneous sentence is not a false
  positive there, and its precision runs higher than the bake-off's.
- **pycorrector's character level** (``compute_corrector_prf``): correction scored only over correctly detected
  positions (a sentence with none adds no false negatives).
"""


def _edits(source: str, text: str) -> set[tuple[int, str]]:
    return {(i, c) for i, (s, c) in enumerate(zip(source, text)) if s != c}


def _prf(true_positives, predicted, gold) -> tuple[float, float, float]:
    precision = true_positives / predicted if predicted else 0.0
    recall = true_positives / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def csc_scores(sources, targets, predictions) -> dict[str, float]:
    """The scores above over aligned ``sources``, ``targets`` (the correct sentences) and ``predictions``, each a
    sequence of strings; ``ValueError`` if a triple differs in length."""
    if not len(sources) == len(targets) == len(predictions):
        raise ValueError(f"{len(sources)} sources, {len(targets)} targets, {len(predictions)} predictions")
    if not sources:
        raise ValueError("no sentences to score")
    counts = dict.fromkeys(["detected_sentences", "erroneous_sentences", "clean_sentences", "clean_edited",
                            "detection_hits", "detection_right", "correction_hits", "correction_right",
                            "predicted_chars", "gold_chars", "detected_chars", "corrected_chars",
                            "pyc_tp", "pyc_fp", "pyc_fn", "pyc_tn", "pyc_char_tp", "pyc_char_fp", "pyc_char_fn"], 0)
    for number, (source, target, prediction) in enumerate(zip(sources, targets, predictions), start=1):
        if not len(source) == len(target) == len(prediction):
            raise ValueError(f"sentence {number}: source, target and prediction differ in length "
                             f"({len(source)}, {len(target)}, {len(prediction)})")
        gold, predicted = _edits(source, target), _edits(source, prediction)
        gold_positions, predicted_positions = {i for i, _ in gold}, {i for i, _ in predicted}
        counts["detected_sentences"] += bool(predicted)
        counts["erroneous_sentences"] += bool(gold)
        counts["clean_sentences"] += not gold
        counts["clean_edited"] += not gold and bool(predicted)
        counts["detection_right"] += predicted_positions == gold_positions
        counts["detection_hits"] += bool(predicted) and predicted_positions == gold_positions
        counts["correction_right"] += predicted == gold
        counts["correction_hits"] += bool(predicted) and predicted == gold
        counts["predicted_chars"] += len(predicted)
        counts["gold_chars"] += len(gold)
        counts["detected_chars"] += len(predicted_positions & gold_positions)
        counts["corrected_chars"] += len(predicted & gold)
        if gold:
            counts["pyc_tp" if prediction == target else "pyc_fn"] += 1
        else:
            counts["pyc_fp" if prediction != source else "pyc_tn"] += 1
        detected = sorted(predicted_positions & gold_positions)
        if detected:
            predicted_chars = [prediction[i] for i in detected]
            counts["pyc_char_tp"] += sum(prediction[i] == target[i] for i in detected)
            counts["pyc_char_fp"] += sum(prediction[i] != target[i] for i in detected)
            counts["pyc_char_fn"] += sum(target[i] not in predicted_chars for i in sorted(gold_positions))
    c, n = counts, len(sources)
    scores = {}
    for level, hits, right in (("detection", c["detection_hits"], c["detection_right"]),
                               ("correction", c["correction_hits"], c["correction_right"])):
        p, r, f = _prf(hits, c["detected_sentences"], c["erroneous_sentences"])
        scores.update({f"sentence_{level}_accuracy": right / n, f"sentence_{level}_precision": p,
                       f"sentence_{level}_recall": r, f"sentence_{level}_f1": f})
    scores["sentence_false_positive_rate"] = c["clean_edited"] / c["clean_sentences"] if c["clean_sentences"] else 0.0
    for level, hits in (("detection", c["detected_chars"]), ("correction", c["corrected_chars"])):
        p, r, f = _prf(hits, c["predicted_chars"], c["gold_chars"])
        scores.update({f"char_{level}_precision": p, f"char_{level}_recall": r, f"char_{level}_f1": f})
    p, r, f = _prf(c["pyc_tp"], c["pyc_tp"] + c["pyc_fp"], c["pyc_tp"] + c["pyc_fn"])
    scores.update({"pycorrector_sentence_accuracy": (c["pyc_tp"] + c["pyc_tn"]) / n,
                   "pycorrector_sentence_precision": p, "pycorrector_sentence_recall": r,
                   "pycorrector_sentence_f1": f})
    p, r, f = _prf(c["pyc_char_tp"], c["pyc_char_tp"] + c["pyc_char_fp"], c["pyc_char_tp"] + c["pyc_char_fn"])
    scores.update({"pycorrector_char_correction_precision": p, "pycorrector_char_correction_recall": r,
                   "pycorrector_char_correction_f1": f})
    return scores
