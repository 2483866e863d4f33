"""The tables `bench gate` prints."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planfence.demos.bench.harness.output import print_context

SIGNING_LABELS = {
    "owner_answer": "owner answer",
    "store_heads_first": "store heads, first sight",
    "store_heads_remembered": "store heads, remembered",
    "owner_chain_first": "owner chain (3), first",
}


LOOP_ROWS = "sqlite/loop"


def print_tables(result: Mapping[str, Any]) -> None:
    print_context(result)
    print(f"{result['repeat']} timed checks per latency row")
    print("Allow-path latency of Gate.check vs a bare read of the same heads")
    mode = result["rows"][0]["default_audit"] if result["rows"] else "-"
    print(f"(default = Gate() as shipped, its audit mode is {mode!r};")
    print(" durable = every decision recorded before the call may run;")
    print(" deferred = Gate(audit='deferred'), the allow's record written in a batch just after;")
    print(" no audit = Gate(audit=False), the lineage check alone;")
    print(f" {LOOP_ROWS} = the same SQLite file opened with io=loop, its calls on the event")
    print(" loop as the MCP servers make them: no hand-off to the store's thread, bare read too)")
    print(
        f"{'heads from':<11} {'|D(a)|':>6} {'depth':>5} {'bare p50':>9} {'default p50':>11} "
        f"{'ratio':>6} {'p99':>9} {'durable p50':>11} {'ratio':>6} {'deferred p50':>12} "
        f"{'ratio':>6} {'no-audit p50':>12} {'ratio':>6}"
    )

    def times(value: float | None) -> str:
        return f"{value:.2f}x" if value is not None else "-"

    for r in result["rows"]:
        print(
            f"{r['heads_from']:<11} {r['deps']:>6} {r['depth']:>5} "
            f"{r['bare_read_p50_ms']:>6.3f} ms {r['allow_p50_ms']:>8.3f} ms "
            f"{times(r['ratio_p50']):>6} {r['allow_p99_ms']:>6.3f} ms "
            f"{r['durable_p50_ms']:>8.3f} ms {times(r['durable_ratio_p50']):>6} "
            f"{r['deferred_p50_ms']:>9.3f} ms {times(r['deferred_ratio_p50']):>6} "
            f"{r['no_audit_p50_ms']:>9.3f} ms {times(r['no_audit_ratio_p50']):>6}"
        )
    blocked = sum(r.get("audit_unavailable", 0) for r in result["rows"])
    if blocked:
        print(f"{blocked} checks blocked with audit_unavailable (the log could not keep up)")
    if result.get("peer"):
        print()
        print("Allow path beside agent-coherence's effect_gate (pin, re-validate, fire): the same")
        print("read-set size on the same kind of backend, interleaved; planfence's default mode")
        print(
            f"{'backend':<12} {'keys':>4} {'planfence p50':>14} {'agent-coherence p50':>20} "
            f"{'ratio':>6}"
        )
        for t in result["peer"]:
            print(
                f"{t['backend']:<12} {t['keys']:>4} {t['planfence_p50_us']:>11.1f} us "
                f"{t['agent_coherence_p50_us']:>17.1f} us {times(t['ratio_p50']):>6}"
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
    if result.get("signing"):
        print()
        print(f"Signing per check ({result['signing'][0]['keys']} keys): shared secrets (HMAC)")
        print("vs Ed25519 keys (JWS). owner answer = request and answer, each signed and")
        print("verified; store heads = Gate(verify_heads=...) checking the heads it read from the")
        print("store and their owners' signed claims, first sight (signatures checked) vs")
        print("remembered (compared with the last seen); owner chain = keys handed over twice,")
        print("seen first: three ownership claims from the feed, then the head")
        print(f"{'what':<24} {'HMAC p50':>10} {'Ed25519 p50':>12} {'added':>10} {'ratio':>6}")
        for t in result["signing"]:
            ratio = f"{t['ratio_p50']:.2f}x" if t["ratio_p50"] is not None else "-"
            print(
                f"{SIGNING_LABELS.get(t['what'], t['what']):<24} {t['hmac_p50_us']:>7.1f} us "
                f"{t['ed25519_p50_us']:>9.1f} us {t['added_us']:>+7.1f} us {ratio:>6}"
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
