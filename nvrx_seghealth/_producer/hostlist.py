"""Slurm's compressed host lists (``n[01-04,7],gpu[1-2]-ib``), expanded as Slurm does.

``squeue -o %N`` prints a task's nodes compressed. :func:`expand` turns that into host
names without a ``scontrol show hostnames`` process per task (750 of them would take
seconds). The syntax, strictly:

* entries separated by commas outside brackets;
* an entry is text with zero or more bracket groups; every group holds comma-separated
  numbers or ``lo-hi`` ranges, and several groups multiply (``r[1-2]n[1-2]`` is four
  hosts, the last group varying fastest);
* a range keeps the zero padding of its lower bound (``[08-10]`` is ``08 09 10``).

Anything else (an empty entry, an unclosed or nested bracket, ``hi < lo``, letters in a
group) raises :class:`HostlistError`: the caller must treat the answer as unknown.
"""

from __future__ import annotations

import itertools
import re

from .._errors import SegmentHealthError

__all__ = ["MAX_HOSTS", "HostlistError", "expand"]

#: Hosts one list may expand to; more is refused as a malformed answer.
MAX_HOSTS = 1_000_000

_GROUP = re.compile(r"\[([^\[\]]*)\]")
_PLAIN = re.compile(r"[^\s\[\],]+")
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")


class HostlistError(ValueError, SegmentHealthError):
    """A host list that is not in Slurm's syntax."""


def _split(hostlist: str) -> list[str]:
    entries, depth, start = [], 0, 0
    for index, char in enumerate(hostlist):
        if char == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested '[' in host list {hostlist!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unmatched ']' in host list {hostlist!r}")
        elif char == "," and depth == 0:
            entries.append(hostlist[start:index])
            start = index + 1
    if depth:
        raise HostlistError(f"unclosed '[' in host list {hostlist!r}")
    entries.append(hostlist[start:])
    return entries


def _numbers(group: str, hostlist: str) -> list[str]:
    numbers: list[str] = []
    for part in group.split(","):
        match = _RANGE.fullmatch(part)
        if match is None:
            raise HostlistError(f"bad range {part!r} in host list {hostlist!r}")
        low, high = match[1], match[2]
        if high is None:
            numbers.append(low)
            continue
        if int(high) < int(low) or int(high) - int(low) >= MAX_HOSTS:
            raise HostlistError(f"bad range {part!r} in host list {hostlist!r}")
        width = len(low)
        numbers.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    return numbers


def expand(hostlist: str) -> list[str]:
    """The host names of ``hostlist``, in Slurm's order (duplicates kept).

    Raises:
        HostlistError: see the module documentation.
    """
    hosts: list[str] = []
    for entry in _split(hostlist):
        texts = _GROUP.split(entry)  # text, group, text, group, ..., text
        for text in texts[0::2]:
            if text and not _PLAIN.fullmatch(text):
                raise HostlistError(f"bad host name part {text!r} in {hostlist!r}")
        if not "".join(texts[0::2]) and len(texts) == 1:
            raise HostlistError(f"empty entry in host list {hostlist!r}")
        choices = [
            [text] if i % 2 == 0 else _numbers(text, hostlist) for i, text in enumerate(texts)
        ]
        count = 1
        for choice in choices:
            count *= len(choice)
        if len(hosts) + count > MAX_HOSTS:
            raise HostlistError(f"host list {hostlist!r} names more than {MAX_HOSTS} hosts")
        hosts.extend("".join(parts) for parts in itertools.product(*choices))
    return hosts
