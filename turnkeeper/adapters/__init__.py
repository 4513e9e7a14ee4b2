"""Adapters of turnkeeper: PostgreSQL, memory, HTTP, the agent client, the command line."""
