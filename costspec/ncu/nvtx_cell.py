"""One NVTX cell of an ncu CSV as the range names it holds (push/pop: outermost first)."""
from __future__ import annotations

import re

_QUOTED = re.compile(r'"([^"]*)"')
_PAYLOAD_FIELDS = 6  # PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg


def parse_nvtx_cell(cell: str) -> tuple[str, ...]:
    """Range names in one NVTX cell, in the order ncu prints them (push/pop: outermost first).

    Supported format, as ncu 2021-2026 prints it after CSV unquoting::

        4242  "<default domain>:toy:none:none:none:none:none:none"
              "<default domain>:layers.0.fc:none:none:none:none:none:none"

    (one line in the cell; broken here)

    A leading integer (the thread id, or the process id under ``--nvtx-push-pop-scope
    process``) is followed by one double-quoted entry per open range. Under the process scope a
    cell can hold several threads' stacks, each after its thread id
    (``1889 "...:costspec:backward:..." 1917 "...:toy:..." "...:layers.9:..."``: autograd runs
    the backward on a thread of its own); they are returned in printed order. Each entry is
    ``Domain:Name:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg``. The name is everything
    between the domain and the last six payload fields, so names may contain ``:``. Domains may
    not contain ``:``, and names may not contain ``"``.

    Start/end cells (``Id:Domain:Start/Stop_Range:...``) use the same entries, optionally
    prefixed with a numeric range id (``3:<default domain>:step:...``). That prefix is dropped.

    Entries from several domains are returned in printed order (ncu prints one stack per domain,
    each outermost first). Unquoted cells (a CSV reader or an export that dropped the inner
    quotes) are accepted too: each entry ends with its six payload fields, which hold no spaces
    (``none`` or a value), followed by white space or the end of the cell; names and domains may
    hold spaces. A cell that does not split that way is read as one entry. ``ValueError`` is raised for
    an entry with too few fields or for stray text.
    """
    text = cell.strip()
    if not text:
        return ()
    entries = _QUOTED.findall(text)
    rest = _QUOTED.sub(" ", text).split()
    if not entries:
        entries, rest = _unquoted_entries(text), []
    else:
        # one thread id before each thread's stack: a backward pass pushes ranges on autograd's
        # own thread, printed after the main thread's stack (seen on the H100, ncu 2025.3)
        rest = [token for token in rest if not token.isdigit()]
    if rest:
        raise ValueError(f"unexpected text {' '.join(rest)!r} outside the quoted NVTX entries")
    names = []
    for entry in entries:
        fields = entry.split(":")
        if len(fields) > 2 + _PAYLOAD_FIELDS and fields[0].strip().isdigit():
            fields = fields[1:]  # start/end range id
        if len(fields) < 2 + _PAYLOAD_FIELDS:
            raise ValueError(
                f"NVTX entry {entry!r} has {len(fields)} ':'-separated fields; expected "
                "Domain:Name:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
            )
        names.append(":".join(fields[1:-_PAYLOAD_FIELDS]))
    return tuple(names)


_UNQUOTED_ENTRY = re.compile(r"(\S.*?(?::[^:\s]*){" + str(_PAYLOAD_FIELDS) + r"})(?:\s+|$)")
_THREAD_ID = re.compile(r"\d+\s+")


def _unquoted_entries(text: str) -> list[str]:
    head, _, tail = text.partition(" ")
    if head.isdigit():  # the thread (or process) id
        text = tail.strip()
    if not text:
        return []
    entries: list[str] = []
    end = 0
    while end < len(text):
        thread = _THREAD_ID.match(text, end)
        if thread and entries:
            end = thread.end()
        match = _UNQUOTED_ENTRY.match(text, end)
        if not match:
            break
        entries.append(match.group(1))
        end = match.end()
    return entries if entries and end == len(text) else [text]


# -- reading -------------------------------------------------------------------------------------
