"""Generate turnkeeper/adapters/postgres/queries.py from sqlc's analysis of sql/queries.

sqlc (the binary installed next to this interpreter) checks every named query in
``sql/queries`` against the schema of ``sql/bootstrap.sql`` and ``sql/migrations`` and
writes its analysis to ``build/sqlc/codegen.json``. This script turns that analysis into
one typed Python module: an attrs row class per result shape and an async function per
query that binds its parameters as named psycopg placeholders.

Usage::

    python scripts/gen_queries.py          # regenerate turnkeeper/adapters/postgres/queries.py
    python scripts/gen_queries.py --check  # exit 1 when the module is stale

The output is deterministic: the same SQL always gives the same bytes.
"""

from __future__ import annotations

import argparse
import json
import keyword
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CODEGEN_JSON = ROOT / "build" / "sqlc" / "codegen.json"
TARGET = ROOT / "turnkeeper" / "adapters" / "postgres" / "queries.py"

#: PostgreSQL type names (schema stripped, lower case) -> Python annotation.
PG_TO_PYTHON: Mapping[str, str] = {
    "uuid": "uuid.UUID",
    "int2": "int",
    "int4": "int",
    "int8": "int",
    "smallint": "int",
    "integer": "int",
    "bigint": "int",
    "serial": "int",
    "serial4": "int",
    "bigserial": "int",
    "serial8": "int",
    "text": "str",
    "varchar": "str",
    "character varying": "str",
    "bpchar": "str",
    "name": "str",
    "bool": "bool",
    "boolean": "bool",
    "float8": "float",
    "float4": "float",
    "double precision": "float",
    "real": "float",
    "timestamptz": "datetime",
    "timestamp with time zone": "datetime",
    "bytea": "bytes",
    "jsonb": "Any",
    "json": "Any",
}

#: Types whose parameters are wrapped so psycopg sends them as jsonb.
_JSON_TYPES = frozenset({"jsonb", "json"})

_COMMANDS = frozenset({":one", ":many", ":exec", ":execrows"})
_IDENT_CHAR = re.compile(r"[A-Za-z0-9_$]")
_PARAM = re.compile(r"\$(\d+)")
_DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$")


class GeneratorError(Exception):
    """The sqlc analysis holds something this generator cannot express."""


def convert_placeholders(sql: str) -> str:
    """Turn PostgreSQL ``$N`` parameters into psycopg named placeholders ``%(pN)s``.

    Every literal ``%`` becomes ``%%`` (psycopg formats the whole query when parameters
    are given). ``$N`` inside string literals, quoted identifiers, comments and
    dollar-quoted bodies is left alone.

    Args:
        sql: the query text as sqlc rewrote it (``sqlc.arg(x)`` already became ``$N``).

    Returns:
        The query text for ``cursor.execute(query, {"p1": ...})``.

    Raises:
        GeneratorError: for an unterminated literal, identifier, comment or dollar quote.
    """
    out: list[str] = []
    i = 0
    n = len(sql)
    while i < n:
        ch = sql[i]
        prev = sql[i - 1] if i > 0 else ""
        if ch == "'":
            backslash = prev in ("E", "e") and not (i > 1 and _IDENT_CHAR.match(sql[i - 2]))
            end = _end_of_quoted(sql, i, "'", backslash=backslash)
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif ch == '"':
            end = _end_of_quoted(sql, i, '"', backslash=False)
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif sql.startswith("--", i):
            newline = sql.find("\n", i)
            end = n if newline < 0 else newline
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif sql.startswith("/*", i):
            close = sql.find("*/", i + 2)
            if close < 0:
                raise GeneratorError("unterminated /* comment")
            out.append(sql[i : close + 2].replace("%", "%%"))
            i = close + 2
        elif ch == "$" and not (prev and _IDENT_CHAR.match(prev)):
            param = _PARAM.match(sql, i)
            tag = _DOLLAR_TAG.match(sql, i)
            if param is not None:
                out.append(f"%(p{param.group(1)})s")
                i = param.end()
            elif tag is not None:
                close = sql.find(tag.group(0), tag.end())
                if close < 0:
                    raise GeneratorError(f"unterminated dollar quote {tag.group(0)}")
                end = close + len(tag.group(0))
                out.append(sql[i:end].replace("%", "%%"))
                i = end
            else:
                out.append(ch)
                i += 1
        elif ch == "%":
            out.append("%%")
            i += 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _end_of_quoted(sql: str, start: int, quote: str, *, backslash: bool) -> int:
    """The index just after the quoted token that opens at `start` (doubled quotes escape)."""
    i = start + 1
    while i < len(sql):
        ch = sql[i]
        if backslash and ch == "\\":
            i += 2
            continue
        if ch == quote:
            if i + 1 < len(sql) and sql[i + 1] == quote:
                i += 2
                continue
            return i + 1
        i += 1
    raise GeneratorError(f"unterminated {quote}quoted text")


