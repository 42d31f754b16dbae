"""The measurement log every family's tuning writes: JSON lines, a header naming the GPU model and the
build's config space of the family, then one record per measurement, appended as it is made.

An existing log is resumed: what it holds is not measured again, which makes tuning resumable (and lets
several processes measure shards of one plan into logs of their own, ``merge``d afterwards). Opening a
log of another GPU model, family or build is refused. ``offline``: the device is the log's own and
nothing is measured (refitting a table from its log, on any machine with the same build).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Hashable, Iterable

from .. import families
from ..runtime.configs import multistage_ctas, record_ctas
from ..runtime.device import device_properties


def family_ctas(family_name: str) -> dict[str, int]:
    """A log header's ``ctas_per_sm`` record: variant name -> CTAs per SM on the current GPU of the family's
    multistage variants compiled here."""
    family = families.get(family_name)
    if not family.occupancy:
        return {}
    return multistage_ctas(family.list_configs(), family.function("tuning", family.occupancy))


class MeasurementLog:
    """A family's measurements on one GPU model: ``records`` maps each record's key (``key_of``) to its value
    (``value_of``). Subclasses say what a record is; this class keeps the file."""

    def __init__(self, path: str | Path, family: str = "gemm", offline: bool = False, device: dict | None = None,
                 timing: str = "", scales: str = ""):
        self.path = Path(path)
        self.family = families.get(family).name
        self.offline = offline
        # ``device``: properties measured elsewhere (a multi-GPU run's probe, ``runner.probe_devices``: with its
        # ``ctas_per_sm``, family_ctas on that GPU).
        self.device = device or (self._logged_device() if offline else device_properties())
        self.header = {
            "gpu_name": self.device["name"], "sm_count": self.device["sm_count"],
            "l2_bytes": self.device["l2_bytes"], "config_space_hash": families.get(family).table_hash(scales),
        }
        if self.family != "gemm":  # dense logs predate the other families' and have no family key
            self.header["family"] = self.family
        if scales:  # the scales mode of the variants measured (runtime.tables.scales_modes)
            self.header["scales"] = scales
        self.records: dict[Hashable, object] = {}
        self.gpu_seconds = 0.0
        self.measured = 0
        if self.path.exists():
            for record in self._read(self.path):
                self.records[self.key_of(record)] = self.value_of(record)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            measuring_here = not offline and device is None
            ctas = family_ctas(self.family) if measuring_here else self.device.get("ctas_per_sm", {})
            self.path.write_text(json.dumps({**self.header, "timing": timing,
                                             **({"ctas_per_sm": ctas} if ctas else {})}) + "\n")

    @staticmethod
    def key_of(record: dict) -> Hashable:
        """What identifies a measurement: a rerun skips a key the log holds."""
        raise NotImplementedError

    @staticmethod
    def value_of(record: dict) -> object:
        """What ``records`` keeps of a record (default: the record)."""
        return record

    def _read(self, path: Path) -> list[dict]:
        """The records of a log at ``path``, refused unless its header matches this log's; the CTAs per SM its
        header recorded are taken for the mappings (``runtime.configs.record_ctas``)."""
        lines = path.read_text().splitlines()
        header = json.loads(lines[0]) if lines else {}
        if {k: header.get(k) for k in self.header} != self.header:
            raise ValueError(f"{path} was recorded on {header}, not {self.header}; use another file")
        record_ctas(header.get("ctas_per_sm", {}))
        return [json.loads(line) for line in lines[1:] if line.strip()]

    def _logged_device(self) -> dict:
        if not self.path.exists():
            raise ValueError(f"{self.path}: no such measurement log to refit from (--offline refits the table "
                             "from the log its tuning wrote: pass it with --log FILE)")
        with self.path.open() as f:
            header = json.loads(f.readline())
        return {"name": header["gpu_name"], "sm_count": header["sm_count"], "l2_bytes": header["l2_bytes"]}

    def __contains__(self, key: Hashable) -> bool:
        return key in self.records

    def add(self, records: Iterable[dict]) -> None:
        """Append records (measured now) to the file and to ``records``."""
        with self.path.open("a") as f:
            for record in records:
                self.records[self.key_of(record)] = self.value_of(record)
                f.write(json.dumps(record) + "\n")

    def merge(self, path: str | Path) -> int:
        """Add the records of another log of the same GPU model, family and build (a worker's shard) that
        this one lacks; returns how many."""
        new = [r for r in self._read(Path(path)) if self.key_of(r) not in self.records]
        self.add(new)
        return len(new)


class CaseLog(MeasurementLog):
    """Per-case measurements (grouped GEMM, attention): one record per case, every config timed on it
    (``variants_us``), keyed by the case's ``case_key``. The records are what the families' fits read,
    the same as the benchmarks' logs (benchmarks/grouped.py, benchmarks/attention.py)."""

    @staticmethod
    def key_of(record: dict) -> Hashable:
        return record["case_key"]

    def cases(self) -> list[dict]:
        return list(self.records.values())
