"""The time bounds of the PostgreSQL pool, and the errors they end in."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import PoolTimeout, TooManyRequests

from turnkeeper.adapters.postgres.errors import bounded_conninfo, translate
from turnkeeper.adapters.postgres.pool import PoolPolicy
from turnkeeper.application.errors import RetriableConflict, StoreUnavailable
from turnkeeper.application.settings import Settings


def test_the_policy_follows_the_settings() -> None:
    policy = PoolPolicy.from_settings(
        Settings(request_timeout=timedelta(seconds=3), reconnect_max_wait=timedelta(seconds=4))
    )
    assert policy == PoolPolicy(request_timeout=3.0, reconnect_max_wait=4.0, retry_after=4)


def test_every_connection_gets_statement_and_idle_timeouts_and_a_connect_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PGOPTIONS", raising=False)
    policy = PoolPolicy.from_settings(Settings(request_timeout=timedelta(seconds=3)))
    assert policy.connection_kwargs("dbname=turnkeeper") == {
        "options": "-c statement_timeout=3000 -c idle_in_transaction_session_timeout=3000",
        "connect_timeout": "3",
    }


def test_options_and_a_smaller_connect_timeout_of_the_conninfo_are_kept() -> None:
    policy = PoolPolicy.from_settings(Settings(request_timeout=timedelta(seconds=5)))
    kwargs = policy.connection_kwargs(
        "postgresql://alex@db.example.com/turnkeeper?options=-c%20work_mem%3D8MB&connect_timeout=2"
    )
    assert kwargs == {
        "options": "-c work_mem=8MB -c statement_timeout=5000"
        " -c idle_in_transaction_session_timeout=5000",
        "connect_timeout": "2",
    }


@pytest.mark.parametrize("given", ["0", "-5"])
def test_a_connect_timeout_of_none_does_not_lift_the_bound(given: str) -> None:
    # libpq reads 0 or less as "wait for ever": the request's bound stays.
    policy = PoolPolicy.from_settings(Settings(request_timeout=timedelta(seconds=5)))
    kwargs = policy.connection_kwargs(f"dbname=turnkeeper connect_timeout={given}")
    assert kwargs["connect_timeout"] == "5"


def test_pgoptions_are_kept_when_the_conninfo_names_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGOPTIONS", "-c search_path=turnkeeper")
    kwargs = PoolPolicy.from_settings(
        Settings(request_timeout=timedelta(seconds=1))
    ).connection_kwargs("dbname=x")
    assert kwargs["options"] == (
        "-c search_path=turnkeeper -c statement_timeout=1000"
        " -c idle_in_transaction_session_timeout=1000"
    )


@pytest.mark.parametrize(
    "error",
    [
        pg_errors.QueryCanceled("canceling statement due to statement timeout"),
        PoolTimeout("couldn't get a connection after 5.00 sec"),
        TooManyRequests("the pool has already 10 requests waiting"),
        psycopg.OperationalError("server closed the connection unexpectedly"),
        pg_errors.AdminShutdown("terminating connection due to administrator command"),
    ],
    ids=["statement_timeout", "pool_timeout", "pool_queue_full", "lost", "shutdown"],
)
def test_timeouts_and_lost_connections_are_an_unavailable_store(error: psycopg.Error) -> None:
    translated = translate(error)
    assert isinstance(translated, StoreUnavailable)
    assert translated.code == "unavailable"
    assert translated.retry_after is None


def test_a_lock_timeout_stays_a_retriable_conflict() -> None:
    translated = translate(pg_errors.LockNotAvailable("canceling statement due to lock timeout"))
    assert isinstance(translated, RetriableConflict)


@pytest.mark.parametrize(
    ("conninfo", "seconds", "bounded"),
    [
        ("dbname=turnkeeper", 5.0, "5"),
        ("dbname=turnkeeper", 0.2, "1"),
        ("dbname=turnkeeper connect_timeout=2", 5.0, "2"),
        ("dbname=turnkeeper connect_timeout=10", 5.0, "5"),
        ("dbname=turnkeeper connect_timeout=0", 5.0, "5"),
    ],
)
def test_check_and_migrate_bound_their_connection_attempt(
    conninfo: str, seconds: float, bounded: str
) -> None:
    assert conninfo_to_dict(bounded_conninfo(conninfo, seconds))["connect_timeout"] == bounded
    assert bounded_conninfo(conninfo, None) == conninfo