def base_type(column: Mapping[str, Any]) -> str:
    """The lower-case PostgreSQL type name of a sqlc column, without schema.

    Args:
        column: a sqlc column (of a result or a parameter).

    Returns:
        For example ``int8`` or ``timestamptz``.
    """
    # sqlc spells some parameter types with their schema (``pg_catalog.int8``).
    return str(column["type"]["name"]).lower().rsplit(".", 1)[-1]


def python_type(pg_type: str, *, is_array: bool, not_null: bool, for_param: bool) -> str:
    """The Python annotation of a column or parameter.

    Array parameters accept any sequence (PostgreSQL array elements may be NULL); array
    results are lists.

    Args:
        pg_type: the PostgreSQL type name, for example ``uuid`` or ``pg_catalog.int8``.
        is_array: True for ``type[]``.
        not_null: False adds ``| None``.
        for_param: True for a function parameter, False for a row attribute.

    Returns:
        The annotation as source text, for example ``list[uuid.UUID] | None``.

    Raises:
        GeneratorError: for a type without mapping.
    """
    name = pg_type.lower().rsplit(".", 1)[-1]
    try:
        scalar = PG_TO_PYTHON[name]
    except KeyError:
        raise GeneratorError(f"no Python type for PostgreSQL type {pg_type!r}") from None
    if is_array:
        element = scalar if scalar == "Any" else f"{scalar} | None"
        annotation = f"Sequence[{element}]" if for_param else f"list[{scalar}]"
    else:
        annotation = scalar
    if not not_null and annotation != "Any":
        annotation = f"{annotation} | None"
    return annotation


def snake_case(name: str) -> str:
    """``GetMessageByClientId`` -> ``get_message_by_client_id``.

    Args:
        name: a CamelCase query name.

    Returns:
        The snake_case function name.
    """
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _identifier(raw: str, fallback: str, taken: set[str]) -> str:
    """A valid, unique Python identifier for a sqlc column or parameter name."""
    name = re.sub(r"\W", "_", raw).strip("_").lower() or fallback
    if name[0].isdigit():
        name = f"{fallback}_{name}"
    if keyword.iskeyword(name) or name == "conn":
        name = f"{name}_"
    unique = name
    suffix = 2
    while unique in taken:
        unique = f"{name}_{suffix}"
        suffix += 1
    taken.add(unique)
    return unique


def _camel(snake: str) -> str:
    return "".join(part.capitalize() for part in snake.split("_") if part)


def _singular(table: str) -> str:
    if table.endswith("s") and not table.endswith("ss"):
        return table[:-1]
    return table


def _column_signature(column: Mapping[str, Any]) -> tuple[str, str, bool, bool]:
    return (
        str(column["name"]),
        base_type(column),
        bool(column["not_null"]),
        bool(column["is_array"]),
    )


def _table_models(catalog: Mapping[str, Any]) -> dict[tuple[tuple[str, str, bool, bool], ...], str]:
    """Column signatures of every public table -> the name of its shared row class."""
    models: dict[tuple[tuple[str, str, bool, bool], ...], str] = {}
    for schema in catalog["schemas"]:
        if schema["name"] not in ("public", catalog.get("default_schema", "public")):
            continue
        for table in schema["tables"]:
            signature = tuple(_column_signature(c) for c in table["columns"])
            models.setdefault(signature, f"{_camel(_singular(table['rel']['name']))}Row")
    return models


def _docstring_sql(text: str) -> list[str]:
    return [f"        {line}" if line.strip() else "" for line in text.strip().splitlines()]


