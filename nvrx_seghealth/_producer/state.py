"""The state file of a ``publish-drained`` producer: its one schema, its loader, its health.

After every pass a producer writes ``.publish-drained.<id>.<job_id>.json`` in the decision
directory (:func:`state_file_name`). It keeps the node counts across restarts and
``--once`` passes, and says how the passes go. The directory may be writable by other
accounts, so whatever the file holds is input, never trusted as it is:

* :class:`ProducerState` is the schema: a frozen dataclass that checks every field when made;
* :func:`parse_state` turns a file's bytes into one, or refuses them;
* :func:`read_state_file` reads one within a time bound, and can trust one account's only;
* :class:`FailureStreak` says how the passes go, timed on the boot clock
  (:class:`~.bootclock.BootClock`);
* :meth:`ProducerState.health` says whether the producer is ok, failing or stopped.

Every refusal is one :class:`StateFileError` naming the file and the field. Standard
library only.

One module, over the package's 400 lines: the field checks, the schema and the loader
together are what a planted file meets, and are read whole here.
"""

from __future__ import annotations

import enum
import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from .._decision import boundedfs
from .._errors import SegmentHealthError
from .bootclock import BootClock
from .debounce import NodeRecord
from .slurm import NODE_STATES

__all__ = [
    "PRODUCER_ID",
    "STATE_FILE",
    "VERSION",
    "FailureStreak",
    "ProducerHealth",
    "ProducerState",
    "StateFileError",
    "parse_state",
    "read_state_file",
    "state_file_name",
]

#: The schema version this code writes and reads; a file of another version is refused.
VERSION = 1
#: A producer id: 1-64 letters, digits and ``. _ + @ -``, starting with a letter or digit.
PRODUCER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+@-]{0,63}")
#: The state file of a producer in the decision directory: ``.publish-drained.<id>.<job>.json``.
STATE_FILE = re.compile(
    r"\.publish-drained\.(?P<id>[A-Za-z0-9][A-Za-z0-9._+@-]{0,63})\.(?P<job>[0-9]+)\.json"
)
#: Timestamps are seconds since 1970 before the year 10000 (what ``datetime`` can show).
_LATEST = 253402300800.0
#: The most passes a state can be asked to hold (``--passes``).
_MOST_PASSES = 9999
#: Counts are at most the largest whole number every JSON reader keeps exact.
_MOST_COUNT = 2**53 - 1
_NODE_FIELDS = tuple(f.name for f in fields(NodeRecord))


def state_file_name(producer_id: str, job_id: str) -> str:
    """The producer's state file name in the decision directory."""
    return f".publish-drained.{producer_id}.{job_id}.json"


