"""The PostgreSQL engine: its connections, schema and migrations, reader and the statistics SQL of its own."""
