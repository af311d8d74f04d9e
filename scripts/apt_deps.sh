#!/usr/bin/env bash
# Install the Debian packages `make setup` needs (headless GL for MuJoCo, libsdformat tools),
# only when some are missing and we can (root with apt-get). Otherwise say what to install.
set -u
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "apt-get install ${missing[*]}"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}") >/dev/null \
    || echo "warning: apt-get could not install ${missing[*]}; headless rendering or SDF checks may be unavailable"
else
  echo "warning: missing Debian packages: ${missing[*]} (sudo apt-get install ${missing[*]})"
fi
exit 0
