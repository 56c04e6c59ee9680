#!/usr/bin/env bash
# Makes sure root logs in to a MySQL-compatible server on 127.0.0.1:3306 over TCP with an
# empty password, as Orbit's default ORBIT_DATABASE_URL does: used by both README
# commands and by .ci/run.
#   1. root already logs in: nothing to do (the usual case on our machines);
#   2. a server listens but no client is installed: install the client only, never a
#      second server;
#   3. nothing listens, MariaDB installed but stopped: start it;
#   4. nothing listens, MariaDB missing: install Debian's mariadb-server, start it;
#   then, if root still cannot log in over TCP (a fresh Debian install lets root in over
#   the unix socket only), allow it, over that socket.
# Each step runs only when its check fails, so a second run changes nothing.
set -euo pipefail

have_client() {
  command -v mariadb >/dev/null 2>&1 || command -v mysql >/dev/null 2>&1
}

# `mariadb` in current MariaDB packages; `mysql` in MySQL's and older MariaDB's.
client() {
  if command -v mariadb >/dev/null 2>&1; then mariadb "$@"; else mysql "$@"; fi
}

# A real login, as Orbit makes it. Not `ping`, which exits 0 on "Access denied" too; and
# --no-defaults, since a password in an option file (~/.my.cnf) would let the client in
# where Orbit is refused.
root_logs_in() {
  client --no-defaults --protocol=tcp -h127.0.0.1 -P3306 -uroot -e 'SELECT 1' >/dev/null 2>&1
}

# Something accepts connections on the port; needs no client (bash's /dev/tcp).
listening() {
  timeout 2 bash -c ': </dev/tcp/127.0.0.1/3306' 2>/dev/null
}

# The server is up: ping exits 0 once it answers, whether or not it lets root in.
server_up() {
  mariadb-admin --no-defaults --protocol=tcp -h127.0.0.1 -P3306 -uroot ping >/dev/null 2>&1 ||
    mysqladmin --no-defaults --protocol=tcp -h127.0.0.1 -P3306 -uroot ping >/dev/null 2>&1
}

wait_until_up() {
  for _ in $(seq 1 60); do
    server_up && return 0
    sleep 1
  done
  return 1
}

apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "$@" >/dev/null
}

start_mariadb() {
  mkdir -p /run/mysqld
  chown mysql:mysql /run/mysqld 2>/dev/null || true
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql
}

# A fresh Debian install lets root in over the unix socket only: open TCP for root with
# an empty password, the test machines' convention. Needs the socket's root (run as root).
allow_root_over_tcp() {
  client -uroot <<'SQL'
ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket;
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
FLUSH PRIVILEGES;
SQL
}

if root_logs_in; then
  echo "ensure-mariadb: root logs in on 127.0.0.1:3306"
  exit 0
fi

if listening; then
  if ! have_client; then
    echo "ensure-mariadb: a server listens on 127.0.0.1:3306 but no client is installed: installing mariadb-client only"
    apt_install mariadb-client
  fi
else
  if [ ! -x /usr/sbin/mariadbd ]; then
    echo "ensure-mariadb: installing mariadb-server from Debian's archive"
    apt_install mariadb-server mariadb-client
  fi
  echo "ensure-mariadb: starting MariaDB"
  start_mariadb
fi
wait_until_up || { echo "ensure-mariadb: no server answers on 127.0.0.1:3306" >&2; exit 1; }

if ! root_logs_in; then
  echo "ensure-mariadb: root cannot log in over TCP: allowing it with an empty password, over the unix socket"
  allow_root_over_tcp || true
fi
if ! root_logs_in; then
  echo "ensure-mariadb: the server on 127.0.0.1:3306 refuses root with an empty password over TCP," \
    "and opening it over the unix socket failed (not MariaDB, or not run as root?): allow it by hand" >&2
  exit 1
fi
echo "ensure-mariadb: root logs in on 127.0.0.1:3306"
