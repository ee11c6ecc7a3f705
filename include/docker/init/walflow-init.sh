#!/usr/bin/env bash
# docker-compose.yml's walflow-init: what an administrator does once before walflow's first run, in order
# (docs/deploy.md, "Install"). Safe to run again. Runs as root: it hands the volumes to Airflow's user.
set -euo pipefail
: "${WALFLOW_PASSWORD:?set it in .env}" "${WALFLOW_READER_PASSWORD:?set it in .env}" "${AIRFLOW_ADMIN_PASSWORD:?set it in .env}"
: "${WALFLOW_INIT_SOURCE:?the URL of the source database as its superuser}"
here="$(cd "$(dirname "$0")" && pwd)"
airflow_user="${AIRFLOW_UID:-50000}"

echo "walflow-init: Airflow's metadata database"
airflow db migrate

echo "walflow-init: the admin's password (the simple auth manager's file)"
mkdir -p "$AIRFLOW_HOME/config"
python -c 'import json, os, sys; json.dump({"admin": os.environ["AIRFLOW_ADMIN_PASSWORD"]}, open(sys.argv[1], "w"))' \
    "$AIRFLOW_HOME/config/passwords.json"

echo "walflow-init: the demo schema"
psql "$WALFLOW_INIT_SOURCE" -v ON_ERROR_STOP=1 -q -f "$here/inventory.sql"

echo "walflow-init: the connector's roles, grants and publication (walflow sql roles)"
walflow sql roles | psql "$WALFLOW_INIT_SOURCE" -v ON_ERROR_STOP=1 -q \
    -v role=walflow -v password="$WALFLOW_PASSWORD" \
    -v reader=walflow_reader -v reader_password="$WALFLOW_READER_PASSWORD" \
    -v schema=public -v tables=public.customers,public.products,public.orders \
    -v publication=walflow_inventory -v signal_table=public.walflow_signal

echo "walflow-init: the connectors folder and walflow's DAG files"
mkdir -p "$WALFLOW_CONNECTORS_DIR" "$AIRFLOW__CORE__DAGS_FOLDER" "$WALFLOW_WAREHOUSE" "$AIRFLOW_HOME/logs"
if ! compgen -G "$WALFLOW_CONNECTORS_DIR/*.y*ml" >/dev/null; then
    walflow example-connector > "$WALFLOW_CONNECTORS_DIR/inventory.yaml"
fi
walflow dag-files "$AIRFLOW__CORE__DAGS_FOLDER"

if [ "$(id -u)" = 0 ]; then
    # the volumes are created root's: Airflow's user writes logs, the lake and (through the UI) nothing else
    # -H: a folder that is a link (make test-deploy links the volumes into place) is followed
    chown -R -H "$airflow_user:0" "$AIRFLOW_HOME/config" "$AIRFLOW_HOME/logs" "$WALFLOW_WAREHOUSE" "$WALFLOW_CONNECTORS_DIR" "$AIRFLOW__CORE__DAGS_FOLDER"
fi
echo "walflow-init: done"
