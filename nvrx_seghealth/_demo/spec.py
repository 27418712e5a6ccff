"""What to simulate: the shape of a Slurm job and how its launchers are started.

A simulated job is a job array of ``tasks`` array tasks (or one regular job), each an
allocation unit of ``nodes_per_task`` "nodes". Every node runs one ``torchrun`` agent
(a *launcher*), named ``task<T>.proc<P>`` (``job.proc<P>`` for a regular job), where
``P`` is its ``SLURM_PROCID`` inside the unit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .._rendezvous import registry
from .._settings.durations import WATCH_INTERVAL, validate_seconds
from .._settings.rdzv_conf import WATCH_INTERVAL_KEY

__all__ = ["BACKENDS", "JobSpec", "StartAfter"]

#: Rendezvous backends a simulated launcher can use.
BACKENDS = ("segment-health", "c10d", "etcd-v3")


@dataclass(frozen=True)
class StartAfter:
    """Hold a launcher back until another launcher has reached a point.

    Real Slurm starts a unit's launchers together; scenarios use this to force one
    ordering of a race instead of hoping for it.

    Attributes:
        label: the launcher to wait for, e.g. ``"task1.proc0"``.
        pattern: a regular expression to find in that launcher's log; ``None`` waits
            until that launcher has exited.
        or_gone: also start once that launcher is gone before reaching ``pattern``:
            it exited, or srun ended its step before it started.
    """

    label: str
    pattern: str | None = None
    or_gone: bool = False


@dataclass(frozen=True)
class JobSpec:
    """A simulated job.

    Attributes:
        tasks: number of array tasks (allocation units); 1 for a regular job.
        nodes_per_task: launchers per unit (``srun -N``).
        array: a job array (``True``) or a regular job (``False``, ``tasks`` must be 1).
        min_nodes: ``--nnodes`` minimum; default: every launcher.
        max_nodes: ``--nnodes`` maximum; default: every launcher. Launchers beyond it
            are spares.
        marked: units whose decision file is published before launch (unit index:
            the array task id, ``0`` for a regular job).
        backend: ``segment-health``, or plain ``c10d`` or ``etcd-v3``.
        inner_backend: the rendezvous ``segment-health`` wraps: ``c10d`` (its store
            hosted as :attr:`store_in_launcher` says), ``barrier`` (its TCPStore hosted
            by the harness), ``etcd-v2`` or ``etcd-v3`` (its state and store in the etcd
            at :attr:`etcd_endpoint`; no allocation unit hosts anything).
        etcd_endpoint: the ``--rdzv-endpoint`` of every launcher: ``HOST:PORT`` of a
            running etcd, or of every member, comma-separated (``etcd-v2``: the v2 API
            enabled); required by, and only for, ``etcd-v2`` and ``etcd-v3``.
        store_in_launcher: for ``c10d``, the label of the launcher that hosts the
            TCPStore in its own process (``is_host=true``; every other launcher
            ``is_host=false``), as c10d does for the launcher whose address is the
            endpoint; ``None``: a harness process outside every unit hosts it.
        check_directory: pass ``segment_health_check_dir`` to ``segment-health``;
            ``False`` runs the backend with the check disabled.
        max_restarts: ``torchrun --max-restarts``.
        steps: all-reduce steps each worker runs.
        first_round_steps: steps of the workers of round 0 (default: ``steps``);
            scenarios that act on a running job give round 0 a long window.
        step_seconds: pause after each step.
        compute_seconds: seconds each worker of rounds below :attr:`compute_rounds`
            spends computing without any collective, right after joining its process
            group (as NCCL training does between collectives): its peers then notice a
            dead rank only through torchrun's ``num_nodes_waiting``, never through a
            gloo error. ``0``: no such phase.
        compute_rounds: how many rounds (0, 1, ...) compute for :attr:`compute_seconds`.
        join_timeout: rendezvous ``join_timeout`` in whole seconds.
        worker_timeout: the workers' process-group timeout in seconds; it bounds how
            long workers wait for a peer that never comes.
        start_after: launchers held back until another launcher reached a point.
        start_delays: launchers started this many seconds after the job started (a
            node that comes up late), in addition to any :attr:`start_after` condition.
        never_started: launchers that never start (a node whose launcher never comes up).
        no_kill_on_bad_exit: units launched with ``srun --kill-on-bad-exit=0``.
        agent_env: extra environment for every launcher (and so its workers).
        disable_shared_store: ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE`` in every launcher's
            environment: ``"1"`` (torch's handler builds each round afresh; restarted
            workers otherwise read stale addresses, pytorch#135712, and a segment-health
            launcher serves its workers' store itself); ``None``: unset, as in a launcher
            whose user never heard of it (the backend then decides).
        rdzv_conf: extra ``--rdzv-conf`` entries for every launcher; they override
            the harness's defaults (see :func:`.launcher.rendezvous_config`).
        watch_interval: ``segment_health_check_watch_interval`` of every launcher, in
            seconds (``0``: the watch off, the key not passed); ``segment-health`` only,
            validated as the launcher validates it.
        record_telemetry: route each launcher's TorchElastic rendezvous events and the
            ``nvrx_seghealth`` metrics to files (:mod:`.telemetry`), read back through
            :meth:`.outcome.LauncherOutcome.events` and ``metrics``.
        array_job_id: ``SLURM_ARRAY_JOB_ID`` (or the regular job's ``SLURM_JOB_ID``).
    """

    tasks: int = 3
    nodes_per_task: int = 2
    array: bool = True
    min_nodes: int | None = None
    max_nodes: int | None = None
    marked: frozenset[int] = frozenset()
    backend: str = "segment-health"
    inner_backend: str = "c10d"
    etcd_endpoint: str | None = None
    store_in_launcher: str | None = None
    check_directory: bool = True
    max_restarts: int = 0
    steps: int = 3
    first_round_steps: int | None = None
    step_seconds: float = 0.2
    compute_seconds: float = 0.0
    compute_rounds: int = 1
    join_timeout: int = 30
    worker_timeout: int = 30
    start_after: Mapping[str, StartAfter] = field(default_factory=dict)
    start_delays: Mapping[str, float] = field(default_factory=dict)
    never_started: frozenset[str] = frozenset()
    no_kill_on_bad_exit: frozenset[int] = frozenset()
    agent_env: Mapping[str, str] = field(default_factory=dict)
    disable_shared_store: str | None = "1"
    rdzv_conf: Mapping[str, str] = field(default_factory=dict)
    watch_interval: float = 0.0
    record_telemetry: bool = False
    array_job_id: int = 1000

    def __post_init__(self) -> None:
        if self.tasks < 1 or self.nodes_per_task < 1:
            raise ValueError("tasks and nodes_per_task must be at least 1")
        if not self.array and self.tasks != 1:
            raise ValueError("a regular job is a single allocation unit: use tasks=1")
        if not 1 <= self.nnodes[0] <= self.nnodes[1] <= self.launcher_count:
            raise ValueError(
                f"need 1 <= min_nodes <= max_nodes <= {self.launcher_count} launchers, "
                f"got {self.nnodes[0]}:{self.nnodes[1]}"
            )
        if not self.marked | self.no_kill_on_bad_exit <= set(self.units):
            raise ValueError(f"unit indices must be in {list(self.units)}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.inner_backend not in registry.names():
            raise ValueError(
                f"inner_backend must be one of {registry.names()}, got {self.inner_backend!r}"
            )
        if self.inner_backend != "c10d" and self.backend != "segment-health":
            raise ValueError("inner_backend is the rendezvous that segment-health wraps")
        if (self.etcd_endpoint is None) != (self.rendezvous not in registry.etcd_names()):
            raise ValueError("etcd_endpoint is required by, and only for, etcd-v2 and etcd-v3")
        if self.store_in_launcher is not None and (
            self.rendezvous != "c10d" or self.store_in_launcher not in self.labels
        ):
            raise ValueError(
                f"store_in_launcher {self.store_in_launcher!r} must name a launcher of a c10d job"
            )
        validate_seconds(WATCH_INTERVAL, self.watch_interval, given_as="watch_interval")
        if self.watch_interval and self.backend != "segment-health":
            raise ValueError(f"watch_interval ({WATCH_INTERVAL_KEY}) is for segment-health only")
        labels = set(self.labels)
        if not self.never_started <= labels:
            raise ValueError(f"never_started names unknown launchers: {sorted(self.never_started)}")
        if self.compute_seconds < 0 or self.compute_rounds < 0:
            raise ValueError("compute_seconds and compute_rounds must be >= 0")
        for label, delay in self.start_delays.items():
            if label not in labels or delay < 0:
                raise ValueError(f"start_delays needs a known launcher and >= 0 s, got {label!r}")
        for label, after in self.start_after.items():
            if label not in labels or after.label not in labels or label == after.label:
                raise ValueError(
                    f"start_after {label!r} -> {after.label!r} names unknown launchers"
                )

    @property
    def rendezvous(self) -> str:
        """The rendezvous that does the work: ``c10d``, ``barrier``, ``etcd-v2`` or
        ``etcd-v3``."""
        return self.inner_backend if self.backend == "segment-health" else self.backend

    @property
    def harness_hosts_store(self) -> bool:
        """Whether the harness runs the TCPStore of ``c10d`` or ``barrier`` (in a process
        outside every unit)."""
        return self.rendezvous not in registry.etcd_names() and self.store_in_launcher is None

    @property
    def units(self) -> range:
        """Unit indices: array task ids, or ``range(1)`` for a regular job."""
        return range(self.tasks)

    @property
    def launcher_count(self) -> int:
        """Launchers in the whole job."""
        return self.tasks * self.nodes_per_task

    @property
    def nnodes(self) -> tuple[int, int]:
        """``(min, max)`` for ``torchrun --nnodes=MIN:MAX``."""
        maximum = self.launcher_count if self.max_nodes is None else self.max_nodes
        return (maximum if self.min_nodes is None else self.min_nodes), maximum

    def unit_name(self, unit: int) -> str:
        """``task<T>`` for an array task, ``job`` for a regular job."""
        return f"task{unit}" if self.array else "job"

    def label(self, unit: int, procid: int) -> str:
        """The launcher name, e.g. ``task1.proc0``."""
        return f"{self.unit_name(unit)}.proc{procid}"

    @property
    def labels(self) -> list[str]:
        """Every launcher name, unit by unit."""
        return [self.label(u, p) for u in self.units for p in range(self.nodes_per_task)]
