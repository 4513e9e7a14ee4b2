"""Development scripts: query generation and the migration lock."""