class StateFileError(ValueError, SegmentHealthError):
    """A producer's state is not valid: nothing of it may be used.

    Attributes:
        field: the offending key, or ``None`` for the file as a whole (not readable,
            not JSON, not the owner's, an unknown key).
        problem: what is wrong with it (never the offending value itself: the file may
            be anyone's, and the message reaches terminals).
        path: the state file, or ``None`` for a state that was never in a file.
    """

    def __init__(self, field: str | None, problem: str, path: str | None = None) -> None:
        where = ": ".join(part for part in (path, field) if part)
        super().__init__(f"{where}: {problem}" if where else problem)
        self.field = field
        self.problem = problem
        self.path = path


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _number(value: object) -> float | None:
    """``value`` as a float when it is a finite JSON number (not a bool), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer too large for a float
        return None
    return number if math.isfinite(number) else None


def _timestamp(value: object) -> str | None:
    number = _number(value)
    if number is None:
        return f"must be a time in seconds since 1970, got {_kind(value)}"
    if not 0 <= number < _LATEST:
        return "must be a time from 1970 to the year 9999"
    return None


def _seconds(value: object) -> str | None:
    number = _number(value)
    if number is None or number <= 0:
        return f"must be a positive finite number of seconds, got {_kind(value)}"
    return None


def _elapsed(value: object) -> str | None:
    number = _number(value)
    if number is None or number < 0:
        return f"must be a finite number of seconds, 0 or more, got {_kind(value)}"
    return None


def _count(value: object, least: int = 0, most: int = _MOST_COUNT) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        return f"must be a whole number from {least} to {most}, got {_kind(value)}"
    return None


def _optional(check: Callable[[object], str | None]) -> Callable[[object], str | None]:
    return lambda value: None if value is None else check(value)


def _text(value: object) -> str | None:
    return None if isinstance(value, str) else f"must be text, got {_kind(value)}"


def _flag(value: object) -> str | None:
    return None if isinstance(value, bool) else f"must be true or false, got {_kind(value)}"


def _producer_id(value: object) -> str | None:
    if isinstance(value, str) and PRODUCER_ID.fullmatch(value):
        return None
    return "must be a producer id (1-64 letters, digits and . _ + @ -)"


def _job_id(value: object) -> str | None:
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return None
    return "must be a job id (digits)"


def _passes(value: object, most: int = _MOST_PASSES) -> str | None:
    if not isinstance(value, Mapping):
        return f"must map node states to passes, got {_kind(value)}"
    for state, count in value.items():
        if state not in NODE_STATES:
            return f"has a key that is not a node state ({', '.join(NODE_STATES)})"
        problem = _count(count, 1, most)
        if problem:
            return f"{state} {problem}"
    return None


def _paths(value: object) -> str | None:
    if isinstance(value, tuple) and all(isinstance(item, str) for item in value):
        return None
    return f"must be a list of paths, got {_kind(value)}"


_RECORD_CHECKS: dict[str, Callable[[object], str | None]] = {
    "streaks": lambda value: _passes(value, most=_MOST_COUNT),
    "unavailable": _flag,
    "hold": lambda value: _count(value, 0, _MOST_PASSES),
    "clean": _count,
    "seen": _text,
}


def _nodes(value: object) -> str | None:
    if not isinstance(value, Mapping):
        return f"must map node names to their counts, got {_kind(value)}"
    for name, record in value.items():
        if not isinstance(name, str) or not name:
            return "has a node name that is not text"
        if not isinstance(record, NodeRecord):
            return f"must map each node to its counts, got {_kind(record)}"
        for field, check in _RECORD_CHECKS.items():
            problem = check(getattr(record, field))
            if problem:
                return f"has a node whose {field} {problem}"
    return None


_CHECKS: dict[str, Callable[[object], str | None]] = {
    "producer_id": _producer_id,
    "job_id": _job_id,
    "passes": _passes,
    "interval": _optional(_seconds),
    "clear_after_failing": _optional(_seconds),
    "last_pass": _timestamp,
    "last_ok": _optional(_timestamp),
    "failing_since": _optional(_timestamp),
    "failed_passes": _count,
    "last_error": _optional(_text),
    "stale_cleared": _flag,
    "unreadable": _paths,
    "nodes": _nodes,
    "failing_for": _elapsed,
    "boot_id": _optional(_text),
    "uptime": _optional(_elapsed),
}


class ProducerHealth(enum.Enum):
    """How a producer is, as its state file tells: the ``state`` token of its
    ``status --json`` row."""

    #: Its last pass succeeded, and it runs on time (or runs single passes).
    OK = "ok"
    #: Its last passes failed (Slurm did not answer, a write failed): its decisions are
    #: kept as they were, stale.
    FAILING = "failing"
    #: It runs a pass every ``interval`` seconds, but it has been quiet
    #: (:meth:`ProducerState.quiet_for`) longer than ``max(3 * interval, interval + 60)``
    #: by the reader's clock: it may have stopped. Said whether or not its last passes
    #: failed: a producer that no longer runs is what to fix first.
    STOPPED = "stopped"
    #: Its state file cannot be read in time, or is not valid.
    UNREADABLE = "unreadable"


@dataclass(frozen=True)
class ProducerState:
    """What a producer keeps between passes; every field is checked when it is made.

    Attributes:
        producer_id: the producer's id (as in its decisions and the file name).
        job_id: the array (or regular) job it publishes for.
        passes: watched state -> consecutive passes it must hold (1 to 9999).
        interval: seconds between passes, ``None`` for single passes.
        clear_after_failing: seconds of failed passes before its own decisions are
            cleared, ``None``: never.
        last_pass: when the last pass ran (seconds since 1970).
        last_ok: when the last successful pass ran, ``None``: never.
        failing_since: when the current run of failed passes began, ``None``: the last
            pass succeeded.
        failed_passes: failed passes in a row (>= 0).
        last_error: why the last pass failed, ``None`` when it did not.
        stale_cleared: its own decisions were cleared after ``clear_after_failing``.
        unreadable: decision paths it could not read and has warned about.
        nodes: node name -> its counts (:class:`~.debounce.NodeRecord`).
        failing_for: seconds the current run of failed passes has lasted, on the boot
            clock (:class:`FailureStreak`), as of its last failed pass.
        boot_id: the boot of that last failed pass's clock reading, ``None``: no failed
            pass in a row.
        uptime: that reading, seconds since the boot, ``None`` likewise.

    Raises:
        StateFileError: a field is invalid (``path`` is ``None``).
    """

    producer_id: str
    job_id: str
    passes: Mapping[str, int]
    interval: float | None
    clear_after_failing: float | None
    last_pass: float
    last_ok: float | None
    failing_since: float | None
    failed_passes: int
    last_error: str | None
    stale_cleared: bool
    unreadable: tuple[str, ...]
    nodes: Mapping[str, NodeRecord]
    failing_for: float = 0.0
    boot_id: str | None = None
    uptime: float | None = None

    def __post_init__(self) -> None:
        for name, check in _CHECKS.items():
            problem = check(getattr(self, name))
            if problem:
                raise StateFileError(name, problem)

    def to_json(self) -> bytes:
        """The file's content: one JSON object (with ``version``), sorted keys, a newline."""
        body = {"version": VERSION, **asdict(self)}
        return (json.dumps(body, sort_keys=True, allow_nan=False) + "\n").encode()

    def quiet_for(self, now: float, written: float | None = None) -> float:
        """Seconds since the last pass at ``now`` (the reader's clock), never negative.

        It is the age of the producer's own stamp (``last_pass``, its clock) or, when
        younger, of the state file's last change (``written``, its ``st_mtime``). The
        producer rewrites the file after every pass, so either tells. A producer whose
        clock is behind the reader's still looks alive where the file server stamps
        the file (NFS).
        """
        ages = [now - self.last_pass] + ([] if written is None else [now - written])
        return max(0.0, min(ages))

    def health(self, now: float, written: float | None = None) -> ProducerHealth:
        """The producer's :class:`ProducerHealth` at ``now``, by this state and
        (``written``) the file's last change (:meth:`quiet_for`)."""
        interval = self.interval
        if interval and self.quiet_for(now, written) > max(3 * interval, interval + 60):
            return ProducerHealth.STOPPED
        return ProducerHealth.OK if self.failing_since is None else ProducerHealth.FAILING


