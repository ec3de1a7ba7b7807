"""Recording, reading and replaying runs as MCAP files (see docs/recording.md).

The gateway owns one :class:`Recorder`; its ``record_*`` methods only enqueue. Reading
(:func:`list_recordings`, :class:`Recording`, :func:`recent_events`) and replay
(:class:`ReplaySource`) work on the files, with or without a recorder running.
"""

from typing import TYPE_CHECKING

from server.lazy import lazy_exports

if TYPE_CHECKING:
    from server.gateway.recording.config import RecordingConfig, load_recording_config
    from server.gateway.recording.reader import Recording, RecordingError, list_recordings, recent_events
    from server.gateway.recording.recorder import Recorder
    from server.gateway.recording.recovery import recover_directory, recover_file
    from server.gateway.recording.replay import ReplaySource

# imported on first use (server/lazy.py): loading a profile reads this package's settings class only
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "config": ("RecordingConfig", "load_recording_config"),
    "reader": ("Recording", "RecordingError", "list_recordings", "recent_events"),
    "recorder": ("Recorder",),
    "recovery": ("recover_directory", "recover_file"),
    "replay": ("ReplaySource",),
})
