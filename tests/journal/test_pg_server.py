"""The test PostgreSQL server itself (R-S5): a real server, reachable only on loopback."""

from __future__ import annotations


def test_server_is_real_and_databases_are_separate(postgres_server, pg_url):
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        listen = conn.execute("SHOW listen_addresses").fetchone()[0]
        conn.execute("CREATE TABLE t (x int)")
    assert version.split(".")[0].isdigit()
    assert listen == "127.0.0.1"
    other = postgres_server.new_database()
    with psycopg.connect(other) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE tablename = 't'").fetchone()[0] == 0
    postgres_server.drop_database(other)
