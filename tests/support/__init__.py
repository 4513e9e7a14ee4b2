"""What the test suites share: one home for each world, fixture and helper.

- `tests.support.fakes`: the fake clock, id generators and the test signing key.
- `tests.support.domain_world`: the DESIGN section 11 world as plain domain values.
- `tests.support.services`: services over a unit of work factory with the fakes.
- `tests.support.scenario`: steps and reads on the demo world through the services.
- `tests.support.fixtures`: the pytest fixtures the conftest files import.
- `tests.support.openapi` and `tests.support.http`: the contract-checked HTTP client.
- `tests.support.database`: test databases on the PostgreSQL server.
- `tests.support.locks`: proof that a statement waits for a lock.
- `tests.support.raw_connection`: a uvicorn protocol fed raw bytes, without a socket.
- `tests.support.json_log`: the JSON log lines a test causes.
"""
