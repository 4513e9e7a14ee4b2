"""The query generator: placeholder conversion, type mapping and rendering."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from turnkeeper.adapters.postgres import statements

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gen_queries.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_queries", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_queries", module)
    spec.loader.exec_module(module)
    return module


gen = _load()


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT $1", "SELECT %(p1)s"),
        ("WHERE a = $1 AND b = $10", "WHERE a = %(p1)s AND b = %(p10)s"),
        ("SELECT $2::uuid[], $1", "SELECT %(p2)s::uuid[], %(p1)s"),
        ("SELECT a % b", "SELECT a %% b"),
        ("SELECT '100%', $1", "SELECT '100%%', %(p1)s"),
        ("SELECT '$1', $1", "SELECT '$1', %(p1)s"),
        ("SELECT 'it''s $1', $2", "SELECT 'it''s $1', %(p2)s"),
        ("SELECT E'\\'$1', $1", "SELECT E'\\'$1', %(p1)s"),
        ('SELECT "odd$1", $1', 'SELECT "odd$1", %(p1)s'),
        ("SELECT $$ $1 % $$, $1", "SELECT $$ $1 %% $$, %(p1)s"),
        ("SELECT $fn$ $1 $fn$, $1", "SELECT $fn$ $1 $fn$, %(p1)s"),
        ("SELECT 1 -- $1 %\n, $1", "SELECT 1 -- $1 %%\n, %(p1)s"),
        ("SELECT /* $1 */ $1", "SELECT /* $1 */ %(p1)s"),
        ("SELECT col$1 FROM t", "SELECT col$1 FROM t"),
    ],
)
def test_placeholders_become_named_psycopg_parameters(sql: str, expected: str) -> None:
    assert gen.convert_placeholders(sql) == expected


@pytest.mark.parametrize("sql", ["SELECT 'open", 'SELECT "open', "SELECT $$ open", "/* open"])
def test_unterminated_text_is_refused(sql: str) -> None:
    with pytest.raises(gen.GeneratorError):
        gen.convert_placeholders(sql)


@pytest.mark.parametrize(
    ("pg_type", "is_array", "not_null", "for_param", "expected"),
    [
        ("uuid", False, True, False, "uuid.UUID"),
        ("uuid", False, False, False, "uuid.UUID | None"),
        ("pg_catalog.int8", False, True, True, "int"),
        ("int4", False, True, False, "int"),
        ("integer", False, True, True, "int"),
        ("bigserial", False, True, False, "int"),
        ("text", False, False, True, "str | None"),
        ("varchar", False, True, False, "str"),
        ("pg_catalog.bool", False, True, True, "bool"),
        ("float8", False, True, False, "float"),
        ("timestamptz", False, False, False, "datetime | None"),
        ("bytea", False, True, True, "bytes"),
        ("jsonb", False, True, False, "Any"),
        ("jsonb", False, False, True, "Any"),
        ("uuid", True, True, False, "list[uuid.UUID]"),
        ("uuid", True, False, False, "list[uuid.UUID] | None"),
        ("uuid", True, True, True, "Sequence[uuid.UUID | None]"),
        ("text", True, False, True, "Sequence[str | None] | None"),
    ],
)
def test_postgres_types_map_to_python(
    pg_type: str, is_array: bool, not_null: bool, for_param: bool, expected: str
) -> None:
    assert (
        gen.python_type(pg_type, is_array=is_array, not_null=not_null, for_param=for_param)
        == expected
    )


def test_an_unknown_type_is_refused() -> None:
    with pytest.raises(gen.GeneratorError, match="void"):
        gen.python_type("void", is_array=False, not_null=True, for_param=False)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("GetMessageByClientId", "get_message_by_client_id"),
        ("AllocateThreadSeq", "allocate_thread_seq"),
        ("LockRunForAnswer", "lock_run_for_answer"),
    ],
)
def test_query_names_become_snake_case(name: str, expected: str) -> None:
    assert gen.snake_case(name) == expected


def _column(
    name: str, type_name: str, *, not_null: bool = True, table: str | None = "things"
) -> Any:
    return {
        "name": name,
        "not_null": not_null,
        "is_array": False,
        "table": None if table is None else {"name": table},
        "type": {"schema": "", "name": type_name},
    }


CODEGEN: dict[str, Any] = {
    "catalog": {
        "default_schema": "public",
        "schemas": [
            {
                "name": "public",
                "tables": [
                    {
                        "rel": {"name": "things"},
                        "columns": [
                            _column("id", "uuid"),
                            _column("label", "text", not_null=False),
                        ],
                    }
                ],
            }
        ],
    },
    "queries": [
        {
            "name": "GetThing",
            "cmd": ":one",
            "filename": "things.sql",
            "text": "SELECT id, label FROM things WHERE id = $1 AND label LIKE '%x'",
            "comments": [" Why this query exists."],
            "params": [{"number": 1, "column": _column("id", "uuid")}],
            "columns": [_column("id", "uuid"), _column("label", "text", not_null=False)],
        },
        {
            "name": "CountPairs",
            "cmd": ":many",
            "filename": "things.sql",
            "text": "SELECT a.id, b.id FROM things a, things b WHERE a.label = $1",
            "comments": [],
            "params": [{"number": 1, "column": _column("label", "text", not_null=False)}],
            "columns": [_column("id", "uuid"), _column("id", "uuid")],
        },
        {
            "name": "TouchThings",
            "cmd": ":execrows",
            "filename": "things.sql",
            "text": "UPDATE things SET label = $1 WHERE id = ANY($2::uuid[])",
            "comments": [],
            "params": [
                {"number": 1, "column": _column("label", "text")},
                {"number": 2, "column": {**_column("ids", "uuid"), "is_array": True}},
            ],
            "columns": [],
        },
    ],
}


def test_render_module_builds_typed_functions_and_rows() -> None:
    source = gen.render_module(CODEGEN)

    compile(source, "queries.py", "exec")
    assert "class ThingRow:" in source
    assert "class CountPairsRow:" in source
    assert "id_2: uuid.UUID" in source
    assert (
        "async def get_thing(conn: psycopg.AsyncConnection[Any], *, id: uuid.UUID) "
        "-> ThingRow | None:"
    ) in source
    assert "WHERE id = %(p1)s AND label LIKE '%%x'" in source
    assert "Why this query exists." in source
    assert "args_row(ThingRow)" in source
    assert '{"p1": label, "p2": list(ids)}' in source
    assert "return cur.rowcount" in source
    assert "ids: Sequence[uuid.UUID | None]" in source


def test_render_module_is_deterministic() -> None:
    assert gen.render_module(CODEGEN) == gen.render_module(CODEGEN)


def test_the_row_classes_accept_rows_positionally() -> None:
    namespace: dict[str, Any] = {"__name__": "generated_queries"}
    exec(compile(gen.render_module(CODEGEN), "queries.py", "exec"), namespace)
    row = namespace["CountPairsRow"]("a", "b")
    assert (row.id, row.id_2) == ("a", "b")


def test_a_query_without_result_columns_cannot_be_one() -> None:
    broken = {**CODEGEN, "queries": [{**CODEGEN["queries"][0], "columns": []}]}
    with pytest.raises(gen.GeneratorError, match="GetThing"):
        gen.render_module(broken)


def test_the_module_registers_every_statement_to_be_kept() -> None:
    namespace: dict[str, Any] = {"__name__": "generated_queries"}
    exec(compile(gen.render_module(CODEGEN), "queries.py", "exec"), namespace)
    found = {
        value
        for name, value in namespace.items()
        if name.startswith("_") and name.isupper() and isinstance(value, str)
    }
    assert len(found) == len(CODEGEN["queries"])
    assert found <= statements._GENERATED
