"""planfence.plugins: the PlanFence gate (action path) and the Janus controller (write path)."""
