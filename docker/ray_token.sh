#!/usr/bin/env bash
# Make the Ray cluster's authentication token for docker/compose.yaml (secret `ray_auth_token`).
#   bash docker/ray_token.sh [FILE]      (default FILE: docker/ray_auth_token)
# 256 random bits as 64 hex characters (what `ray get-auth-token --generate` makes), written atomically
# with mode 0600. An existing non-empty FILE is kept: delete it yourself to rotate the token (then restart
# the cluster and hand the new token to every client).
set -euo pipefail
out="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/ray_auth_token}"
if [ -e "$out" ] && [ ! -f "$out" ]; then
  echo "error: $out exists and is not a file" >&2
  exit 2
fi
if [ -s "$out" ]; then
  echo "$out exists: kept (delete it to make a new token)"
  exit 0
fi
umask 077
tmp=$(mktemp "$out.XXXXXX")
trap 'rm -f "$tmp"' EXIT
od -An -v -N32 -tx1 /dev/urandom | tr -d ' \n' >"$tmp"
[ "$(wc -c <"$tmp")" -eq 64 ] || { echo "error: could not read 32 random bytes" >&2; exit 1; }
mv "$tmp" "$out"
trap - EXIT
echo "wrote $out (mode 0600)"
if [ "$(id -u)" != 1000 ]; then
  echo "note: the containers run as uid 1000 and read this file through a bind mount;" \
       "if they cannot, run: sudo chown 1000 $out" >&2
fi
