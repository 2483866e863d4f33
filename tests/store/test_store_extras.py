"""The one guard for optional integrations: a missing extra names its pip install line."""

from __future__ import annotations

import pytest

from planfence.shared_memory import MissingExtraError
from planfence.shared_memory.extras import EXTRA_MODULES, extra_imports


@pytest.mark.parametrize("extra", sorted(EXTRA_MODULES))
def test_a_missing_module_of_the_extra_names_the_install_line(extra: str) -> None:
    module = EXTRA_MODULES[extra][0]
    with pytest.raises(MissingExtraError) as err, extra_imports(extra, "the feature"):
        raise ModuleNotFoundError(f"No module named {module!r}", name=f"{module}.sub")
    assert str(err.value) == (
        f"the feature needs the '{extra}' extra: pip install 'planfence[{extra}]'"
    )
    assert isinstance(err.value.__cause__, ModuleNotFoundError)


def test_other_import_errors_are_not_disguised() -> None:
    with pytest.raises(ModuleNotFoundError) as err, extra_imports("mcp", "the proxy"):
        raise ModuleNotFoundError("No module named 'yaml'", name="yaml")
    assert not isinstance(err.value, MissingExtraError)
    with pytest.raises(ValueError, match="unknown extra"), extra_imports("nope", "x"):
        pass


def test_a_real_missing_module_through_the_guard() -> None:
    EXTRA_MODULES["bench"] += ("planfence_no_such_module",)
    try:
        with (
            pytest.raises(MissingExtraError, match=r"planfence\[bench\]"),
            extra_imports("bench", "plots"),
        ):
            import planfence_no_such_module  # type: ignore[import-not-found]  # noqa: F401
    finally:
        EXTRA_MODULES["bench"] = EXTRA_MODULES["bench"][:-1]


def test_backends_are_found_by_url_scheme_in_a_registry() -> None:
    from planfence.shared_memory import ConfigError, create_async_store
    from planfence.shared_memory.backends.memory import MemoryStore
    from planfence.shared_memory.factory import BACKENDS, register_backend

    made: list[tuple[str, bool]] = []

    def toy(url: str, limits: object, create: bool) -> MemoryStore:
        made.append((url, create))
        return MemoryStore()

    register_backend("toy", toy)
    try:
        store = create_async_store("toy://anything", create=False)
        assert isinstance(store, MemoryStore)
        assert made == [("toy://anything", False)]
    finally:
        del BACKENDS["toy"]
    for url in ("toy://anything", "nope", "mysql://x"):
        with pytest.raises(ConfigError, match="unsupported store URL"):
            create_async_store(url)
    with pytest.raises(ConfigError, match="invalid URL scheme"):
        register_backend("no/slash", toy)
