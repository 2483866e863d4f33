"""The table `bench window` prints."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planfence.demos.bench.harness.output import print_context
from planfence.shared_memory.extras import extra_imports

with extra_imports("bench", "planfence bench window"):
    from rich.console import Console
    from rich.table import Table

TITLES = {"gate": "gate only", "fence": "gate + fencing", "lease": "gate + lease"}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def print_table(result: Mapping[str, Any]) -> None:
    print_context(result)
    print(
        f"{result['executors']} executors, {result['seconds']:g} s per mode, tool "
        f"{result['tool_ms']} ms, owner pause {result['owner_interval_ms']:g} ms, lease_ms "
        f"{result['lease_ms']}; on stale = judged from the change feed"
    )
    table = Table(title="Effects on a stale head")
    for name in ("mode", "actions", "effects", "on stale", "refused (gate)", "refused (fence)"):
        table.add_column(name, justify="left" if name == "mode" else "right")
    table.add_column("owner wait p50", justify="right")
    table.add_column("owner wait p99", justify="right")
    for r in result["rows"]:
        table.add_row(
            TITLES.get(r["mode"], r["mode"]),
            str(r["actions"]),
            str(r["effects"]),
            str(r["effects_on_stale"]),
            str(r["refused_by_gate"]),
            str(r["refused_by_fence"]),
            _ms(r["owner_wait_p50_ms"]),
            _ms(r["owner_wait_p99_ms"]),
        )
    Console(width=120).print(table)
