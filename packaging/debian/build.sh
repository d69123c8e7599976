#!/usr/bin/env bash
# Builds sandboxd_<version>_<arch>.deb the way a Debian maintainer's debian/rules would,
# with the debhelper tools (dh_installsystemd writes the maintainer scripts), but
# without a source package:
#   make deb                          # -> bin/sandboxd_<version>_<arch>.deb
#   DEB_VERSION=0.9.1 build.sh OUTDIR # an explicit version (the tests use it)
#   build.sh --version                # print the version it would build
# It prints the path of the .deb.
#
# The version only goes up: 0.<commits on HEAD>.<commit date>+g<hash>, or the tag's
# version when HEAD is tagged vX.Y.Z. The binary is PIE with full RELRO, built with cgo
# so that user:NAME and group:NAME in the config resolve through NSS (LDAP, sssd) as
# the fleet's other daemons see them; dh_strip strips it and dh_shlibdeps computes its
# libc dependency.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
here="$top/packaging/debian"
go=${GO:-go}

commit=$(git -C "$top" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ -z "${DEB_VERSION:-}" ]; then
	if tag=$(git -C "$top" describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null); then
		DEB_VERSION=${tag#v}
	else
		n=$(git -C "$top" rev-list --count HEAD)
		day=$(TZ=UTC git -C "$top" log -1 --date=format-local:%Y%m%d --format=%cd)
		DEB_VERSION="0.$n.$day+g$(git -C "$top" rev-parse --short=7 HEAD)"
	fi
fi
if [ "${1:-}" = --version ]; then echo "$DEB_VERSION"; exit 0; fi
case "$DEB_VERSION" in [0-9]*) ;; *) echo "build.sh: version $DEB_VERSION does not start with a digit" >&2; exit 1 ;; esac
out=$(mkdir -p "${1:-$top/bin}" && cd "${1:-$top/bin}" && pwd)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$top" log -1 --format=%ct 2>/dev/null || date +%s)}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src="$work/sandboxd"
pkg="$src/debian/sandboxd"
mkdir -p "$src/debian"

(cd "$top" && CGO_ENABLED=1 "$go" build -trimpath -buildmode=pie \
	-ldflags "-X main.version=$DEB_VERSION -X main.commit=$commit -linkmode=external -extldflags '-Wl,-z,relro,-z,now'" \
	-o "$src/sandboxd" ./cmd/sandboxd)
(cd "$top" && "$go" run ./packaging/debian/manpage "$src/sandboxd" "$DEB_VERSION") > "$src/debian/sandboxd.1"

cp "$here/control" "$here/copyright" "$here/prerm" "$here/postrm" "$src/debian/"
cp "$here/sandboxd.lintian-overrides" "$src/debian/"
cat > "$src/debian/changelog" <<CHANGES
sandboxd ($DEB_VERSION) unstable; urgency=medium

  * Built from commit $commit of https://github.com/sandboxd/sandboxd.
    The project's history is its git log.

 -- sandboxd maintainers <maintainers@sandboxd.dev>  $(date -u -R -d "@$SOURCE_DATE_EPOCH")
CHANGES

# The staging root is 0755: dpkg-deb -x (and dpkg) give the target the root's mode.
install -d -m 0755 "$pkg"
install -D -m 0755 "$src/sandboxd" "$pkg/usr/bin/sandboxd"
# dh_installsystemd of debhelper 13 finds units only in lib/systemd/system; they move
# to usr/lib/systemd/system (where systemd 252 and trixie's debhelper 14 put them) once
# it has written the maintainer scripts, which name units, not paths.
install -D -m 0644 "$top/packaging/systemd/sandboxd.service" "$pkg/lib/systemd/system/sandboxd.service"
install -D -m 0644 "$top/packaging/systemd/sandboxd.socket" "$pkg/lib/systemd/system/sandboxd.socket"
install -D -m 0644 "$here/default" "$pkg/etc/default/sandboxd"
# The packaged config is the embedded default with two keys changed: observe mode for
# the first start (docs/operations.md, "The package's default mode") and the textfile
# for Debian's prometheus-node-exporter.
install -d -m 0755 "$pkg/etc/sandboxd"
"$src/sandboxd" config default | sed \
	-e 's|^mode = "enforce"  |mode = "observe"  |' \
	-e 's|^textfile = ""      |textfile = "/var/lib/prometheus/node-exporter/sandboxd.prom"|' \
	> "$pkg/etc/sandboxd/sandboxd.toml"
"$src/sandboxd" config check "$pkg/etc/sandboxd/sandboxd.toml" >/dev/null
# The alert rules' runbook links name the docs of the version installed (issue 25), not
# main: the tag when HEAD is tagged vX.Y.Z, else the commit (the package ships the same
# docs/operations.md in /usr/share/doc/sandboxd).
ref=$(git -C "$top" describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null || git -C "$top" rev-parse HEAD)
install -d -m 0755 "$pkg/usr/share/sandboxd/prometheus"
sed "s|https://github.com/sandboxd/sandboxd/blob/main/docs/|https://github.com/sandboxd/sandboxd/blob/$ref/docs/|" \
	"$top/packaging/prometheus/sandboxd-alerts.yml" > "$pkg/usr/share/sandboxd/prometheus/sandboxd-alerts.yml"
chmod 0644 "$pkg/usr/share/sandboxd/prometheus/sandboxd-alerts.yml"
install -D -m 0644 "$top/packaging/grafana/sandboxd.json" "$pkg/usr/share/sandboxd/grafana/sandboxd.json"
install -d -m 0755 "$pkg/usr/share/doc/sandboxd"
install -m 0644 "$top/README.md" "$pkg/usr/share/doc/sandboxd/README.md"
for d in api config operations; do install -m 0644 "$top/docs/$d.md" "$pkg/usr/share/doc/sandboxd/$d.md"; done

cd "$src"
export DH_QUIET=1
dh_installdocs
dh_installchangelogs
dh_installman debian/sandboxd.1
dh_installsystemd
# The boot check (issue 22) is enabled (sysinit.target) but never started, stopped or
# restarted by the maintainer scripts: run at an install or upgrade of a full disk it
# would release the reserve under a running daemon. It runs at boot only.
install -D -m 0644 "$top/packaging/systemd/sandboxd-boot.service" "$pkg/lib/systemd/system/sandboxd-boot.service"
dh_installsystemd --no-start --no-stop-on-upgrade --no-restart-after-upgrade sandboxd-boot.service
mkdir -p "$pkg/usr/lib/systemd"
mv "$pkg/lib/systemd/system" "$pkg/usr/lib/systemd/system"
rmdir "$pkg/lib/systemd" "$pkg/lib"
dh_lintian
dh_strip --no-automatic-dbgsym
dh_compress
dh_fixperms
dh_installdeb
dh_shlibdeps
dh_gencontrol
dh_md5sums
dh_builddeb --destdir="$out" >/dev/null
arch=$(dpkg --print-architecture)
echo "$out/sandboxd_${DEB_VERSION}_${arch}.deb"