#: Statements that may wait in a write unit's pipeline (ADR 0022): an ``:exec`` one is only
#: queued (its error is raised at the unit's next wait, inside the same unit), and a
#: ``:one`` or ``:many`` one gets a ``start_`` variant that queues it and returns its
#: pending rows. Every other statement waits for its own result, as outside a pipeline.
PIPELINED = frozenset(
    {
        "AppendEvent",
        "AppendEvents",
        "GetMessage",
        "GetOwner",
        "GetPostFacts",
        "GetPrincipals",
        "GetThreadTarget",
        "InsertFollowup",
        "InsertMessage",
        "InsertMessageWithEvent",
        "InsertRun",
        "ListFollowups",
        "ListGrantsForPrincipal",
        "ListGrantsForPrincipals",
        "ListVisibleMessages",
        "LockAgentCursor",
        "LockAgentCursorForToken",
        "MarkThreadRestricted",
        "MoveFollowups",
        "ReadAudienceEvents",
        "SaveAgentCursor",
        "SetFollowupStates",
        "SetThreadLatestSeq",
        "UpdateRun",
    }
)


def _comment_lines(query: Mapping[str, Any]) -> list[str]:
    return [str(c).strip() for c in query.get("comments") or [] if str(c).strip()]


class _Module:
    """Accumulates the generated source."""

    def __init__(self) -> None:
        self.row_classes: dict[str, list[str]] = {}
        self.functions: list[str] = []
        self.uses_sequence = False
        self.uses_jsonb = False
        self.uses_scalar = False
        self.uses_args_row = False
        self.uses_cast = False
        self.uses_settled = False
        self.uses_pending: set[str] = set()
        self.statements: list[str] = []

    def row_class(self, name: str, doc: str, columns: Sequence[Mapping[str, Any]]) -> None:
        if name in self.row_classes:
            return
        taken: set[str] = set()
        fields: list[tuple[str, str, str]] = []
        for index, column in enumerate(columns, start=1):
            attr = _identifier(str(column["name"]), f"column{index}", taken)
            annotation = python_type(
                base_type(column),
                is_array=bool(column["is_array"]),
                not_null=bool(column["not_null"]),
                for_param=False,
            )
            pg = "``" + base_type(column) + ("[]" if column["is_array"] else "") + "``"
            if not column["not_null"]:
                pg = f"{pg} or NULL"
            fields.append((attr, annotation, pg))
        lines = [
            "@attrs.frozen",
            f"class {name}:",
            f'    """{doc}',
            "",
            "    Attributes:",
        ]
        lines += [f"        {attr}: {pg}." for attr, _, pg in fields]
        lines += ['    """', ""]
        lines += [f"    {attr}: {annotation}" for attr, annotation, _ in fields]
        self.row_classes[name] = lines


def render_module(codegen: Mapping[str, Any]) -> str:
    """The source of turnkeeper/adapters/postgres/queries.py (before ruff format).

    Args:
        codegen: sqlc's JSON analysis (``build/sqlc/codegen.json``).

    Returns:
        The module source.

    Raises:
        GeneratorError: for a query this generator cannot express.
    """
    models = _table_models(codegen["catalog"])
    module = _Module()
    constants: list[str] = []
    for query in codegen["queries"]:
        _render_query(query, models, module, constants)
    return _assemble(module, constants)


