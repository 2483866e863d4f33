"""What judges a call inside an adapter: the gate, unless an experiment supplies another checker.

A checker factory builds the checker for a store: `factory(store, policy, agent)`. Adapters take
the factory object; those that serialize their configuration (AutoGen components) keep it as its
import path, `"package.module:name"`, which `checker_factory` turns back into the factory.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from planfence.shared_memory import AsyncStore, ConfigError

from .audit_writer import DEFAULT_AUDIT, AuditMode
from .call import Checker
from .gate import Gate
from .policy import Policy

CheckerFactory = Callable[[AsyncStore, Policy, "str | None"], Checker]


def gate_checker(
    store: AsyncStore, policy: Policy, agent: str | None = None, *, audit: AuditMode = DEFAULT_AUDIT
) -> Gate:
    """The default: the PlanFence gate over the store."""
    return Gate(store, policy, agent=agent, audit=audit)


def checker_factory(spec: CheckerFactory | str | None) -> CheckerFactory:
    """A factory from itself, its import path `"module:name"`, or None (the gate)."""
    if spec is None:
        return gate_checker
    if isinstance(spec, str):
        module_name, _, attr = spec.partition(":")
        if not module_name or not attr:
            raise ConfigError(f"checker {spec!r}: give a factory, or its path as 'module:name'")
        try:
            found: object = importlib.import_module(module_name)
            for part in attr.split("."):
                found = getattr(found, part)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"checker {spec!r} cannot be imported: {exc}") from None
        if not callable(found):
            raise ConfigError(f"checker {spec!r} is not callable")
        return found
    if callable(spec):
        return spec
    raise ConfigError(f"checker must be a factory or its 'module:name' path, got {spec!r}")


def checker_path(factory: CheckerFactory) -> str | None:
    """The import path that `checker_factory` turns back into `factory` (None for the gate).

    Raises `ConfigError` for a factory that cannot be found by path (a lambda, a closure).
    """
    if factory is gate_checker:
        return None
    path = f"{getattr(factory, '__module__', '')}:{getattr(factory, '__qualname__', '')}"
    try:
        same = checker_factory(path) is factory
    except ConfigError:
        same = False
    if not same:
        raise ConfigError(
            f"checker {factory!r} cannot be saved in a configuration: use a module-level function"
        )
    return path
