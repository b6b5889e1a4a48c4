"""ADBC's Flight SQL driver (the PyPI packages adbc-driver-flightsql and adbc-driver-manager)
against a running `silt up`. Run by jobs/tests/flight_sql.rs, which created f.events and
checks what this prints: one JSON object of results and of the errors the driver raised.

Environment: SILTTEST_FLIGHT_URI (grpc://host:port), SILTTEST_FLIGHT_TOKEN (the bearer token).
"""

import json
import os

import adbc_driver_flightsql
import adbc_driver_flightsql.dbapi as flight_sql

URI = os.environ["SILTTEST_FLIGHT_URI"]
TOKEN = os.environ["SILTTEST_FLIGHT_TOKEN"]
AUTH = adbc_driver_flightsql.DatabaseOptions.AUTHORIZATION_HEADER.value
CALL_HEADER = adbc_driver_flightsql.ConnectionOptions.RPC_CALL_HEADER_PREFIX.value


def error(run):
    try:
        run()
    except flight_sql.Error as e:
        return [type(e).__name__, str(e)]
    return None


def main():
    out = {}
    with flight_sql.connect(URI, db_kwargs={AUTH: f"Bearer {TOKEN}"}) as conn:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) AS n, sum(id) AS s FROM f.events")
            out["count_sum"] = list(cur.fetchone())
            cur.execute("SELECT id, v FROM f.events WHERE id % 100 = 7 ORDER BY id")
            out["rows"] = [[r["id"], r["v"]] for r in cur.fetch_arrow_table().to_pylist()]
            out["bad_sql"] = error(lambda: cur.execute("SELEC 1"))
            out["write"] = error(lambda: cur.execute("DELETE FROM f.events"))
        # A per-call deadline through ADBC's call headers.
        conn.adbc_connection.set_options(**{CALL_HEADER + "x-silt-deadline-ms": "1"})
        with conn.cursor() as cur:
            out["deadline"] = error(
                lambda: cur.execute(
                    "SELECT count(*) FROM f.events a, f.events b, f.events c"
                    " WHERE a.id + b.id = c.id + 1"
                )
            )
    with flight_sql.connect(URI) as conn:
        with conn.cursor() as cur:
            out["no_token"] = error(lambda: cur.execute("SELECT 1"))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
