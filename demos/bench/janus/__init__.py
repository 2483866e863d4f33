"""`planfence bench janus`: does gating memory updates with Janus pay off?

Modules: `family` and `stream` (the calibrated simulated stream), `run` (one pass per
strategy, every strategy over seeds and rho), `stats` (paired differences with confidence
intervals), `report` (tables, verdict, plot), `llm` (the real path on a task file) and
`command` (the command line).
"""
