"""planfence."""
