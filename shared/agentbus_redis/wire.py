"""Base classes for every wire object: lossless, frozen, dumped exactly as it was read.

Two naming conventions meet in a Claude Code transcript line: the envelope is camelCase
(``parentUuid``, ``toolUseResult``) while the embedded Anthropic API objects are snake_case
(``tool_use_id``, ``stop_reason``). Python attributes are always snake_case; :class:`CamelModel`
maps them to camelCase aliases.

Losslessness: unknown fields are kept (``extra="allow"``) and every dump writes only the fields that
were set (``exclude_unset``), so a field absent from the input stays absent while an explicit ``null``
stays ``null``. The ``type`` (and ``role``, ``v``) discriminators a constructor left to their default
count as set, so a model built in Python dumps them. A model of our own that holds wire objects (a
ledger) derives from :class:`WireHolder` and is dumped the same way.

Why ``exclude_unset`` rather than a serializer hook on every model: the dump stays in pydantic-core. A
wrap ``model_serializer`` called back into Python for every nested object and made a log entry's dump
~4× slower (22 µs against 6 µs for a reply with two blocks); the unions of messages and blocks are
``SerializeAsAny`` for the same reason (a union serializer tries its choices before it writes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Self, TypeVar

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from agentbus_redis.json_types import JsonObject


class WireModel(BaseModel):
    """A frozen, lossless pydantic model whose wire names are its attribute names."""

    model_config = ConfigDict(
        extra="allow",
        frozen=True,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )

    _always_dumped: ClassVar[frozenset[str]] = frozenset({"type", "role"})
    _defaults_set: ClassVar[frozenset[str]] = frozenset()
    """``_always_dumped`` ∩ this class's fields (computed per class)."""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._defaults_set = frozenset(cls.model_fields) & cls._always_dumped

    def __init__(self, /, **data: Any) -> None:
        # Python construction only: a discriminator a constructor left to its default counts as set. (One
        # read from input was set by that input; one absent from it stays absent, like any field.)
        super().__init__(**data)
        if self._defaults_set:
            self.__pydantic_fields_set__.update(self._defaults_set)

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> Self:
        """``cls(**fields)``: the same validation and the same set fields, with the model's validator called
        directly — two Python frames fewer, for the records made per entry on hot paths (ingestion's log entries
        and live deltas)."""
        record: Self = cls.__pydantic_validator__.validate_python(fields)
        if cls._defaults_set:
            record.__pydantic_fields_set__.update(cls._defaults_set)
        return record

    # Validation must not call this ``__init__``: pydantic-core calls a "custom" one for every object it
    # validates, which made a log entry's validation 2.4× slower. The marker is how pydantic's own
    # ``RootModel`` keeps its ``__init__`` out of validation (pinned by
    # ``test_validation_does_not_run_the_constructor``).
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    def to_wire(self) -> JsonObject:
        """The JSON object this model was read from (or would be written as)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    def to_wire_json(self) -> str:
        """Compact JSON of :meth:`to_wire` (no spaces, like ``JSON.stringify``)."""
        return self.model_dump_json(by_alias=True, exclude_unset=True)


class WireHolder(BaseModel):
    """A model of our own that holds wire objects (a ledger state) and is dumped as they are, with
    ``exclude_unset=True``: each of its own fields counts as set, so that dump writes them all — also one
    left to its default and changed in place since (a ``default_factory`` dict filled later)."""

    def model_post_init(self, context: Any, /) -> None:
        self.__pydantic_fields_set__.update(type(self).model_fields)


_Wire = TypeVar("_Wire", bound=WireModel)


def without_fields(model: _Wire, *names: str) -> _Wire:
    """A copy of ``model`` with the fields ``names`` removed, as deleting their keys from the wire
    object and parsing it again would: back to their defaults and unset, so no dump writes them.
    (Cheaper than that round trip: nested objects are shared, nothing is validated again.)"""
    fields = type(model).model_fields
    copy = model.model_copy(update={name: fields[name].get_default(call_default_factory=True) for name in names})
    # model_copy marks the updated fields as set; removed ones must be unset. The copy owns its set, so
    # replacing it leaves ``model`` untouched (``frozen`` guards the fields, not this bookkeeping).
    object.__setattr__(copy, "__pydantic_fields_set__", model.model_fields_set - set(names))
    return copy


def type_literal(model: type[BaseModel]) -> str:
    """The ``type`` a model of a discriminated union is told apart by (its field's default)."""
    default = model.model_fields["type"].default
    if not isinstance(default, str):
        msg = f"{model.__name__}.type has no string default"
        raise TypeError(msg)
    return default


_ABSENT = object()


def field_or_none(model: BaseModel, name: str) -> Any:
    """``getattr(model, name, None)`` for a field or a kept unknown field: without pydantic's miss path.

    On a model that has no such attribute, ``getattr`` goes through ``BaseModel.__getattr__``, which builds
    and raises an ``AttributeError``: about 2 µs, 40 times a hit. The request builder and the ledger ask
    every message for fields only some kinds have (``uuid``, ``tool_use_id``), so that miss was 8% of a
    request's build. A field lives in the instance's ``__dict__`` and a kept unknown one in its extras, as
    ``getattr`` finds them; the names asked this way are never properties or methods."""
    value = model.__dict__.get(name, _ABSENT)
    if value is not _ABSENT:
        return value
    extra = model.__pydantic_extra__
    return extra.get(name) if extra else None


class CamelModel(WireModel):
    """A :class:`WireModel` whose wire names are the camelCase form of its attributes."""

    model_config = ConfigDict(alias_generator=to_camel)


ROUTED_ELSEWHERE = "routed_elsewhere"
"""Error type of a fallback branch refusing a value that belongs to a known model (see :func:`only_routed_to`)."""


def only_routed_to(tag: str, route: Callable[[Any], str]) -> Callable[[Any], Any]:
    """A before-validator for the fallback branch of a ``left_to_right`` union: it accepts only what
    ``route`` sends to ``tag``, so a known kind that fails its own model stays an error instead of
    falling back. It runs only when the literal-discriminated branch before it has failed."""

    def check(value: Any) -> Any:
        if route(value) != tag:
            raise PydanticCustomError(ROUTED_ELSEWHERE, "routed to another model")
        return value

    check.__name__ = f"only_{tag.replace(':', '_')}"
    return check
