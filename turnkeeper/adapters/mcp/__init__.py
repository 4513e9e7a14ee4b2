"""``turnkeeper mcp``: the runtime side of the freshness gate as MCP tools.

An agent runtime (any MCP host) calls ``send_message``, ``read_history``,
``wait_for_work``, ``await_input`` and ``finish_run``; the tool server keeps each
session's observed frontier per target (`turnkeeper.domain.freshness.SessionFreshnessState`),
supplies the client message ids and the freshness context, and answers held sends with
text-only guidance (seed message-freshness-gate, sections 4.3 to 4.5 and 6; docs/mcp.md).

`turnkeeper.adapters.mcp.tools` (schemas), `.texts` (answers), `.session` (session
state), `.handlers` (tool calls), `.work` (``wait_for_work``) and `.command` (the
command) do not import the MCP SDK;
`.server` does, and needs the extra ``turnkeeper[mcp]``.
"""
