#!/usr/bin/env bash
# gsched on one shared GPU server, in one command: the binaries and Slurm's names in
# /usr/local/bin, the one-server systemd units, /etc/gsched (gctld.toml, the token key),
# /etc/profile.d/gsched.sh, the NVIDIA driver option that keeps device nodes as gsched
# sets them, the admin tools' service user, and (with --account) a first account.
#
#   install.sh [--root DIR] [--bin-dir DIR] [--admin-user NAME] [--account NAME] [--no-start]
#   install.sh --uninstall [--root DIR] [--purge]
#
# Idempotent: a second run changes nothing (it says "0 changed"). Reversible: everything it
# made is listed in ROOT/var/lib/gsched/install-manifest, and --uninstall removes exactly
# that (a config file edited since is kept, and said so); the controller's data stays
# unless --purge. --root DIR installs into a scratch directory instead of / (for tests and
# images): no user is created and nothing is started there.
set -euo pipefail

ROOT=/
BIN_DIR=
ADMIN_USER=gsched-admin
ACCOUNT=
START=1
UNINSTALL=0
PURGE=0
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
UNITS="$HERE/../systemd/one-server"
TOOLS=(gctld gagentd gsub grun galloc gqueue ginfo gcancel gacct greport gctl)
# Slurm's names and the gsched tool each one is (as `gctl slurm-names` links them).
SLURM_NAMES=(sbatch:gsub srun:grun salloc:galloc squeue:gqueue sinfo:ginfo scancel:gcancel
    sacct:gacct seff:gacct sreport:greport sshare:gctl scontrol:gctl sacctmgr:gctl)

die() { echo "install.sh: $*" >&2; exit 1; }
say() { echo "install.sh: $*"; }

while [ $# -gt 0 ]; do
    case "$1" in
        --root) ROOT="${2:?--root needs a directory}"; shift 2 ;;
        --bin-dir) BIN_DIR="${2:?--bin-dir needs a directory}"; shift 2 ;;
        --admin-user) ADMIN_USER="${2:?--admin-user needs a name}"; shift 2 ;;
        --account) ACCOUNT="${2:?--account needs a name}"; shift 2 ;;
        --no-start) START=0; shift ;;
        --uninstall) UNINSTALL=1; shift ;;
        --purge) PURGE=1; shift ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done
[ -d "$ROOT" ] || die "--root $ROOT is not a directory"
ROOT="$(cd "$ROOT" && pwd)"
REAL=0
[ "$ROOT" = / ] && REAL=1
P() { if [ "$ROOT" = / ]; then echo "$1"; else echo "$ROOT$1"; fi; }
if [ "$REAL" = 1 ] && [ "$(id -u)" != 0 ]; then
    die "run it as root (or with --root DIR for a scratch directory)"
fi

MANIFEST="$(P /var/lib/gsched/install-manifest)"
CHANGED=0

# The manifest: one "kind path [sha256]" line per thing this script made.
record() {
    mkdir -p "$(dirname "$MANIFEST")"
    touch "$MANIFEST"
    grep -qxF "$*" "$MANIFEST" || echo "$*" >>"$MANIFEST"
}

# mkdir with a mode; recorded when this script made it.
make_dir() {
    local dir="$1" mode="$2" at
    at="$(P "$dir")"
    if [ ! -d "$at" ]; then
        parents "$dir"
        mkdir "$at"
        chmod "$mode" "$at"
        record "dir $dir"
        CHANGED=$((CHANGED + 1))
    elif [ "$(stat -c %a "$at")" != "${mode#0}" ]; then
        chmod "$mode" "$at"
        CHANGED=$((CHANGED + 1))
    fi
}

# Makes the missing directories above $1 (a path under ROOT), recording each.
parents() {
    local dir
    dir="$(dirname "$1")"
    [ "$dir" = / ] || [ -d "$(P "$dir")" ] && return
    parents "$dir"
    mkdir "$(P "$dir")"
    record "dir $dir"
}

