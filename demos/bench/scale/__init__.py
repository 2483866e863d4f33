"""`planfence bench scale`: how the cost of a check grows with the work, one run per axis.

- Store size: the allow path (`Gate.check`, default audit mode, |D(a)| = 4, depth 1) at 10^3 to
  10^6 records over 10^2 to 10^5 keys (ten versions a key), the store grown between the steps;
  p50 and p99 at each size and their ratio to the smallest size's.
- |D(a)|: the same check at 1 to 64 keys; p50 and p99 at each, and the slope of p50 per key
  (least squares).
- Processes: 1, 2, 4 and 8 gate processes sharing one SQLite file (and one PostgreSQL database,
  in a throwaway schema, when a server answers), each checking its own current plan for a fixed
  time after a common start; checks per second in all and the p99 of one check.

Every store is a throwaway one (a temporary SQLite file, a new PostgreSQL schema), never the
user's default store. Modules: `command` (options and the run), `axes` (the measurements),
`worker` (one gate process), `report` (the tables and the plot).
"""
