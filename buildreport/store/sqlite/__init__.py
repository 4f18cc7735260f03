"""The SQLite engine: its schema and migrations, its reader, bulk-load settings, backup and the writer lock."""