# Installs file $1 at $2 with mode $3 unless it is there already as it should be.
put() {
    local src="$1" dst="$2" mode="$3" at
    at="$(P "$dst")"
    parents "$dst"
    if [ -f "$at" ] && cmp -s "$src" "$at" && [ "$(stat -c %a "$at")" = "${mode#0}" ]; then
        return
    fi
    if [ -e "$at" ] && ! grep -q "^file $dst " "$MANIFEST" 2>/dev/null; then
        die "$dst exists and is not gsched's install: move it away first"
    fi
    install -m "$mode" "$src" "$at"
    sed -i "\\#^file $dst #d" "$MANIFEST" 2>/dev/null || true
    record "file $dst $(sha256sum "$at" | cut -d' ' -f1)"
    say "installed $dst"
    CHANGED=$((CHANGED + 1))
}

# Writes text $2 to $1 (mode $3) unless there; kept as the admin left it once it exists.
put_once() {
    local dst="$1" text="$2" mode="$3" at tmp
    at="$(P "$dst")"
    [ -e "$at" ] && return
    tmp="$(mktemp)"
    printf '%s' "$text" >"$tmp"
    put "$tmp" "$dst" "$mode"
    rm -f "$tmp"
}

uninstall() {
    [ -f "$MANIFEST" ] || die "nothing to uninstall: no $MANIFEST"
    if [ "$REAL" = 1 ] && command -v systemctl >/dev/null; then
        systemctl disable --now gagentd.service gctld.service gctld.socket 2>/dev/null || true
    fi
    local kind path sum at
    # Files and links first, then directories deepest first, then users.
    while read -r kind path sum; do
        at="$(P "$path")"
        case "$kind" in
            file)
                if [ -f "$at" ] && [ "$(sha256sum "$at" | cut -d' ' -f1)" != "$sum" ]; then
                    say "kept $path: it was changed since it was installed"
                else
                    rm -f "$at" && say "removed $path"
                fi ;;
            link) [ -L "$at" ] && rm -f "$at" && say "removed $path" ;;
        esac
    done <"$MANIFEST"
    if [ "$PURGE" = 1 ]; then
        rm -rf "$(P /var/lib/gsched/controller)" "$(P /var/lib/gsched/agent)"
        say "removed the controller's and the agent's data (--purge)"
    fi
    while read -r kind path sum; do
        if [ "$kind" = user ] && [ "$REAL" = 1 ]; then
            userdel -r "$path" 2>/dev/null && say "removed user $path" || true
        fi
    done <"$MANIFEST"
    local dirs
    dirs="$(grep '^dir ' "$MANIFEST" | cut -d' ' -f2 | sort -r || true)"
    rm -f "$MANIFEST"
    # Directories it made, deepest first, where nothing else was put in them since.
    for path in $dirs; do
        rmdir "$(P "$path")" 2>/dev/null && say "removed $path/" || true
    done
}

if [ "$UNINSTALL" = 1 ]; then
    uninstall
    if [ "$REAL" = 1 ]; then
        say "the driver option is gone; NVreg_ModifyDeviceFiles returns to 1 at the next driver load"
    fi
    say "uninstalled"
    exit 0
fi

# The binaries: --bin-dir, else a release build next to this script, else PATH.
if [ -z "$BIN_DIR" ]; then
    for d in "$HERE/../../target/release" "$(dirname "$(command -v gctld 2>/dev/null || echo /nonexistent/x)")"; do
        [ -x "$d/gctld" ] && BIN_DIR="$d" && break
    done
fi
[ -n "$BIN_DIR" ] && [ -x "$BIN_DIR/gctld" ] ||
    die "no gsched binaries found: build them (cargo build --release) or pass --bin-dir DIR"

# The manifest's own directory first, so that it is recorded with the rest.
if [ ! -d "$(P /var/lib/gsched)" ]; then
    made=()
    for d in /var /var/lib /var/lib/gsched; do
        [ -d "$(P "$d")" ] || made+=("$d")
    done
    mkdir -p "$(P /var/lib/gsched)"
    for d in "${made[@]}"; do record "dir $d"; done
    CHANGED=$((CHANGED + 1))
