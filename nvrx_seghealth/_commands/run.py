"""``nvrx-seghealth run``: torchrun, plus ``ft_launcher``'s segment health check options.

The command parses with torchrun's own parser plus three options, and launches with
``torch.distributed.run.run()``. Every torchrun option is torchrun's own. The three:

* ``--ft-segment-health-check-dir DIR``: the decision directory;
* ``--ft-segment-health-check-watch-interval SECONDS``: process 0's looks at its decision
  file while the workers run (``0``, the default: no watch);
* ``--ft-cfg-path FILE.yaml``: a YAML file whose ``fault_tolerance`` section (at any
  depth) may give ``segment_health_check_dir`` and ``segment_health_check_watch_interval``.

Precedence is flag > YAML > ``NVRX_SEGMENT_HEALTH_CHECK_DIR`` for the directory, and flag
> YAML for the watch interval (:mod:`nvrx_seghealth._settings.launcher_options`). With a
directory, the ``segment-health`` backend wraps the user's rendezvous
(:func:`select_segment_health`). As in NVRx's ``ft_launcher``, ``--rdzv-backend``
defaults to ``c10d`` and ``TORCH_ELASTIC_WORKER_IDENTICAL=1`` is set unless the
environment sets it. Without any directory setting the command is torchrun.

A configuration error reaches the dispatcher before anything starts: one line, exit 2.
Once launched, errors and exit codes are torchrun's. A
:class:`~nvrx_seghealth.ConfigurationError` that torchrun's agent raises exits 1 with its
last line only, as under torchrun (:mod:`nvrx_seghealth._launcher.backend`).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
import uuid
from collections.abc import MutableMapping
from typing import Any

from .._errors import ConfigurationError
from .._launcher.backend import BACKEND_NAME
from .._rendezvous import registry
from .._settings.launcher_options import (
    CFG_FLAG,
    DIRECTORY_FLAG,
    WATCH_INTERVAL_FIELD,
    WATCH_INTERVAL_FLAG,
    YAML_FIELD,
    DirectorySetting,
    WatchIntervalSetting,
    resolve_launcher_settings,
)
from .._settings.rdzv_conf import (
    DIRECTORY_KEY,
    INNER_BACKEND_KEY,
    WATCH_INTERVAL_KEY,
)
from .arguments import add_options, option
from .output import EXIT_FAILURE, EXIT_OK

__all__ = [
    "agent_environment",
    "launch",
    "launch_parser",
    "refuse_a_replaced_backend",
    "register",
    "select_segment_health",
    "use_local_rendezvous",
]

NAME = "run"

EXAMPLES = f"""
examples:
  # one launcher per node; an excluded process 0 ends its unit's step
  srun --kill-on-bad-exit=1 --ntasks-per-node=1 \\
    nvrx-seghealth run --nnodes=2:8 --nproc-per-node=8 \\
      --rdzv-backend=c10d --rdzv-endpoint=store-host:29400 --rdzv-id="$SLURM_ARRAY_JOB_ID" \\
      --rdzv-conf=is_host=false \\
      {DIRECTORY_FLAG}=/shared/job/segment-health-check/"$SLURM_ARRAY_JOB_ID" \\
      train.py --lr 0.1

  # the directory from an NVRx-style YAML file (fault_tolerance.segment_health_check_dir)
  nvrx-seghealth run --standalone --nproc-per-node=2 {CFG_FLAG}=ft.yaml train.py

precedence: {DIRECTORY_FLAG} > {YAML_FIELD} in {CFG_FLAG} > $NVRX_SEGMENT_HEALTH_CHECK_DIR;
none of them: plain torchrun.
watch: {WATCH_INTERVAL_FLAG} > {WATCH_INTERVAL_FIELD} in {CFG_FLAG}; none of them: 0 (off).
"""


#: The three options this command adds to torchrun's.
_CHECK_OPTIONS = (
    option(
        DIRECTORY_FLAG,
        "--ft_segment_health_check_dir",
        dest="ft_segment_health_check_dir",
        metavar="DIR",
        help="absolute decision directory that every launcher can reach",
    ),
    option(
        WATCH_INTERVAL_FLAG,
        "--ft_segment_health_check_watch_interval",
        dest="ft_segment_health_check_watch_interval",
        metavar="SECONDS",
        help="with a directory: process 0 of each unit re-checks its decision file every "
        "SECONDS while the workers run, and a decision restarts every launcher's workers "
        "without the unit (default 0: only before each rendezvous)",
    ),
    option(
        CFG_FLAG,
        "--ft_cfg_path",
        dest="ft_cfg_path",
        metavar="FILE.yaml",
        help=f"YAML file with {YAML_FIELD} and {WATCH_INTERVAL_FIELD} (the fault_tolerance "
        "section may be nested)",
    ),
)


def register(subparsers: Any) -> None:
    """Add the ``run`` subcommand without importing torch.

    The subparser takes every argument verbatim (no character starts an option: argv
    strings cannot contain NUL); :func:`launch` parses them with torchrun's parser,
    so ``nvrx-seghealth run --help`` shows torchrun's options plus the three added ones.
    """
    parser = subparsers.add_parser(
        NAME,
        help="launch like torchrun, with --ft-segment-health-check-dir / --ft-cfg-path",
        add_help=False,
        prefix_chars="\0",
    )
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    parser.set_defaults(func=launch)


def launch_parser() -> argparse.ArgumentParser:
    """torchrun's own parser (imports torch) as ``nvrx-seghealth run``, plus the three options."""
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.prog = f"nvrx-seghealth {NAME}"
    parser.description = (
        "torchrun with the segment health check: every torchrun option works as in "
        "torchrun; the options below select the segment-health rendezvous backend around "
        f"--rdzv-backend ({_inner_backends()})."
    )
    parser.epilog = EXAMPLES
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.set_defaults(rdzv_backend="c10d")  # as ft_launcher: static cannot carry the check
    add_options(parser.add_argument_group("segment health check"), _CHECK_OPTIONS)
    return parser


