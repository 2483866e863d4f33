"""`planfence bench replay`: coordination stall per action as the update rate grows, and safety.

A controlled replay of one event stream against four executors, on loopback and on an emulated
AT&T cellular link (the relay of `planfence bench link`, paced by a mahimahi trace).

The team:
- a shared key space (default 16 keys) split among several owners (default 4; key i belongs to
  owner i mod 4), each owner answering for its keys over HTTP (the app `planfence serve-owner`
  runs, one process per owner, with the same connection keep-alive as the replica endpoints);
- N executor replicas (default 3), each with a push endpoint (a small Starlette app in its own
  process) that verifies and acknowledges eager updates;
- one planner that derives each plan from the current heads of the keys the action needs;
- every agent holds its own Ed25519 key (JWS), so both safe paths pay the same signatures:
  executors sign head requests and verify the owners' signed answers; owners sign each eager
  update's head inside its write and the replicas verify it.

The stream (pure, seeded: `schedule`): A actions (default 10); action i is taken by a replica
drawn at random and calls a tool that depends on 1 or 2 distinct keys (D(a), declared by policy).
round(r * A) owner updates, each to a key drawn uniformly, are placed at uniform random times over
the A action windows, at r updates per action in {0.25, 0.5, 1, 2, 4, 8, 16}. Window i runs:

    plan P_i from the heads of D(a_i)  ->  `post` updates land  ->  check P_i
        -> (replan: new plan, then the `late` updates land, then check again)  ->  act or block
        -> (no replan: the `late` updates land after the action)

An update lands in `post` when it falls in the first 80% of its window (between planning and the
check: a post-plan revision), in `late` otherwise (the time the replan or the tool call takes).
The action stream is the same at every rate; only the updates differ. Whether an action's plan is
stale, and whether its replan is overtaken too, follows from the stream alone (`expect`), which
the replay checks its results against.

The executors (three replicas each, in their own key space, the four runs interleaved window by
window so each meets the same link conditions; on the AT&T path every rate gets a fresh emulated
link that replays the trace from its start, so every rate meets the same stretch of it):
- planfence: `Gate` with `HttpOwnerHeads`; asks only the owners of D(a). Nothing on update path.
- eager: `EagerSync` + `EagerExecutor`; every update is POSTed with its record and its owner's
  signed head (the Ed25519 signature over key, record id, sequence and epoch the owner made inside
  the write, as a store keeps it) to every replica's endpoint in parallel, and counts once all
  have acknowledged; each endpoint verifies the head with the owners' public keys and refuses a
  forged one or a rollback. That wait is the update path's stall; the action path is a local
  check.
- allkeys: `Gate` with `AllKeysHeads` over the same owner services (every shared key, every time).
- freshness: owner-head freshness, as in the paper's staged replay: asks the owners of D(a) for
  their heads and brings its replica up to date (`FreshnessOnly`), never checks the plan.

Measured per executor and rate:
- coordination stall per action = the action path (wall time of every check of the action,
  including the re-check after a replan; planning itself is not counted) + the update path
  attributable to that action (eager: the push waits of the updates in its window). p50 and
  mean over actions; the mean is the per-action cost the rate claim is about.
- HTTP messages and bytes per action (owner head requests; eager pushes with their acks).
- replans; blocks, by reason (`stale_after_replan` when the replan was overtaken too; any other
  reason is an executor failing closed, e.g. an owner that did not answer in time); invalid
  actions: an executed action is invalid when, by the store's change feed at the moment the tool
  ran, some key of D(a) had a head other than the version its plan used (walked from the plan's
  parents apart from the gate's own code, by `demos.judging.used_versions`).
- the crossover: the lowest rate from which planfence's mean stall stays below eager's, on the
  grid, and interpolated linearly between the two grid rates around it.

The paper's claim this reproduces: at low update rates eager sync stalls less; as churn grows
PlanFence avoids repeated coordination on the update path, and stalls less than the safe
proactive alternative once the update rate is >= 4 per action; every method that enforces exact
lineage issues zero invalid actions while freshness-only acts on stale plans.

Choices to know when reading the numbers:
- eager pushes carry the new record (default 1 KiB value: a replica must hold the version to
  plan from it); owner answers carry record ids only. `--value-bytes` changes the record size.
- eager fans each update out to all replicas at once (the strongest form of the baseline), over
  kept-alive connections; so do the head requests.
- the gate is audited as shipped (each decision is written to the store before the call runs);
  the eager executor keeps no audit log.
- on the emulated link, both the executors' head requests and the writers' pushes travel on the
  trace's uplink, answers and acks on its downlink (one shared bottleneck per direction).

Modules: `schedule` (the stream, what it implies, the crossover), `push` (the eager push endpoint
and writer), `executors` (the registry's executors, in the replay's order), `config`, `run` (one
executor's replicas on one stream), `sweep` (rates, paths, processes, links), `report` (summaries,
tables, figure), `command` (options and the run).
"""
