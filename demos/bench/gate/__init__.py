"""`planfence bench gate`: what the gate costs on the allow path, and what it sends.

Latency: `Gate.check` on plans that are current (the allow path, audit on, as shipped) for
|D(a)| = 1, 4, 16 and lineage depth 1, 10, 100, with heads from the store (SQLite, PostgreSQL) and
from owner services over loopback HTTP. Each check is interleaved with a bare read of the same
heads (`store.states(keys)`, or the signed HTTP head requests alone); `ratio_p50` is the allow
path's median over the bare read's.

Depth N: the plan sits N derived records above the facts (1: the plan cites the facts; 10: it
cites a chain of 9 intermediate derived records, the lowest of which cites the facts).

Traffic: bytes on the wire per validation (HTTP/1.1 request and answer, headers included) when
the gate asks owners for D(a) only, versus the batch all-key check (every shared key), for key
spaces of 8, 32 and 128 keys.

Stores: a temporary SQLite file (it also backs the owner services), plus PostgreSQL rows in a
throwaway schema on the server at $PLANFENCE_BENCH_POSTGRES_URL (skipped with a note when none
answers). With `--store URL`, that backend alone, in a throwaway file or schema at that place.

Modules: `command` (options and the run), `cases` (the plans checked), `measure` (the timed
checks and the traffic count), `report` (the tables).
"""
