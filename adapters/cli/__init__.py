"""The `planfence` command (`main`) and its subcommands on the adapters layer (memory, plan,
audit, policy, serve-owner, proxy). The demos and benchmarks register theirs through the
`planfence.commands` entry-point group.
"""
