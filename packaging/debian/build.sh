#!/usr/bin/env bash
# Builds bin/sandboxd_<version>_<arch>.deb from a built bin/sandboxd:
#   make deb
# The config file is a conffile (dpkg keeps local edits on upgrade); the units are
# enabled on install and the socket unit owns /run/sandboxd.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
bin="$top/bin/sandboxd"
[ -x "$bin" ] || { echo "build bin/sandboxd first (make build)" >&2; exit 1; }
version=$("$bin" version | awk '{print $2}' | sed 's/^v//; s/[^0-9A-Za-z.+~-]/./g')
case "$version" in [0-9]*) ;; *) version="0.0.0+$version" ;; esac
arch=$(dpkg --print-architecture)
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
install -D -m 0755 "$bin" "$root/usr/bin/sandboxd"
install -D -m 0644 "$top/packaging/systemd/sandboxd.service" "$root/lib/systemd/system/sandboxd.service"
install -D -m 0644 "$top/packaging/systemd/sandboxd.socket" "$root/lib/systemd/system/sandboxd.socket"
install -d -m 0755 "$root/etc/sandboxd"
"$bin" config default > "$root/etc/sandboxd/sandboxd.toml"
chmod 0644 "$root/etc/sandboxd/sandboxd.toml"
install -D -m 0644 "$top/packaging/prometheus/sandboxd-alerts.yml" "$root/usr/share/sandboxd/prometheus/sandboxd-alerts.yml"
install -D -m 0644 "$top/README.md" "$root/usr/share/doc/sandboxd/README.md"
for d in api config operations; do install -m 0644 "$top/docs/$d.md" "$root/usr/share/doc/sandboxd/$d.md"; done
install -d "$root/DEBIAN"
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" "$top/packaging/debian/control.in" > "$root/DEBIAN/control"
install -m 0644 "$top/packaging/debian/conffiles" "$root/DEBIAN/conffiles"
for s in postinst prerm postrm; do install -m 0755 "$top/packaging/debian/$s" "$root/DEBIAN/$s"; done
out="$top/bin/sandboxd_${version}_${arch}.deb"
dpkg-deb --root-owner-group --build "$root" "$out" >/dev/null
echo "$out"
