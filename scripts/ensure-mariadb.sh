#!/usr/bin/env bash
# Makes sure a MySQL-compatible server answers on 127.0.0.1:3306 for root with an empty
# password: used by both README commands and by .ci/run.
#   1. already answering: nothing to do (the usual case on our machines);
#   2. MariaDB installed but stopped: start it;
#   3. missing: install Debian's mariadb-server, start it, allow root over TCP.
set -euo pipefail

answers() {
  mariadb-admin --protocol=tcp -h127.0.0.1 -P3306 -uroot ping >/dev/null 2>&1 ||
    mysqladmin --protocol=tcp -h127.0.0.1 -P3306 -uroot ping >/dev/null 2>&1
}

wait_until_up() {
  for _ in $(seq 1 60); do
    answers && return 0
    sleep 1
  done
  return 1
}

start_mariadb() {
  mkdir -p /run/mysqld
  chown mysql:mysql /run/mysqld 2>/dev/null || true
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql
}

if answers; then
  echo "ensure-mariadb: a server answers on 127.0.0.1:3306"
  exit 0
fi

if [ ! -x /usr/sbin/mariadbd ]; then
  echo "ensure-mariadb: installing mariadb-server from Debian's archive"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq mariadb-server mariadb-client >/dev/null
fi

echo "ensure-mariadb: starting MariaDB"
start_mariadb
if ! wait_until_up; then
  # A fresh Debian install lets root in over the socket only: open TCP for root with an
  # empty password, the test machines' convention.
  mariadb -uroot <<'SQL' || true
ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket;
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
FLUSH PRIVILEGES;
SQL
  wait_until_up || { echo "ensure-mariadb: MariaDB does not answer on 127.0.0.1:3306" >&2; exit 1; }
fi
echo "ensure-mariadb: MariaDB answers on 127.0.0.1:3306"
