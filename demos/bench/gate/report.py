"""The tables `bench gate` prints."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..harness import print_context


def print_tables(result: Mapping[str, Any]) -> None:
    print_context(result)
    print(f"{result['repeat']} timed checks per latency row")
    print("Allow-path latency of Gate.check vs a bare read of the same heads")
    print("(audited = as shipped, the decision durably recorded before the call may run;")
    print(" deferred = Gate(audit='deferred'), the allow's record written in a batch just after;")
    print(" no audit = Gate(audit=False), the lineage check alone)")
    print(
        f"{'heads from':<10} {'|D(a)|':>6} {'depth':>5} {'bare p50':>9} {'audited p50':>11} "
        f"{'ratio':>6} {'p99':>9} {'deferred p50':>12} {'ratio':>6} {'no-audit p50':>12} "
        f"{'ratio':>6}"
    )

    def times(value: float | None) -> str:
        return f"{value:.2f}x" if value is not None else "-"

    for r in result["rows"]:
        print(
            f"{r['heads_from']:<10} {r['deps']:>6} {r['depth']:>5} "
            f"{r['bare_read_p50_ms']:>6.3f} ms {r['allow_p50_ms']:>8.3f} ms "
            f"{times(r['ratio_p50']):>6} {r['allow_p99_ms']:>6.3f} ms "
            f"{r['deferred_p50_ms']:>9.3f} ms {times(r['deferred_ratio_p50']):>6} "
            f"{r['no_audit_p50_ms']:>9.3f} ms {times(r['no_audit_ratio_p50']):>6}"
        )
    if result.get("telemetry"):
        print()
        print("OpenTelemetry cost on the allow path (audited; SQLite): no provider vs an SDK")
        print(
            f"{'|D(a)|':>6} {'depth':>5} {'no provider':>12} {'SDK':>10} {'added':>9} {'ratio':>6}"
        )
        for t in result["telemetry"]:
            ratio = f"{t['ratio_p50']:.2f}x" if t["ratio_p50"] is not None else "-"
            print(
                f"{t['deps']:>6} {t['depth']:>5} {t['no_provider_p50_ms']:>9.3f} ms "
                f"{t['sdk_provider_p50_ms']:>7.3f} ms {t['overhead_p50_ms']:>6.3f} ms {ratio:>6}"
            )
    for t in result.get("signing", ()):
        print()
        print("Signing per check (request + answer, each signed and verified; 4 keys)")
        print(
            f"HMAC (shared secrets) {t['hmac_p50_us']:.1f} us, Ed25519 JWS "
            f"{t['ed25519_p50_us']:.1f} us: +{t['added_us']:.1f} us ({t['ratio_p50']:.2f}x)"
        )
    if not result["traffic"]:
        return
    print()
    print("Head traffic per validation (HTTP/1.1 bytes, both directions)")
    print(f"{'keys':>5} {'|D(a)|':>6} {'planfence':>10} {'all-key':>10} {'saving':>7}")
    for t in result["traffic"]:
        saving = t["allkeys_bytes"] / t["planfence_bytes"] if t["planfence_bytes"] else 0.0
        print(
            f"{t['keys']:>5} {t['deps']:>6} {t['planfence_bytes']:>8} B "
            f"{t['allkeys_bytes']:>8} B {saving:>6.1f}x"
        )
