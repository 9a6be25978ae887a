#!/usr/bin/env bash
# Sets up gsched's security for a real lab cluster, run on the admin's machine as root:
#   1. a cluster CA and one certificate per controller and per node (gctl certs);
#   2. copies of them, and of the MUNGE key, to every host (scp over the management
#      network), with the modes the daemons check;
#   3. one key for the API tokens of `gctl token` (token.key), on every controller.
#
#   deploy/security/setup-cluster.sh CONTROLLERS NODES
#   e.g. deploy/security/setup-cluster.sh "1=ctl1 2=ctl2 3=ctl3" "gpu01 gpu02"
#
# Prerequisites on every host: Debian's `munge` package (munged running) and root ssh
# from this machine. MUNGE needs one shared key: this script makes it once
# (/etc/munge/munge.key here) and installs it everywhere.
set -euo pipefail
CONTROLLERS="${1:?controllers as 'ID=HOST ...'}"
NODES="${2:?node names (each also its ssh host name)}"
DIR=/etc/gsched/tls
gctl certs init --dir "$DIR"
for c in $CONTROLLERS; do
    id="${c%%=*}" host="${c#*=}"
    gctl certs issue --dir "$DIR" --controller "$id" --host "$host" \
        --host "$(getent hosts "$host" | awk '{print $1; exit}')"
done
for n in $NODES; do
    gctl certs issue --dir "$DIR" --node "$n"
done
[ -s /etc/munge/munge.key ] || mungekey --create --keyfile /etc/munge/munge.key
[ -s "$DIR/token.key" ] || (umask 077 && head -c 32 /dev/urandom > "$DIR/token.key")
install_on() { # host files...
    local host="$1"; shift
    ssh "root@$host" "mkdir -p $DIR && chmod 755 $DIR"
    scp -q "$DIR/ca.pem" "$@" "root@$host:$DIR/"
    ssh "root@$host" "chmod 600 $DIR/*.key; chmod 644 $DIR/*.pem"
    scp -q /etc/munge/munge.key "root@$host:/etc/munge/munge.key"
    ssh "root@$host" "chown munge:munge /etc/munge/munge.key && chmod 600 /etc/munge/munge.key && systemctl restart munge"
}
for c in $CONTROLLERS; do
    id="${c%%=*}" host="${c#*=}"
    install_on "$host" "$DIR/controller-$id.pem" "$DIR/controller-$id.key" "$DIR/token.key"
done
for n in $NODES; do
    install_on "$n" "$DIR/node-$n.pem" "$DIR/node-$n.key"
done
echo "done: the CA key stays in $DIR/ca.key on this machine only; users' hosts need $DIR/ca.pem and munge"
