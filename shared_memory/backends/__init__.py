"""Store backends: in-memory, SQLite (default) and PostgreSQL."""