def _inner_backends() -> str:
    """The backends the wrapper can run inside, as a sentence lists them: ``a, b or c``."""
    *others, last = registry.names()
    return f"{', '.join(others)} or {last}" if others else last


def _conf_keys(rdzv_conf: str) -> set[str]:
    return {item.split("=", 1)[0].strip() for item in rdzv_conf.split(",") if item.strip()}


def use_local_rendezvous(args: argparse.Namespace) -> None:
    """One node and no endpoint: torchrun's local c10d rendezvous (``--standalone``).

    torch's ``run()`` does this for its ``static`` default; with ``c10d`` (this command's
    default) and no endpoint it would host a store on the fixed port 29400 instead.
    """
    from torch.distributed.run import parse_min_max_nnodes

    if (
        args.rdzv_backend in ("static", "c10d")
        and not args.rdzv_endpoint
        and args.master_port is None
        and parse_min_max_nnodes(args.nnodes)[1] == 1
    ):
        args.standalone = True


def agent_environment(environ: MutableMapping[str, str]) -> None:
    """Set ``TORCH_ELASTIC_WORKER_IDENTICAL=1`` unless ``environ`` sets it, as NVRx does.

    torch's agent then skips its rank exchange between rounds, in which a launcher that
    left a completed round (an excluded unit's sibling) stalls every other agent until
    the store read times out. Set it to ``0`` when nodes run different workers.
    """
    environ.setdefault("TORCH_ELASTIC_WORKER_IDENTICAL", "1")


def _inner_backend(args: argparse.Namespace, source: str) -> str:
    """The rendezvous torchrun would run, made explicit (mirrors ``run()`` of torch 2.13).

    ``--standalone`` is torchrun's local c10d rendezvous: set it up here, because
    ``run()`` would replace ``--rdzv-backend`` for it.
    """
    if args.standalone:
        args.standalone = False
        args.rdzv_endpoint, args.rdzv_id = "localhost:0", str(uuid.uuid4())
        return "c10d"
    if args.rdzv_backend not in registry.names():
        raise ConfigurationError(
            f"--rdzv-backend={args.rdzv_backend} cannot carry the segment health check "
            f"(set by {source}); use --rdzv-backend={_inner_backends()}, or drop "
            "the segment health check setting"
        )
    return str(args.rdzv_backend)


def _refuse_watch_twice(args: argparse.Namespace, watch: WatchIntervalSetting | None) -> None:
    """Refuse a flag/YAML watch interval (any value) that ``--rdzv-conf`` also sets."""
    if watch is not None and WATCH_INTERVAL_KEY in _conf_keys(args.rdzv_conf):
        raise ConfigurationError(
            f"{watch.source} and --rdzv-conf {WATCH_INTERVAL_KEY} both set the watch "
            "interval; keep one of them",
            setting=watch.source,
        )


