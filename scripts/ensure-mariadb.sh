#!/usr/bin/env bash
# Makes sure this machine's default database answers, for the README commands:
#   bash scripts/ensure-mariadb.sh [DATABASE_URL]
# DATABASE_URL is the URL the caller will use (serve.sh passes ORBIT_DATABASE_URL,
# test.sh ORBIT_TEST_MYSQL). When it is set and names anything other than the default,
# root with an empty password on 127.0.0.1:3306, this script touches nothing: that server
# is the operator's. Otherwise:
#   1. root already logs in: nothing to do (the usual case on our machines);
#   2. a server listens but no client is installed: install the client only, never a
#      second server;
#   3. nothing listens, MariaDB installed but stopped: start it;
#   4. nothing listens, MariaDB missing: install Debian's mariadb-server, start it, and
#      let root in over TCP with an empty password (a fresh Debian install lets root in
#      over the unix socket only), the test machines' convention.
# A server this script did not install is never weakened: if it refuses root over TCP,
# the script says so and stops. Each step runs only when its check fails, so a second
# run changes nothing.
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

# Only for a server this script has just installed: a fresh Debian install lets root in
# over the unix socket only; open TCP for root with an empty password, the test machines'
# convention. Needs the socket's root (run as root).
allow_root_over_tcp() {
  client -uroot <<'SQL'
ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket;
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
FLUSH PRIVILEGES;
SQL
}

# The URL's user, password, host and port: only the local default is this script's.
url=${1:-}
if [ -n "$url" ]; then
  re='^mysql://([^:@/]*)(:([^@/]*))?@([^:/?]+)(:([0-9]+))?([/?].*)?$'
  if [[ ! $url =~ $re ]]; then
    echo "ensure-mariadb: the database URL is not mysql://user[:password]@host[:port]/…: nothing to set up"
    exit 0
  fi
  user=${BASH_REMATCH[1]} password=${BASH_REMATCH[3]} host=${BASH_REMATCH[4]} port=${BASH_REMATCH[6]:-3306}
  if [ "$user" != root ] || [ -n "$password" ] || [ "$port" != 3306 ] ||
    { [ "$host" != 127.0.0.1 ] && [ "$host" != localhost ]; }; then
    echo "ensure-mariadb: the database is $user@$host:$port, not this machine's default: nothing to set up"
    exit 0
  fi
fi

if root_logs_in; then
  echo "ensure-mariadb: root logs in on 127.0.0.1:3306"
  exit 0
fi

installed_here=0

if listening; then
  if ! have_client; then
    echo "ensure-mariadb: a server listens on 127.0.0.1:3306 but no client is installed: installing mariadb-client only"
    apt_install mariadb-client
  fi
else
  if [ ! -x /usr/sbin/mariadbd ]; then
    echo "ensure-mariadb: installing mariadb-server from Debian's archive"
    apt_install mariadb-server mariadb-client
    installed_here=1
  fi
  echo "ensure-mariadb: starting MariaDB"
  start_mariadb
fi
wait_until_up || { echo "ensure-mariadb: no server answers on 127.0.0.1:3306" >&2; exit 1; }

if ! root_logs_in && [ "$installed_here" = 1 ]; then
  echo "ensure-mariadb: opening the MariaDB just installed to root over TCP with an empty password, over the unix socket"
  allow_root_over_tcp || true
fi
if ! root_logs_in; then
  echo "ensure-mariadb: the server on 127.0.0.1:3306 refuses root with an empty password over TCP." \
    "This script did not install it, so it leaves it as it is: set ORBIT_DATABASE_URL" \
    "(ORBIT_TEST_MYSQL for the tests) to a user it accepts, e.g. mysql://orbit:secret@127.0.0.1:3306/orbit" >&2
  exit 1
fi
echo "ensure-mariadb: root logs in on 127.0.0.1:3306"
