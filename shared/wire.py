"""Base classes for every wire object: lossless, frozen, dumped exactly as it was read.

Two naming conventions meet in a Claude Code transcript line: the envelope is camelCase
(``parentUuid``, ``toolUseResult``) while the embedded Anthropic API objects are snake_case
(``tool_use_id``, ``stop_reason``). Python attributes are always snake_case; :class:`CamelModel`
maps them to camelCase aliases.

Losslessness: unknown fields are kept (``extra="allow"``) and every dump writes only the fields that
were set, so a field absent from the input stays absent while an explicit ``null`` stays ``null`` —
also when the model is nested in a non-wire model (a ledger, a bus record). The ``type`` (and
``role``) discriminators are always dumped even when a factory relied on their default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, SerializationInfo, SerializerFunctionWrapHandler, model_serializer
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from shared.json_types import JsonObject


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

    @model_serializer(mode="wrap")
    def _dump_only_set_fields(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        """Lossless everywhere: a wire object nested in any other model (a ledger, a bus record) dumps
        only the fields it was given, exactly as :meth:`to_wire` does."""
        data = handler(self)
        if not isinstance(data, dict):
            return data
        unset = _optional_fields(type(self)) - self.__pydantic_fields_set__
        if unset:
            by_alias = info.by_alias if info.by_alias is not None else self.model_config.get("serialize_by_alias")
            keys = _dump_keys(type(self), by_alias=bool(by_alias))
            for name in unset:
                data.pop(keys[name], None)
        return data

    def to_wire(self) -> JsonObject:
        """The JSON object this model was read from (or would be written as)."""
        return self.model_dump(mode="json", by_alias=True)

    def to_wire_json(self) -> str:
        """Compact JSON of :meth:`to_wire` (no spaces, like ``JSON.stringify``)."""
        return self.model_dump_json(by_alias=True)


@cache
def _optional_fields(model: type[WireModel]) -> frozenset[str]:
    """The fields a dump leaves out when they were not set (every field but the discriminators)."""
    return frozenset(model.model_fields) - model._always_dumped


@cache
def _dump_keys(model: type[WireModel], *, by_alias: bool) -> Mapping[str, str]:
    """Field name → the key a dump writes it under."""
    keys: dict[str, str] = {}
    for name, field in model.model_fields.items():
        alias = field.serialization_alias or field.alias
        keys[name] = alias if by_alias and alias else name
    return keys


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
