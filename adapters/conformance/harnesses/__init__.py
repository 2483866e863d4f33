"""The harnesses of the adapters planfence ships, one module per framework (each imports its
framework, so import them only through `planfence.adapters.conformance.runner.load`)."""
