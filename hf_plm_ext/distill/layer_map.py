"""Which teacher layer each student layer learns from.

Layers count from 1; hidden state 0 is the embedding output, always matched to the teacher's 0. A student layer
``m`` matches teacher layer ``g(m)`` for both its attention and its output hidden state, as TinyBERT does
(teacher ``atts[g(m) - 1]`` and ``reps[g(m)]``).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class LayerMap:
    """``teacher_layers[m - 1]``: the teacher layer (1-based) that student layer ``m`` learns from."""

    teacher_layers: tuple[int, ...]

    @property
    def hidden_pairs(self) -> tuple[tuple[int, int], ...]:
        """``(student, teacher)`` hidden-state indices, the embeddings' ``(0, 0)`` first."""
        return ((0, 0),) + tuple(enumerate(self.teacher_layers, start=1))

    @property
    def attention_pairs(self) -> tuple[tuple[int, int], ...]:
        """``(student, teacher)`` layer indices (1-based) whose attentions are compared."""
        return tuple(enumerate(self.teacher_layers, start=1))

    def check_depths(self, student_depth: int, teacher_depth: int) -> None:
        if len(self.teacher_layers) != student_depth:
            raise ValueError(f"the layer map names {len(self.teacher_layers)} teacher layers "
                             f"{list(self.teacher_layers)} for a student of {student_depth} layers: one per student "
                             f"layer")
        outside = [layer for layer in self.teacher_layers if not 1 <= layer <= teacher_depth]
        if outside:
            raise ValueError(f"the layer map points at teacher layers {outside}, past the teacher's depth: its "
                             f"layers are 1..{teacher_depth}")


def uniform_layer_map(student_depth: int, teacher_depth: int) -> LayerMap:
    """TinyBERT's ``g(m) = m·N/M``: 12 → 4 gives teacher layers 3, 6, 9, 12. A depth that does not divide evenly
    takes the nearest layer (rounded up at a tie): 6 → 4 gives 2, 3, 5, 6."""
    if not 1 <= student_depth <= teacher_depth:
        raise ValueError(f"a uniform layer map needs a student no deeper than its teacher; got a student of "
                         f"{student_depth} and a teacher of {teacher_depth} layers")
    return LayerMap(tuple(int(m * teacher_depth / student_depth + 0.5) for m in range(1, student_depth + 1)))


def last_layer_map(student_depth: int, teacher_depth: int) -> LayerMap:
    """The teacher's last ``student_depth`` layers, in order (6 → 2 gives 5, 6)."""
    if not 1 <= student_depth <= teacher_depth:
        raise ValueError(f"a last-layers map needs a student no deeper than its teacher; got a student of "
                         f"{student_depth} and a teacher of {teacher_depth} layers")
    return LayerMap(tuple(range(teacher_depth - student_depth + 1, teacher_depth + 1)))


def layer_map_from(spec, student_depth: int, teacher_depth: int) -> LayerMap:
    """``"uniform"``, ``"last"``, or the teacher layers themselves (a list, or ``"2,4,6"``), checked against both
    depths."""
    if spec in (None, "uniform"):
        layer_map = uniform_layer_map(student_depth, teacher_depth)
    elif spec == "last":
        layer_map = last_layer_map(student_depth, teacher_depth)
    else:
        try:
            layers = [int(part) for part in (spec.split(",") if isinstance(spec, str) else spec)]
        except (TypeError, ValueError):
            raise ValueError(f"a layer map is 'uniform', 'last' or teacher layer numbers such as '2,4,6'; got "
                             f"{spec!r}") from None
        layer_map = LayerMap(tuple(layers))
    layer_map.check_depths(student_depth, teacher_depth)
    return layer_map
