#!/usr/bin/env bash
# Builds the Dockerfile, unchanged, with buildah and runs `ferry version` in
# the image, on a machine with no container engine and no registry: the
# builder image is this machine's Go toolchain laid out as the golang image
# lays it out (GOROOT /usr/local/go, GOPATH /go, HOME /root), the base is a
# scratch image with a nonroot user (uid 65532) and CA certificates, as
# distroless's static:nonroot, and the build reads this machine's module
# cache (GOPROXY=off) and build cache.
#
#   scripts/image.sh          build localhost/ferry:test, check it, remove it
#
# Without buildah it says so and exits 0, or 1 when FERRY_REQUIRE_SERVICES=1
# (CI); scripts/services.sh installs it when run as root.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v buildah >/dev/null 2>&1; then
  if [ "${FERRY_REQUIRE_SERVICES:-}" = 1 ]; then
    echo "image: buildah is missing: scripts/services.sh installs it (Debian package buildah) when run as root" >&2
    exit 1
  fi
  echo "image: skipped: buildah is not installed (Debian package buildah)"
  exit 0
fi
begin=$(date +%s)
suffix=$$
goimg=localhost/ferry-go:image-$suffix
baseimg=localhost/ferry-static:image-$suffix
img=localhost/ferry:image-$suffix
version=v0.0.0-image
work=$(mktemp -d)
ctrs=()
cleanup() {
  for c in "${ctrs[@]}"; do buildah rm "$c" >/dev/null 2>&1 || true; done
  buildah rmi "$img" "$baseimg" "$goimg" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# The builder: the Go toolchain, CA certificates, /tmp.
mkdir -p "$work/go/tmp" "$work/go/etc/ssl/certs"
chmod 1777 "$work/go/tmp"
cp /etc/ssl/certs/ca-certificates.crt "$work/go/etc/ssl/certs/"
c=$(buildah from scratch)
ctrs+=("$c")
buildah copy "$c" "$(go env GOROOT)" /usr/local/go >/dev/null
buildah copy "$c" "$work/go/" / >/dev/null
buildah config --env PATH=/usr/local/go/bin:/usr/bin:/bin --env GOTOOLCHAIN=local --env HOME=/root --env GOPATH=/go "$c"
buildah commit -q "$c" "$goimg" >/dev/null

# The base: a nonroot user and CA certificates.
mkdir -p "$work/base/etc/ssl/certs"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$work/base/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$work/base/etc/group"
cp /etc/ssl/certs/ca-certificates.crt "$work/base/etc/ssl/certs/"
c=$(buildah from scratch)
ctrs+=("$c")
buildah copy "$c" "$work/base/" / >/dev/null
buildah commit -q "$c" "$baseimg" >/dev/null

echo "image: buildah bud the Dockerfile"
buildah bud --quiet --isolation chroot \
  --build-arg GO_IMAGE="$goimg" --build-arg BASE_IMAGE="$baseimg" \
  --build-arg VERSION="$version" --build-arg GOPROXY=off \
  --volume "$(go env GOMODCACHE):/go/pkg/mod" --volume "$(go env GOCACHE):/root/.cache/go-build" \
  -t "$img" . >"$work/bud.log" 2>&1 || { cat "$work/bud.log" >&2; echo "image: the Dockerfile did not build" >&2; exit 1; }

fail() { echo "image: $*" >&2; exit 1; }
user=$(buildah inspect --type image --format '{{.OCIv1.Config.User}}' "$img")
[ "$user" = 65532:65532 ] || fail "the image runs as '$user', not the nonroot user 65532:65532"
entry=$(buildah inspect --type image --format '{{.OCIv1.Config.Entrypoint}} {{.OCIv1.Config.Cmd}}' "$img")
[ "$entry" = "[/usr/local/bin/ferry] [relay --http-addr :9090]" ] || fail "entrypoint and command are '$entry'"
c=$(buildah from "$img")
ctrs+=("$c")
out=$(buildah run --isolation chroot "$c" -- /usr/local/bin/ferry version)
case "$out" in
"ferry $version "*) ;;
*) fail "ferry version in the image printed '$out', want the build's version $version" ;;
esac
# It ran on a scratch base: the binary is static. It is stripped: no
# symbol table for go tool nm to read.
mnt=$(buildah mount "$c")
bin="$mnt/usr/local/bin/ferry"
if go tool nm "$bin" >/dev/null 2>&1; then fail "the binary in the image has a symbol table: it is not stripped (-ldflags=-s)"; fi
size=$(( $(stat -c %s "$bin") / 1048576 ))
buildah umount "$c" >/dev/null
echo "image: built from the Dockerfile (user $user, binary ${size} MiB, stripped); in it, $out ($(($(date +%s) - begin)) s)"
