"""Field types shared by the resource models: the camelCase base model, Go-style durations,
RFC 3339 timestamps and ticks, and the patterns the CRD schema uses for the same fields.

Owns how a field is read from and written to the API's JSON. Whether a value is sensible for a
particular field (bounds, relations to other fields) is for the model that has the field.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, PlainSerializer
from pydantic.alias_generators import to_camel

from leasecron.models.durations import format_duration, parse_duration
from leasecron.models.names import format_tick

DURATION_PATTERN = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)$"
"""Go-style durations as both the CRD and CEL's duration() accept them."""
DURATION_MAX_LENGTH = 32
LABEL_VALUE_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"

_DURATION = re.compile(DURATION_PATTERN)


class ResourceModel(BaseModel):
    """camelCase on the wire, snake_case in Python, immutable, unknown fields refused."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        frozen=True,
        extra="forbid",
    )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form sent to the API server: camelCase keys, None fields left out."""
        return self.model_dump(mode="json", exclude_none=True)


class RecordModel(ResourceModel):
    """A model read back from the API server: fields it does not know are ignored, so an
    older reader keeps working against a newer writer."""

    model_config = ConfigDict(extra="ignore")


def _to_timedelta(value: object) -> timedelta:
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise ValueError("must not be negative")
        return value
    if not isinstance(value, str):
        raise ValueError("must be a duration string such as '90s', '15m' or '1h30m'")
    if not _DURATION.fullmatch(value):
        raise ValueError(
            "is not a duration: use numbers with units ns, us, ms, s, m or h, "
            "for example '90s', '15m' or '1h30m'"
        )
    return parse_duration(value)


Duration = Annotated[
    timedelta,
    BeforeValidator(_to_timedelta),
    PlainSerializer(format_duration, return_type=str),
]
"""A timedelta read from and written as a Go-style duration string."""


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("must include a time zone offset, for example a trailing Z")
    return value.astimezone(UTC)


def format_timestamp(value: datetime) -> str:
    """RFC 3339 in UTC with a Z, keeping microseconds when there are any."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _whole_second(value: datetime) -> datetime:
    if value.microsecond:
        raise ValueError("must be a whole second")
    return value


Timestamp = Annotated[
    datetime,
    AfterValidator(_aware),
    PlainSerializer(format_timestamp, return_type=str),
]
"""An aware datetime (normalised to UTC) written as RFC 3339."""

Tick = Annotated[
    datetime,
    AfterValidator(_aware),
    AfterValidator(_whole_second),
    PlainSerializer(format_tick, return_type=str),
]
"""A schedule tick: an aware whole second, written as `yyyy-mm-ddThh:mm:ssZ`."""


def show(value: object) -> str:
    """A value as an error message quotes it: repr, shortened."""
    if isinstance(value, timedelta):
        text = repr(format_duration(value))
    elif isinstance(value, datetime):
        text = repr(format_timestamp(value)) if value.tzinfo else repr(value.isoformat())
    else:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