def _render_query(
    query: Mapping[str, Any],
    models: Mapping[tuple[tuple[str, str, bool, bool], ...], str],
    module: _Module,
    constants: list[str],
) -> None:
    name = str(query["name"])
    cmd = str(query["cmd"])
    if cmd not in _COMMANDS:
        raise GeneratorError(f"{name}: unsupported command {cmd}")
    func = snake_case(name)
    constant = f"_{func.upper()}"
    text = str(query["text"]).strip()
    converted = convert_placeholders(text)
    if '"""' in converted or "\\" in converted:
        raise GeneratorError(f"{name}: the SQL cannot be embedded in a triple-quoted string")
    constants += [f'{constant} = """{converted}"""', ""]
    module.statements.append(constant)

    taken: set[str] = {"conn"}
    params: list[tuple[str, str, str, int, str]] = []
    for param in sorted(query["params"], key=lambda p: int(p["number"])):
        number = int(param["number"])
        column = param["column"]
        pg = base_type(column)
        arg = _identifier(str(column.get("name") or ""), f"p{number}", taken)
        annotation = python_type(
            pg, is_array=bool(column["is_array"]), not_null=bool(column["not_null"]), for_param=True
        )
        if bool(column["is_array"]):
            module.uses_sequence = True
            value = f"list({arg})"
            if pg in _JSON_TYPES:
                module.uses_jsonb = True
                value = f"[Jsonb(v) for v in {arg}]"
            if not column["not_null"]:
                value = f"None if {arg} is None else {value}"
        elif pg in _JSON_TYPES:
            module.uses_jsonb = True
            value = (
                f"Jsonb({arg})"
                if column["not_null"]
                else f"None if {arg} is None else Jsonb({arg})"
            )
        else:
            value = arg
        pg_label = pg + ("[]" if column["is_array"] else "")
        params.append((arg, annotation, value, number, pg_label))

    columns = list(query["columns"]) if cmd in (":one", ":many") else []
    if cmd in (":one", ":many") and not columns:
        raise GeneratorError(f"{name}: {cmd} needs result columns")
    scalar_annotation = ""
    row_name = ""
    if len(columns) == 1:
        column = columns[0]
        scalar_annotation = python_type(
            base_type(column),
            is_array=bool(column["is_array"]),
            not_null=bool(column["not_null"]),
            for_param=False,
        )
        module.uses_scalar = True
        module.uses_cast = True
    elif columns:
        signature = tuple(_column_signature(c) for c in columns)
        row_name = models.get(signature) or f"{name}Row"
        shared = row_name != f"{name}Row"
        doc = (
            f"A row of table ``{columns[0]['table']['name']}``."
            if shared and columns[0].get("table")
            else f"A result row of {name}."
        )
        module.row_class(row_name, doc, columns)
        module.uses_args_row = True

    if cmd == ":one":
        result = f"{scalar_annotation or row_name} | None"
        if scalar_annotation.endswith("| None"):
            result = scalar_annotation
        returns = "The row, or None when no row matched."
    elif cmd == ":many":
        result = f"list[{scalar_annotation or row_name}]"
        returns = "The rows, in the order of the query."
    elif cmd == ":execrows":
        result = "int"
        returns = "The number of rows the statement affected."
    else:
        result = "None"
        returns = ""

    signature_parts = ["conn: psycopg.AsyncConnection[Any]"]
    if params:
        signature_parts.append("*")
        signature_parts += [f"{arg}: {annotation}" for arg, annotation, _, _, _ in params]
    lines = [f"async def {func}({', '.join(signature_parts)}) -> {result}:"]
    lines.append(f'    """Run {name} ({cmd}, sql/queries/{query["filename"]}).')
    lines.append("")
    for comment in _comment_lines(query):
        lines.append(f"    {comment}")
    if _comment_lines(query):
        lines.append("")
    lines.append("    SQL::")
    lines.append("")
    lines += _docstring_sql(text)
    lines.append("")
    lines.append("    Args:")
    lines.append("        conn: the connection; the statement runs in its current transaction.")
    for arg, _, _, number, pg_label in params:
        lines.append(f"        {arg}: ``${number}`` (``{pg_label}``).")
    if returns:
        lines.append("")
        lines.append("    Returns:")
        lines.append(f"        {returns}")
    lines.append('    """')
    bound = "{" + ", ".join(f'"p{number}": {value}' for _, _, value, number, _ in params) + "}"
    execute = (
        f"await cur.execute({constant}, {bound})" if params else f"await cur.execute({constant})"
    )
    if cmd in (":exec", ":execrows"):
        lines.append("    async with conn.cursor() as cur:")
        lines.append(f"        {execute}")
        if cmd == ":execrows" or name not in PIPELINED:
            module.uses_settled = True
            lines.append("        await settled(cur)")
        if cmd == ":execrows":
            lines.append("        return cur.rowcount")
    else:
        factory = "scalar_row" if scalar_annotation else f"args_row({row_name})"
        fetch = "fetchone" if cmd == ":one" else "fetchall"
        lines.append(f"    async with conn.cursor(row_factory={factory}) as cur:")
        lines.append(f"        {execute}")
        if scalar_annotation:
            lines.append(f'        return cast("{result}", await cur.{fetch}())')
        else:
            lines.append(f"        return await cur.{fetch}()")
    module.functions += [*lines, "", ""]
    if name in PIPELINED and cmd in (":one", ":many"):
        item = scalar_annotation or row_name
        if cmd == ":one" and scalar_annotation.endswith("| None"):
            item = scalar_annotation.removesuffix("| None").strip()
        pending = f"PendingOne[{item}]" if cmd == ":one" else f"PendingMany[{item}]"
        module.uses_pending.add(pending.split("[", 1)[0])
        start = [f"async def start_{func}({', '.join(signature_parts)}) -> {pending}:"]
        start.append(f'    """Queue {name} in the unit\'s pipeline; read it with ``result()``.')
        start.append("")
        start.append(f"    The parameters and rows are those of `{func}`.")
        start.append('    """')
        start.append(f"    cur = conn.cursor(row_factory={factory})")
        start.append(f"    {execute}")
        start.append(f"    return {pending.split('[', 1)[0]}(cur)")
        module.functions += [*start, "", ""]


