"""planfence's demos and benchmarks.

Their errors, under the store's (`planfence.shared_memory.errors`):

PlanfenceError
└── PushRefused                  an eager-sync replica refused an update (baseline) [demos.pushes]
"""
