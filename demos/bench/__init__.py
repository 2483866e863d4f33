"""The `planfence bench ...` benchmarks, one module or package each (`store`, `gate`, `link`,
`proxy`, `replay`, `janus`), over a shared `harness` (options, throwaway stores, services on
kernel-picked ports, statistics, progress, output and Ctrl-C) and the `netem` link emulator."""
