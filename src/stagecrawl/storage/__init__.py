"""SQL storage: one logical schema on SQLite, MySQL 8 / MariaDB and PostgreSQL."""
