"""The store on PostgreSQL: the same repositories as the SQLite file's, for several gateway
workers on one database (README: "Several workers on PostgreSQL")."""
