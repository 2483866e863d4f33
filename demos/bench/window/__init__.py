"""`planfence bench window`: effects that land on a stale head, with and without the fences.

Several executor processes call a tool that takes a set time (`--tool-ms`), while an owner
process advances the heads that tool depends on at a high rate (`--owner-interval-ms`). Each
executor reads a head, plans from it, asks the gate, and on an allow sleeps for the tool's time
and then makes its effect: a new version of its own effects key, citing the plan. Three modes:

- `gate`: the gate only; the effect is written as soon as the tool's time is up;
- `fence`: the effect is a fenced write (`planfence.fence.fenced_write`): it commits only if
  the token's heads are unchanged, in the same transaction;
- `lease`: the tool's policy declares `lease_ms`: the allow holds the heads until the tool
  returns, and the owner's advances on them wait.

An effect is *on stale* when the head of the key it acted on was no longer the version its plan
used at the moment the effect committed. That is judged afterwards from the store's history
alone (the change feed replayed in order, and the effect's plan's parents), not from what the
gate or the executors reported. The owner reports how long each of its head advances took
(`owner_wait_p50_ms`, `owner_wait_p99_ms`).

Modules: `command` (options and the run), `workers` (the executor and owner processes),
`judge` (on-stale effects from the history), `report` (the table).
"""
