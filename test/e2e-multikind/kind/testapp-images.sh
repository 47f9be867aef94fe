#!/usr/bin/env bash
# testapp-images.sh builds the e2e test app (test/e2e-multikind/testapp) as a
# static binary and imports it into Docker under every name the e2e specs
# deploy (TESTAPP_IMAGES in common.sh), with no registry and no base image.
# The image's entrypoint picks the behaviour, since the specs change only an
# app's image, never its arguments:
#
#   registry.example.com/team/web:1.0, :1.1, mirror.example.com/team/web:2.0
#                                          serve on :8080, always Ready
#   registry.example.com/team/web:flotilla-fail
#                                          serve, but /readyz answers 503
#   registry.example.com/team/web:flotilla-crashloop
#                                          exit 1 two seconds after start
#   registry.example.com/team/proxy:3.1   serve on :9090 (a sidecar)
#
# Every image also has /bin/true and /bin/check (testapp's main.go).
set -Eeuo pipefail
# Whatever the caller's umask (up.sh keeps its artifacts private), what goes
# into an image is readable and its binaries executable by the image's
# non-root user: a 0700 / in an image is "exec: permission denied".
umask 022
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/root/tmp"
chmod 1777 "$work/root/tmp"
(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/root/testapp" ./test/e2e-multikind/testapp)
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\n' >"$work/root/etc-passwd"
mkdir -p "$work/root/etc" "$work/root/bin"
mv "$work/root/etc-passwd" "$work/root/etc/passwd"
# The commands the specs' pod templates run (an init container's /bin/true,
# an exec probe's /bin/check): the same binary, by another name.
ln "$work/root/testapp" "$work/root/bin/true"
ln "$work/root/testapp" "$work/root/bin/check"
tar -C "$work/root" -cf "$work/testapp.tar" .

for image in "${TESTAPP_IMAGES[@]}"; do
	case $image in
	*:flotilla-fail) args='"-mode=unready"' ;;
	*:flotilla-crashloop) args='"-mode=crash"' ;;
	*/proxy:*) args='"-listen=:9090"' ;;
	*) args='"-mode=serve"' ;;
	esac
	docker import --change "ENTRYPOINT [\"/testapp\", $args]" --change 'USER 65532' \
		"$work/testapp.tar" "$image" >/dev/null
	log "test app image $image (/testapp $args)"
done
