"""The one private PEFT hook: a ``PeftType`` member for the bottleneck method.

``PeftType`` is a closed ``(str, Enum)`` and ``register_peft_method`` refuses a name it lacks
(``Unknown PEFT type BOTTLENECK``), so the member is added to the enum's internals. PEFT 0.21 needs it; when a
release changes the enum, ``tests/test_bottleneck.py::test_the_private_peft_hook_still_works`` fails first.
"""

from peft.utils import PeftType

NAME = "BOTTLENECK"


def add_peft_type(name: str = NAME) -> PeftType:
    """``PeftType[name]``, added if PEFT does not have it (idempotent)."""
    if name in PeftType._member_map_:
        return PeftType[name]
    member = str.__new__(PeftType, name)
    member._name_ = member._value_ = name
    PeftType._member_map_[name] = member
    PeftType._value2member_map_[name] = member
    PeftType._member_names_.append(name)
    type.__setattr__(PeftType, name, member)
    return member


BOTTLENECK = add_peft_type()
