"""Store URLs in messages: a password never shows in an error, a log line or a repr, and a URL
that does not parse is a typed `ConfigError`."""

from __future__ import annotations

import pytest

from planfence.shared_memory import ConfigError, create_async_store, open_store
from planfence.shared_memory.urls import redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://user:s3cret@host/db", "postgresql://user:***@host/db"),
        ("postgresq://user:s3cret@host/db", "postgresq://user:***@host/db"),
        ("postgresql://u:s3cret@[::1]:5432/db", "postgresql://u:***@[::1]:5432/db"),
        ("postgresql://u:s3cret@[::1/db", "postgresql://u:***@[::1/db"),
        ("postgresql://u:p@ss/w?rd#x@host/db", "postgresql://u:***@host/db"),
        ("postgresql://u:p%40ss@host/db", "postgresql://u:***@host/db"),
        ("postgresql://u:@host/db", "postgresql://u:***@host/db"),
        (
            "postgresql://host/db?sslmode=require&password=s3cret&x=1",
            "postgresql://host/db?sslmode=require&password=***&x=1",
        ),
        ("host=h password='s 3cret' user=u", "host=h password=*** user=u"),
        ("postgresql://u@host:5432/db", "postgresql://u@host:5432/db"),
        ("postgresql://[::1]:5432/db", "postgresql://[::1]:5432/db"),
        ("sqlite:///team.db", "sqlite:///team.db"),
        ("memory://", "memory://"),
        ("not a url at all", "not a url at all"),
    ],
)
def test_redact_url_hides_passwords_only(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    "url",
    [
        "postgresq://user:s3cret@host/db",
        "mysql://user:s3cret@host/db",
        "postgresql://user:s3cret@[::1/db",
        "postgresql://user:s3cret@[::1]:notaport/db",
        "postgresql://user:s3cret@host/db?schema=Bad-Name",
        "sqlite://user:s3cret@[::1/db",
        "sqlite:///x.db?password=s3cret",
    ],
)
def test_bad_urls_are_config_errors_that_do_not_echo_the_password(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        create_async_store(url)
    assert "s3cret" not in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("url", ["postgresql://[::1/db", "postgres://[::1/db?schema=x"])
def test_a_malformed_ipv6_host_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="IPv6"):
        create_async_store(url)


def test_the_store_repr_hides_the_password() -> None:
    store = create_async_store("postgresql://user:s3cret@127.0.0.1:1/db")
    assert "s3cret" not in repr(store)
    assert "user:***@127.0.0.1:1/db" in repr(store)
    assert store.url == "postgresql://user:s3cret@127.0.0.1:1/db"  # still usable to reconnect


def test_the_sync_store_repr_names_its_url(tmp_path: object) -> None:
    with open_store("memory://") as store:
        assert "memory://" in repr(store)
