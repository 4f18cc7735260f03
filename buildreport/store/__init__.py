"""SQLite storage: the schema, the read queries that serve requests and the writer used by import."""
