#!/usr/bin/env bash
# Runs commands in a clean clone of this repository inside a Debian 13 ("trixie": PyTorch 2.6, NumPy 2.2, gcc 14,
# clang 19) root, from any Debian host, as root. The root is made once with debootstrap from the Debian mirror
# and kept (default build/debian13/root: later runs reuse it and the packages installed in it); the clone is
# made anew at each run, so what runs is what a new user of Debian 13 gets from the committed tree.
#
# Usage: scripts/debian13.sh [--root DIR] [--worktree] [COMMAND ...]
#   --root DIR   the root to make or reuse (default: $DEBIAN13_ROOT, else build/debian13/root)
#   --worktree   copy the files as they are in the working tree (uncommitted edits and new files not ignored
#                included) instead of cloning HEAD: for trying a change before committing it
#   --keep       with --worktree: copy over the previous run's copy, keeping its builds and venv (incremental
#                rebuilds while iterating; files deleted since the last run stay in the copy)
#   COMMAND      run in the clone with bash (default: make test demo); e.g. scripts/debian13.sh make bench
# Environment passed on: SPATIALGRAD_*, JOBS; DEBIAN13_MIRROR picks the mirror (default http://deb.debian.org/debian).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
root=${DEBIAN13_ROOT:-$repo/build/debian13/root}
mirror=${DEBIAN13_MIRROR:-http://deb.debian.org/debian}
copy_worktree=0
keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --root) root=$(realpath -m "$2"); shift 2 ;;
    --worktree) copy_worktree=1; shift ;;
    --keep) keep=1; shift ;;
    --) shift; break ;;
    -*) echo "debian13: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
command_line=${*:-make test demo}

if [ "$(id -u)" -ne 0 ]; then
  echo "debian13: debootstrap and chroot need root; run as root (or with sudo)" >&2
  exit 1
fi

# A finished root carries this file: a root whose debootstrap was interrupted is made again.
marker=$root/.spatialgrad-debian13
if [ ! -f "$marker" ]; then
  if ! command -v debootstrap > /dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap
  fi
  rm -rf "$root"
  mkdir -p "$(dirname "$root")"
  echo "debian13: making the root $root (debootstrap trixie from $mirror)"
  debootstrap --variant=minbase trixie "$root" "$mirror" > "$root.debootstrap.log" 2>&1 ||
    { tail -20 "$root.debootstrap.log" >&2; exit 1; }
  # make and git: what the clone's own bootstrap (scripts/bootstrap.sh, run by make) needs before it runs.
  chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive bash -c \
    'apt-get update -qq && apt-get install -y -qq --no-install-recommends make git ca-certificates > /dev/null'
  touch "$marker"
fi

# proc, sys and dev (with /dev/shm: PyTorch's DataLoader workers share tensors there) for the time of the run;
# rslave so that unmounting them here never reaches the host's mounts.
mounted=()
unmount_all() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -R "${mounted[i]}" 2> /dev/null || umount -lR "${mounted[i]}" || true; done
}
trap unmount_all EXIT
mount_in_root() {
  local what=$1 where=$root$1
  if ! mountpoint -q "$where"; then
    if [ "$what" = /proc ]; then mount -t proc proc "$where"; else mount --rbind "$what" "$where" && mount --make-rslave "$where"; fi
    mounted+=("$where")
  fi
}
mount_in_root /proc
mount_in_root /sys
mount_in_root /dev
cp /etc/resolv.conf "$root/etc/resolv.conf"

clone=$root/src/spatialgrad
if [ "$keep" = 0 ] || [ "$copy_worktree" = 0 ]; then rm -rf "$clone"; fi
mkdir -p "$clone"
if [ "$copy_worktree" = 1 ]; then
  # Tracked files and new ones not ignored; tracked files deleted in the working tree stay deleted.
  (cd "$repo" && git ls-files -z --cached --others --exclude-standard |
    tar --null -T - --ignore-failed-read -cf - 2> /dev/null) | tar -xf - -C "$clone"
else
  git clone --quiet --no-hardlinks "$repo" "$clone"
fi
echo "debian13: running '$command_line' in a $( [ "$copy_worktree" = 1 ] && echo copy || echo clone ) of $(git -C "$repo" rev-parse --short HEAD) in $root"

passed=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 TERM=dumb)
while IFS='=' read -r name value; do
  case "$name" in SPATIALGRAD_* | JOBS) passed+=("$name=$value") ;; esac
done < <(env)
chroot "$root" /usr/bin/env -i "${passed[@]}" bash -c "cd /src/spatialgrad && $command_line"
