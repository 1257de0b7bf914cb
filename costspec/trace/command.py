"""`costspec import torch`: import, refuse an incomplete spec, write it, check it (`check`), report."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from costspec.core.errors import CostspecError, MismatchError
from costspec.core.safeio import write_text
from costspec.trace import import_torch
from costspec.trace.check import Verdict, check
from costspec.trace.spec import Imported

SHOWN = 12  # differences listed in the report (all of them in --format json)


class Unmapped(CostspecError):
    """Parts of the model map to no op: the spec is not written (exit 2)."""


@dataclass
class Report:
    target: str
    imported: Imported
    written: str | None
    seconds: float
    verdict: Verdict | None

    @property
    def text(self) -> str:
        return self.imported.text

    def lines(self) -> list[str]:
        out = []
        if self.written:
            out.append(f"wrote {self.written} ({len(self.text.splitlines())} lines; traced in {self.seconds:.1f} s)")
        for gap in self.imported.unmapped:
            out.append(f"unmapped (written as an `unmapped` layer): {gap}")
        if self.verdict is None:
            out.append("check skipped (--no-check); run: " + self.check_command())
            return out
        out.append(f"checked: {self.check_command()}")
        out.append(f"verdict: {self.verdict.line()}")
        listed = self.verdict.structure + self.verdict.unclaimed + self.verdict.pointwise
        out += [f"  {d}" for d in listed[:SHOWN]]
        if len(listed) > SHOWN:
            out.append(f"  and {len(listed) - SHOWN} more (--format json lists all)")
        return out

    def check_command(self) -> str:
        spec = self.written or "SPEC.yaml"
        return f"costspec validate {spec} --against " + " ".join(self.imported.check) + " --pass train"

    def as_dict(self) -> dict[str, Any]:
        return {"written": self.written, "target": self.target, "seconds": round(self.seconds, 3),
                "lines": len(self.text.splitlines()), "unmapped": [vars(u) for u in self.imported.unmapped],
                "check": self.verdict.as_dict() if self.verdict else None, "check_command": self.check_command(),
                **({} if self.written else {"spec": self.text})}

    def raise_if_failed(self) -> None:
        if self.verdict is not None and not self.verdict.structure_exact:
            raise MismatchError(f"the imported spec's structure differs from {self.target}: "
                                + "; ".join((self.verdict.structure + self.verdict.unclaimed)[:3]))


def run_import(target: str, dims, output: str | None, config: str | None, config_sets: dict[str, Any],
               output_field: str | None, dtype: str | None, allow_unmapped: bool, check_it: bool,
               quiet: bool = False) -> Report:
    """Import TARGET; refuse (exit 2) when something is unmapped unless `allow_unmapped`; write; check."""
    from costspec.core.progress import status

    started = time.monotonic()
    name = os.fspath(output) if output else "SPEC.yaml"
    with status(f"import torch: tracing {target}", quiet):
        imported = import_torch(target, tuple(dims), config, config_sets, output_field, dtype, name)
    seconds = time.monotonic() - started
    if imported.unmapped and not allow_unmapped:
        listed = "\n".join(f"  {u}" for u in imported.unmapped)
        raise Unmapped(f"{target}: {len(imported.unmapped)} part(s) map to no op of the registry; the spec is not "
                       f"written (--allow-unmapped writes them as `unmapped` layers):\n{listed}")
    if output:
        write_text(output, imported.text, inputs=[config] if config else [])
    verdict = None
    if check_it:
        with status(f"import torch: validate --against {target}", quiet):
            verdict = check(imported.text, name, target, config, config_sets, output_field)
    return Report(target, imported, os.fspath(output) if output else None, seconds, verdict)
