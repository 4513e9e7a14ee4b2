"""PostgreSQL adapter: migrations, the embedded server, the unit of work and repositories."""