@dataclass(frozen=True)
class FailureStreak:
    """How the passes go, changed only by its transitions: the fields of the same names
    of :class:`ProducerState`.

    How long passes have failed (``failing_for``) is counted on the boot clock. Each
    failed pass adds the boot-clock time since the previous one. The wall clock can step
    by hours (NTP at boot, ``date -s``). Counted in wall time, a forward step larger than
    ``--clear-after-failing`` would clear decisions early: fail open. The boot clock does
    not step. The state file records the boot of its last reading, so a restart on the
    same boot is measured too (``--once`` from cron, a restarted service). Time across a
    reboot, or on another host, adds nothing: only the wall clock spans it, and boots step
    it. So the producer clears only after ``S`` seconds of failures it measured, never
    sooner. ``failing_since`` stays the wall-clock time the run began, for people.

    Attributes:
        last_ok: when the last successful pass ran, ``None``: never.
        failing_since: when the current run of failed passes began, ``None``: the last
            pass succeeded.
        failed_passes: failed passes in a row.
        last_error: why the last pass failed, ``None`` when it did not.
        stale_cleared: the producer's own decisions were cleared during this run of
            failed passes (:meth:`stale_due`).
        failing_for: seconds the run has lasted, on the boot clock, at its last pass.
        boot_id: the boot of the boot-clock reading at that pass.
        uptime: that reading, seconds since the boot.
    """

    last_ok: float | None = None
    failing_since: float | None = None
    failed_passes: int = 0
    last_error: str | None = None
    stale_cleared: bool = False
    failing_for: float = 0.0
    boot_id: str | None = None
    uptime: float | None = None

    @classmethod
    def of(cls, state: ProducerState) -> FailureStreak:
        """The streak that ``state`` recorded."""
        return cls(**{f.name: getattr(state, f.name) for f in fields(cls)})

    def ok(self, now: float) -> FailureStreak:
        """After a pass at ``now`` whose Slurm queries succeeded."""
        return FailureStreak(last_ok=now)

    def failed(self, now: float, error: str, clock: BootClock | None = None) -> FailureStreak:
        """After a pass at ``now`` (wall clock) that failed with ``error``; ``clock`` is
        the boot clock then (read now when not given)."""
        clock = clock or BootClock.now()
        if self.failing_since is None:
            since, lasted = now, 0.0
        else:
            since = self.failing_since
            lasted = self.failing_for + clock.since(self.boot_id, self.uptime)
        return replace(
            self,
            failing_since=since,
            failed_passes=self.failed_passes + 1,
            last_error=error,
            failing_for=lasted,
            boot_id=clock.boot_id,
            uptime=clock.uptime,
        )

    def stale_due(self, window: float | None) -> bool:
        """Passes have failed for ``window`` seconds (``None``: never due) and the
        producer's own decisions are not cleared yet."""
        return (
            window is not None
            and not self.stale_cleared
            and self.failing_since is not None
            and self.failing_for >= window
        )

    def cleared(self) -> FailureStreak:
        """After the producer's own decisions were cleared (:meth:`stale_due`)."""
        return replace(self, stale_cleared=True)