def select_segment_health(
    args: argparse.Namespace,
    setting: DirectorySetting,
    watch: WatchIntervalSetting | None = None,
) -> None:
    """Rewrite torchrun's ``args`` so the ``segment-health`` backend wraps the rendezvous.

    ``--rdzv-backend`` becomes ``segment-health``, and ``--rdzv-conf`` gains
    ``segment_health_check_dir`` and ``inner_backend`` (one of
    :func:`~.._rendezvous.registry.names`). A positive ``watch`` interval (from the
    flag or the YAML file) travels as the ``segment_health_check_watch_interval`` key;
    ``None`` or ``0`` adds no key.
    ``args`` stay untouched when the user configured the backend by hand
    (``--rdzv-backend=segment-health`` or its keys in ``--rdzv-conf``) and the directory
    comes only from the environment: the backend reads the environment itself.

    Raises:
        ConfigurationError: the directory cannot travel in ``--rdzv-conf`` (comma, or
            leading/trailing space), the rendezvous cannot be wrapped, the flag/YAML
            directory or a positive watch interval conflicts with a hand-made backend
            configuration, or ``--rdzv-conf`` sets the watch interval too.
    """
    _refuse_watch_twice(args, watch)
    if args.rdzv_backend == BACKEND_NAME or _conf_keys(args.rdzv_conf) & {
        DIRECTORY_KEY,
        INNER_BACKEND_KEY,
    }:
        _refuse_what_cannot_reach_a_hand_made_backend(setting, watch)
        return
    directory = setting.directory
    if "," in directory or directory != directory.strip():
        raise ConfigurationError(
            f"{setting.source} {directory!r} cannot be passed to the rendezvous: "
            "--rdzv-conf values cannot contain commas or leading/trailing spaces; use a "
            "directory path without them (e.g. a symlink to it)"
        )
    inner = _inner_backend(args, setting.source)
    extra = f"{DIRECTORY_KEY}={directory},{INNER_BACKEND_KEY}={inner}"
    if watch is not None and watch.enabled:
        extra += f",{WATCH_INTERVAL_KEY}={watch.seconds!r}"
    args.rdzv_conf = f"{args.rdzv_conf},{extra}" if args.rdzv_conf.strip() else extra
    args.rdzv_backend = BACKEND_NAME


def _refuse_what_cannot_reach_a_hand_made_backend(
    setting: DirectorySetting, watch: WatchIntervalSetting | None
) -> None:
    """Refuse a flag/YAML directory, or a positive watch interval, beside a backend the
    user configured by hand in ``--rdzv-backend``/``--rdzv-conf``: it would not reach it."""
    if not setting.from_environment:
        raise ConfigurationError(
            f"{setting.source} selects the {BACKEND_NAME} backend itself, but "
            f"--rdzv-backend/--rdzv-conf already configure it: give --rdzv-backend the "
            f"inner rendezvous ({_inner_backends()}) and drop {DIRECTORY_KEY}/"
            f"{INNER_BACKEND_KEY} from --rdzv-conf"
        )
    if watch is not None and watch.enabled:
        raise ConfigurationError(
            f"{watch.source} cannot reach the {BACKEND_NAME} backend configured by hand "
            f"in --rdzv-backend/--rdzv-conf: add {WATCH_INTERVAL_KEY}={watch.seconds!r} "
            f"to --rdzv-conf, or give --rdzv-backend the inner rendezvous "
            f"({_inner_backends()}) and drop {DIRECTORY_KEY}/{INNER_BACKEND_KEY} from "
            "--rdzv-conf",
            setting=watch.source,
        )


def refuse_a_replaced_backend(args: argparse.Namespace) -> None:
    """Refuse ``--standalone`` (or ``PET_STANDALONE``) left with a hand-made
    ``--rdzv-backend=segment-health``.

    torch's ``run()`` would replace the backend with ``c10d`` and the check would be off;
    a launcher that can still refuse says so before anything starts, rather than warn.

    Raises:
        ConfigurationError: both are given.
    """
    if args.standalone and args.rdzv_backend == BACKEND_NAME:
        raise ConfigurationError(
            f"--standalone (or PET_STANDALONE) makes torchrun replace --rdzv-backend="
            f"{BACKEND_NAME} with c10d, so the segment health check would be off; give "
            f"{DIRECTORY_FLAG} and the inner rendezvous (--rdzv-backend=c10d) and this command "
            "sets up the one-node rendezvous with the check on, or drop --standalone and give "
            "--rdzv-endpoint",
            setting="--standalone",
        )


def launch(args: argparse.Namespace) -> int:
    """Parse ``args.argv`` as torchrun does, configure the check, launch; 0 on success.

    argparse itself exits 2 for a malformed command line. Launch failures propagate as
    in torchrun; a :class:`~nvrx_seghealth.ConfigurationError` from inside torchrun is
    one of them (its last line on stderr, exit 1), not a usage error of this command.

    Raises:
        ConfigurationError: the check's settings are unusable; nothing was started (the
            dispatcher exits 2).
    """
    from torch.distributed.elastic.multiprocessing.errors import record
    from torch.distributed.run import run

    launch_args = launch_parser().parse_args(args.argv)
    use_local_rendezvous(launch_args)
    settings = resolve_launcher_settings(
        launch_args.ft_segment_health_check_dir,
        launch_args.ft_segment_health_check_watch_interval,
        launch_args.ft_cfg_path,
    )
    if settings.directory is not None:
        select_segment_health(launch_args, settings.directory, settings.watch_interval)
    refuse_a_replaced_backend(launch_args)
    agent_environment(os.environ)
    try:
        record(run)(launch_args)
    except ConfigurationError as error:  # torchrun's failure, said as under torchrun
        sys.stderr.write("".join(traceback.format_exception_only(type(error), error)))
        return EXIT_FAILURE
    return EXIT_OK
