"""Base classes for every wire object: lossless, frozen, dumped exactly as it was read.

Two naming conventions meet in a Claude Code transcript line: the envelope is camelCase
(``parentUuid``, ``toolUseResult``) while the embedded Anthropic API objects are snake_case
(``tool_use_id``, ``stop_reason``). Python attributes are always snake_case; :class:`CamelModel`
maps them to camelCase aliases.

Losslessness: unknown fields are kept (``extra="allow"``) and dumping uses ``exclude_unset`` so a
field absent from the input stays absent, while an explicit ``null`` stays ``null``. The ``type``
(and ``role``) discriminators are always dumped even when a factory relied on their default.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, SerializationInfo, SerializerFunctionWrapHandler, model_serializer
from pydantic.alias_generators import to_camel

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

    def model_post_init(self, context: Any, /) -> None:
        self.__pydantic_fields_set__.update(self._always_dumped & type(self).model_fields.keys())

    @model_serializer(mode="wrap")
    def _dump_only_set_fields(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        """Lossless everywhere: a wire object nested in any other model (a ledger, a bus record) dumps
        only the fields it was given, exactly as :meth:`to_wire` does."""
        data = handler(self)
        if info.exclude_unset or not isinstance(data, dict):
            return data
        fields = type(self).model_fields
        by_alias = info.by_alias if info.by_alias is not None else self.model_config.get("serialize_by_alias", False)
        for name in fields.keys() - self.__pydantic_fields_set__:
            alias = fields[name].serialization_alias or fields[name].alias
            data.pop(alias if by_alias and alias else name, None)
        return data

    def to_wire(self) -> JsonObject:
        """The JSON object this model was read from (or would be written as)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    def to_wire_json(self) -> str:
        """Compact JSON of :meth:`to_wire` (no spaces, like ``JSON.stringify``)."""
        return self.model_dump_json(by_alias=True, exclude_unset=True)


class CamelModel(WireModel):
    """A :class:`WireModel` whose wire names are the camelCase form of its attributes."""

    model_config = ConfigDict(alias_generator=to_camel)