_FIELDS = frozenset(f.name for f in fields(ProducerState))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _node_record(value: object) -> NodeRecord:
    if not isinstance(value, dict) or set(value) != set(_NODE_FIELDS):
        raise StateFileError(
            "nodes", f"must map each node to an object of exactly {', '.join(_NODE_FIELDS)}"
        )
    return NodeRecord(**value)


def _state(body: object) -> ProducerState:
    if not isinstance(body, dict):
        raise StateFileError(None, f"must hold a JSON object, got {_kind(body)}")
    version = body.get("version")
    if isinstance(version, bool) or version != VERSION:
        raise StateFileError("version", f"must be {VERSION} (this producer's schema)")
    keys = set(body) - {"version"}
    missing, unknown = sorted(_FIELDS - keys), sorted(keys - _FIELDS)
    if missing:
        raise StateFileError(missing[0], "missing")
    if unknown:
        raise StateFileError(None, f"has a key that is not a field of version {VERSION}")
    values = dict(body)
    del values["version"]
    nodes = values["nodes"]
    if isinstance(nodes, dict):
        values["nodes"] = {name: _node_record(record) for name, record in nodes.items()}
    if isinstance(values["unreadable"], list):
        values["unreadable"] = tuple(values["unreadable"])
    return ProducerState(**values)


def parse_state(path: str, data: bytes) -> ProducerState:
    """The state that ``data``, the content of the state file ``path``, holds.

    It refuses anything else: not JSON, ``NaN`` or ``Infinity``, a missing or unknown
    key, another :data:`VERSION`, a wrong type, a number that is not finite, a timestamp
    out of range, a negative count. The producer id and job id in the file must be
    those of its name (:data:`STATE_FILE`).

    Raises:
        StateFileError: ``data`` is not such a state (the error names ``path`` and the
            field).
    """
    try:
        try:
            body = json.loads(data, parse_constant=_no_constant)
        except RecursionError:
            raise StateFileError(None, "not JSON: nested too deeply") from None
        except ValueError as error:  # the decoder's messages name positions, not content
            raise StateFileError(None, f"not JSON: {error}") from None
        state = _state(body)
        match = STATE_FILE.fullmatch(os.path.basename(path))
        if match is None:
            raise StateFileError(None, "is not named like a state file")
        if (state.producer_id, state.job_id) != (match["id"], match["job"]):
            raise StateFileError("producer_id", "and job_id must be those of the file's name")
    except StateFileError as error:
        raise StateFileError(error.field, error.problem, path) from None
    return state


def read_state_file(path: str, timeout: float, *, owner: int | None = None) -> ProducerState | None:
    """Read and check the state file ``path`` within ``timeout`` seconds per call.

    ``owner`` (a uid): the file is trusted only when that account owns it; anyone else's
    (planted in a directory others can write) is refused. The owner is the one of the
    very file read (the ``fstat`` of its descriptor, :attr:`~.._decision.files.Current.uid`).

    Returns:
        The state; ``None`` when there is no state file.

    Raises:
        StateFileError: the file cannot be read, is not ``owner``'s, or is not a valid
            state (:func:`parse_state`).
        OSError: the filesystem did not answer in time
            (:class:`~nvrx_seghealth._decision.helperprocess.HelperTimeout`, a ``TimeoutError``),
            or the helper process failed.
    """
    current = boundedfs.read_current(path, timeout)
    if current.kind == "absent":
        return None
    if current.kind != "content":
        raise StateFileError(None, f"cannot be read ({current.error})", path)
    if len(current.data) < current.size:
        raise StateFileError(None, f"is larger than {len(current.data)} bytes", path)
    if owner is not None and current.uid != owner:
        raise StateFileError(
            None, f"belongs to another account (uid {current.uid}, not {owner})", path
        )
    return parse_state(path, current.data)
