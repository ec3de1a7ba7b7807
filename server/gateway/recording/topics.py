"""Topic names, JSON schemas and metadata of a teleop MCAP recording.

Every channel uses the ``json`` message encoding with a ``jsonschema`` schema, the
combination Foxglove (and Lichtblick) open with no set-up: the Plot panel completes
paths such as ``/teleop/telemetry.values.wheel_left_rad_s`` from the schema, the Raw
Messages and State Transitions panels work on ``/teleop/events`` and ``/teleop/state``.
Camera frames use Foxglove's own ``foxglove.CompressedImage`` schema in its JSON form
(the schema name is what the Image panel keys on; JSON encodes the bytes as base64,
declared with ``contentEncoding``), so no protobuf dependency is needed.

>>> sorted(TOPICS)[:3]
['/camera/image', '/teleop/commands', '/teleop/events']
>>> telemetry_schema(["battery_v"])["properties"]["values"]["properties"]["battery_v"]
{'type': ['number', 'null']}
"""

from __future__ import annotations

import base64
from typing import Any, Iterable

import orjson

TELEMETRY = "/teleop/telemetry"
EVENTS = "/teleop/events"
STATE = "/teleop/state"
COMMANDS = "/teleop/commands"
SETTINGS = "/teleop/settings"
IMAGE = "/camera/image"

#: MCAP metadata record written at the start of every file
METADATA_NAME = "teleop"
#: MCAP metadata record written when a file is finished: ``{"safety_events": "<count>"}`` (pruning keeps
#: files that hold safety events; a file without it, e.g. one repaired after a crash, is scanned)
EVENTS_METADATA_NAME = "teleop_events"
#: the MCAP header's library field
LIBRARY = "teleop-recorder"

_NUM = {"type": ["number", "null"]}
_ANY_OBJ = {"type": ["object", "null"]}


def telemetry_schema(channels: Iterable[str] = ()) -> dict[str, Any]:
    """The schema of a snapshot (docs/api.md); known channel names are listed for autocompletion."""
    return {
        "title": "teleop.Telemetry",
        "description": "A telemetry snapshot of the robot (SI units; see docs/api.md)",
        "type": "object",
        "properties": {
            "seq": {"type": "integer"},
            "t": {"type": "number", "description": "unix time, s"},
            "state": {"type": "string", "enum": ["idle", "running", "stopping", "estop", "fault"]},
            "cause": _ANY_OBJ,
            "setpoint": {"type": "object", "properties": {"linear": _NUM, "angular": _NUM}},
            "command": {"type": "object", "properties": {"linear": _NUM, "angular": _NUM}},
            "values": {"type": "object", "properties": {name: dict(_NUM) for name in channels},
                       "additionalProperties": _NUM},
            "truth": _ANY_OBJ,
            "behavior": _ANY_OBJ,
            "link": _ANY_OBJ,
            "loop": _ANY_OBJ,
        },
    }


EVENT_SCHEMA: dict[str, Any] = {
    "title": "teleop.Event",
    "description": "A safety event, a state change or a notice from the control loop",
    "type": "object",
    "properties": {
        "t": {"type": "number", "description": "monotonic time of the runtime, s"},
        "wall_t": {"type": ["number", "null"], "description": "unix time, s"},
        "trigger": {"type": "string"},
        "message": {"type": "string"},
        "values": {"type": "object"},
        "state_before": {"type": "string"},
        "state_after": {"type": "string"},
        "kind": {"type": "string", "enum": ["safety", "command", "info"]},
    },
}

STATE_SCHEMA: dict[str, Any] = {
    "title": "teleop.StateChange",
    "description": "The robot's state after each change (written from the events)",
    "type": "object",
    "properties": {
        "t": {"type": "number", "description": "unix time, s"},
        "state": {"type": "string"},
        "previous": {"type": "string"},
        "trigger": {"type": "string"},
        "message": {"type": "string"},
    },
}

COMMAND_SCHEMA: dict[str, Any] = {
    "title": "teleop.Command",
    "description": "An operator command and what became of it",
    "type": "object",
    "properties": {
        "t": {"type": "number", "description": "unix time, s"},
        "command": {"type": "string"},
        "body": {"type": ["object", "null"]},
        "accepted": {"type": "boolean"},
        "principal": {"type": ["string", "null"], "description": "who sent it (null without auth)"},
        "source": {"type": ["string", "null"], "description": "http, ws, …"},
        "state": {"type": ["string", "null"], "description": "the robot's state after it"},
        "error": {"type": ["object", "null"], "description": "{code, message} when refused"},
    },
}

SETTINGS_SCHEMA: dict[str, Any] = {
    "title": "teleop.Settings",
    "description": "An acquisition or other settings change",
    "type": "object",
    "properties": {
        "t": {"type": "number", "description": "unix time, s"},
        "kind": {"type": "string", "description": "acquisition, video, …"},
        "settings": {"type": "object"},
        "principal": {"type": ["string", "null"]},
    },
}

#: foxglove.CompressedImage, JSON form (the schema Foxglove's SDK generates, with base64 bytes)
COMPRESSED_IMAGE_SCHEMA: dict[str, Any] = {
    "title": "foxglove.CompressedImage",
    "description": "A compressed image",
    "type": "object",
    "properties": {
        "timestamp": {
            "type": "object", "title": "time",
            "properties": {"sec": {"type": "integer", "minimum": 0},
                           "nsec": {"type": "integer", "minimum": 0, "maximum": 999999999}},
            "description": "Timestamp of image",
        },
        "frame_id": {"type": "string", "description": "Frame of reference for the image"},
        "data": {"type": "string", "contentEncoding": "base64", "description": "Compressed image data"},
        "format": {"type": "string", "description": "Image format: jpeg, png, webp, avif"},
    },
    "required": ["timestamp", "frame_id", "data", "format"],
}

#: topic → (schema name, schema); the telemetry schema is built per robot from its channel names
TOPICS: dict[str, tuple[str, dict[str, Any] | None]] = {
    TELEMETRY: ("teleop.Telemetry", None),
    EVENTS: ("teleop.Event", EVENT_SCHEMA),
    STATE: ("teleop.StateChange", STATE_SCHEMA),
    COMMANDS: ("teleop.Command", COMMAND_SCHEMA),
    SETTINGS: ("teleop.Settings", SETTINGS_SCHEMA),
    IMAGE: ("foxglove.CompressedImage", COMPRESSED_IMAGE_SCHEMA),
}


def schema_for(topic: str, channels: Iterable[str] = ()) -> tuple[str, dict[str, Any]]:
    name, schema = TOPICS[topic]
    return name, schema if schema is not None else telemetry_schema(channels)


def encode_image(image: bytes, log_time_ns: int, frame_id: str = "camera", fmt: str = "jpeg") -> bytes:
    """A ``foxglove.CompressedImage`` JSON payload (the bytes base64-encoded).

    >>> encode_image(b"\\xff\\xd8", 1_500_000_000)
    b'{"timestamp":{"sec":1,"nsec":500000000},"frame_id":"camera","format":"jpeg","data":"/9g="}'
    """
    sec, nsec = divmod(log_time_ns, 1_000_000_000)
    return b"".join((b'{"timestamp":{"sec":', str(sec).encode(), b',"nsec":', str(nsec).encode(),
                     b'},"frame_id":', orjson.dumps(frame_id), b',"format":', orjson.dumps(fmt),
                     b',"data":"', base64.b64encode(image), b'"}'))