def _assemble(module: _Module, constants: list[str]) -> str:
    header = [
        '"""Typed functions for every query in sql/queries, one per named statement.',
        "",
        "Generated by scripts/gen_queries.py from sqlc's analysis of the queries against the",
        "migrations; never edit by hand (run ``make queries``; ``make sql`` checks it is",
        "current). Every function runs one statement on the connection it is given, inside the",
        "caller's transaction, with parameters bound as named placeholders.",
        '"""',
        "",
        "# Generated by scripts/gen_queries.py. DO NOT EDIT.",
        "# The SQL constants are statements, not secrets (S105 flags names with TOKEN).",
        "# ruff: noqa: S105",
        "",
        "from __future__ import annotations",
        "",
        "import uuid",
    ]
    if module.uses_sequence:
        header.append("from collections.abc import Sequence")
    header.append("from datetime import datetime")
    typing_names = ["Any", *(["cast"] if module.uses_cast else [])]
    header.append(f"from typing import {', '.join(typing_names)}")
    header += ["", "import attrs", "import psycopg"]
    rows = [
        n
        for n, used in (("args_row", module.uses_args_row), ("scalar_row", module.uses_scalar))
        if used
    ]
    if rows:
        header.append(f"from psycopg.rows import {', '.join(rows)}")
    if module.uses_jsonb:
        header.append("from psycopg.types.json import Jsonb")
    helpers = sorted(module.uses_pending) + (["settled"] if module.uses_settled else [])
    header.append("")
    if helpers:
        header.append(f"from turnkeeper.adapters.postgres.pipelining import {', '.join(helpers)}")
    header.append("from turnkeeper.adapters.postgres.statements import keep_statements")
    header += ["", ""]
    body: list[str] = []
    for lines in module.row_classes.values():
        body += [*lines, "", ""]
    body += constants
    body += ["", *module.functions]
    # Only these statements are kept (converted once, prepared once per connection).
    body += ["", "keep_statements(", "    [", *(f"        {c}," for c in module.statements)]
    body += ["    ]", ")"]
    return "\n".join(header + body).rstrip() + "\n"


def run_sqlc() -> dict[str, Any]:
    """Run ``sqlc generate`` (the binary next to this interpreter) and load its JSON.

    Returns:
        The parsed ``build/sqlc/codegen.json``.

    Raises:
        GeneratorError: when sqlc fails (its message is included).
    """
    sqlc = Path(sys.executable).parent / "sqlc"
    done = subprocess.run(
        [str(sqlc), "generate"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise GeneratorError(f"sqlc generate failed:\n{done.stdout}{done.stderr}")
    loaded: dict[str, Any] = json.loads(CODEGEN_JSON.read_text(encoding="utf-8"))
    return loaded


def format_source(source: str) -> str:
    """Format generated source with ruff (the project's configuration).

    Args:
        source: the module source.

    Returns:
        The formatted source.

    Raises:
        GeneratorError: when ruff refuses the source.
    """
    ruff = Path(sys.executable).parent / "ruff"
    done = subprocess.run(
        [str(ruff), "format", "--stdin-filename", str(TARGET.relative_to(ROOT)), "-"],
        cwd=ROOT,
        input=source,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise GeneratorError(f"ruff format failed:\n{done.stderr}")
    return done.stdout


def generate() -> str:
    """Run sqlc and render the formatted module.

    Returns:
        The content turnkeeper/adapters/postgres/queries.py must have.
    """
    return format_source(render_module(run_sqlc()))


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point.

    Args:
        argv: arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit code: 0 on success, 1 when ``--check`` finds the module stale or a step
        fails.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not write; exit 1 when turnkeeper/adapters/postgres/queries.py is not current",
    )
    args = parser.parse_args(argv)
    try:
        source = generate()
    except GeneratorError as exc:
        print(f"gen_queries: {exc}", file=sys.stderr)
        return 1
    current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else None
    if args.check:
        if current != source:
            print(
                f"gen_queries: {TARGET.relative_to(ROOT)} is stale: it does not match the SQL "
                "in sql/ (a query or migration changed, or the module was edited by hand); "
                "run `make queries` (python scripts/gen_queries.py) and commit the result",
                file=sys.stderr,
            )
            return 1
        return 0
    if current != source:
        TARGET.write_text(source, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
