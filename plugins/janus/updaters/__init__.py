"""Base memory updaters Janus wraps: DC-RS (cheatsheet) and ExpeL (insight rules), public as
`planfence.plugins.janus.DCRSUpdater` and `ExpeLUpdater`."""
