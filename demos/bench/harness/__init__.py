"""What every `planfence bench ...` command shares: options, stores, services, statistics,
progress, output and Ctrl-C.

The conventions, the same for every benchmark:

- `--quick` is a smoke run with small counts. `--repeat N` is the number of timed repetitions
  behind each row (benchmarks that repeat calls). Counts must be at least 1.
- `--store URL` picks the backend and the place to benchmark. The benchmark never touches the
  data already there: it works in its own throwaway part of it (a new SQLite file in that file's
  folder, a new PostgreSQL schema on that server) and removes it afterwards. Without `--store`
  it uses a temporary SQLite file. It never uses the default store (`$PLANFENCE_STORE`,
  `.planfence/memory.db`). The output and the JSON say which store was used.
- `--json` prints the results as JSON on stdout instead of the table; `--out FILE` writes the
  same JSON to FILE. Progress goes to stderr: a bar on a terminal, one line per step otherwise.
- Ctrl-C stops the run: what was measured so far is printed (and written with `--out`), the
  temporary stores, files and processes are removed, and the command exits with status 130.
  The benchmark's child processes never see the Ctrl-C themselves (`services`, `children`).
- A benchmark that is killed leaves nothing running: its children watch it and stop once it is
  gone (`lifeline`); the next benchmark removes the temporary folder it left (`scratch`).

Modules: `options` (the shared flags and counts), `stores` (the throwaway store), `services`
(owner services and other HTTP endpoints in their own processes, on ports the kernel picks),
`children` (`multiprocessing` children that Ctrl-C does not reach), `lifeline` (children that
end with their parent), `scratch` (temporary folders), `owners` (the owner team of
`bench gate` and `bench link`), `wire` (bytes on the wire), `stats` (percentiles), `tasks`
(steps side by side), `output` (results, tables' preamble, Ctrl-C), and `Progress` (from
`planfence.demos.support`).
"""
