# turnkeeper: every set-up step lives here so that a fresh machine needs only Python 3.11+ and make.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# pytest worker processes (pytest-xdist, ADR 0027): one per core; 0 runs the suite in one process.
TEST_WORKERS ?= auto

.PHONY: run test checks coverage lint typecheck imports sql queries migrations-lock docs package bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

## run: serve the HTTP API on 127.0.0.1:8000 over the embedded PostgreSQL (or TURNKEEPER_DATABASE_URL)
run: $(STAMP)
	$(BIN)/turnkeeper serve --host 127.0.0.1 --port 8000 --demo

## test: every check and every test
test: $(STAMP)
	$(MAKE) --no-print-directory --jobs=2 --output-sync=target checks
	$(BIN)/pytest --numprocesses $(TEST_WORKERS) --dist worksteal --durations=20

## checks: the checks before the tests, independent of each other (make test runs two at a time)
checks: lint typecheck imports sql docs package

## coverage: the tests with coverage measured in every suite (make test leaves the long ones out, ADR 0031)
coverage: $(STAMP)
	TURNKEEPER_COVER_ALL=1 $(BIN)/pytest --numprocesses $(TEST_WORKERS) --dist worksteal --durations=20

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

imports: $(STAMP)
	$(BIN)/lint-imports

## sql: sqlc checks every query against the migrations; the generated module must be current
sql: $(STAMP)
	$(BIN)/python scripts/lock_migrations.py --check
	$(BIN)/sqlc compile
	$(BIN)/python scripts/gen_queries.py --check

## migrations-lock: record the checksum of new migrations (existing entries never change)
migrations-lock: $(STAMP)
	$(BIN)/python scripts/lock_migrations.py

## queries: regenerate turnkeeper/adapters/postgres/queries.py from sqlc's JSON output
queries: $(STAMP)
	$(BIN)/python scripts/gen_queries.py

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## package: build the sdist and wheel, then install and use the wheel outside the checkout
package: $(STAMP)
	$(BIN)/python scripts/check_package.py

bench: $(STAMP)
	$(BIN)/python -m bench
	$(BIN)/python -m bench --live

clean:
	rm -rf $(VENV) build site .mypy_cache .ruff_cache .pytest_cache