fi
make_dir /var/lib/gsched 0700
make_dir /etc/gsched 0755
for t in "${TOOLS[@]}"; do
    [ -x "$BIN_DIR/$t" ] || die "$BIN_DIR/$t is missing"
    put "$BIN_DIR/$t" "/usr/local/bin/$t" 0755
done

# Slurm's names next to the tools, where login shells find them before /usr/bin; a real
# Slurm client already there is left alone.
for pair in "${SLURM_NAMES[@]}"; do
    name="${pair%%:*}" tool="${pair#*:}"
    at="$(P "/usr/local/bin/$name")"
    if [ -L "$at" ] && [ "$(readlink "$at")" = "$tool" ]; then
        continue
    fi
    if [ -e "$at" ] || [ -L "$at" ]; then
        if ! grep -qxF "link /usr/local/bin/$name" "$MANIFEST" 2>/dev/null; then
            say "left /usr/local/bin/$name alone: it is not gsched's (Slurm's own client?)"
            continue
        fi
        rm -f "$at"
    fi
    ln -s "$tool" "$at"
    record "link /usr/local/bin/$name"
    CHANGED=$((CHANGED + 1))
done

put "$UNITS/gctld.service" /etc/systemd/system/gctld.service 0644
put "$UNITS/gctld.socket" /etc/systemd/system/gctld.socket 0644
put "$UNITS/gagentd.service" /etc/systemd/system/gagentd.service 0644
put "$UNITS/gsched.sh" /etc/profile.d/gsched.sh 0644

put_once /etc/gsched/gctld.toml "# gsched on one server (written by deploy/one-server/install.sh; yours to edit).
# Processes using GPUs outside jobs: \"report\", \"warn\" (a message to the user's
# terminals) or \"kill\"; see README, Running a shared lab.
[outside_jobs]
action = \"report\"
grace_s = 60
exempt_users = []
" 0644

if [ ! -e "$(P /etc/gsched/token.key)" ]; then
    key="$(mktemp)"
    head -c 32 /dev/urandom >"$key"
    put "$key" /etc/gsched/token.key 0600
    rm -f "$key"
fi

# The driver re-creates /dev/nvidia* world-writable whenever CUDA starts unless told not to.
modprobe_text="# gsched: the NVIDIA driver keeps the device nodes' owner and mode as gsched sets them.
options nvidia NVreg_ModifyDeviceFiles=0
"
if [ ! -e "$(P /etc/modprobe.d/gsched-nvidia.conf)" ]; then
    put_once /etc/modprobe.d/gsched-nvidia.conf "$modprobe_text" 0644
    say "NVreg_ModifyDeviceFiles=0 takes effect at the next driver load: reload the nvidia module with no GPU in use (rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia; modprobe nvidia) or reboot"
fi

# The admin tools' service user (gctl burn-in and doctor --probe run by root use it).
if [ "$REAL" = 1 ]; then
    if ! id "$ADMIN_USER" >/dev/null 2>&1; then
        useradd --create-home --shell /bin/sh --comment "gsched admin tools' jobs" "$ADMIN_USER"
        record "user $ADMIN_USER"
        say "created user $ADMIN_USER (gctl burn-in and doctor --probe run by root use it)"
        CHANGED=$((CHANGED + 1))
    fi
else
    say "scratch root: no user $ADMIN_USER created, nothing started"
fi

if [ "$REAL" = 1 ] && [ "$START" = 1 ] && command -v systemctl >/dev/null; then
    systemctl daemon-reload
    systemctl enable --now gctld.socket gctld.service gagentd.service
    if [ -n "$ACCOUNT" ]; then
        for _ in $(seq 1 30); do
            /usr/local/bin/gctl status >/dev/null 2>&1 && break
            sleep 1
        done
        if /usr/local/bin/gctl account show 2>/dev/null | grep -qw "$ACCOUNT"; then
            :
        else
            /usr/local/bin/gctl account add "$ACCOUNT" && say "added account $ACCOUNT"
        fi
    fi
fi

say "$CHANGED changed"
