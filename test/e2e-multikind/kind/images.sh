#!/usr/bin/env bash
# images.sh builds every image up.sh loads into the clusters: Flotilla's hub
# and agent ($HUB_IMAGE, $AGENT_IMAGE: hack/build-images.sh) and the test
# app under every name the specs deploy (testapp-images.sh). up.sh runs it
# unless SKIP_BUILD=1; CI runs it ahead, beside make test. Flotilla's images
# are built in a context of their own (_output/image-kind), so that this
# can run while `make images` or test/images builds into _output/image.
set -Eeuo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

log "building $HUB_IMAGE and $AGENT_IMAGE"
IMAGE_REPO=$IMAGE_REPO IMAGE_TAG=$IMAGE_TAG IMAGE_CONTEXT=$ROOT/_output/image-kind "$ROOT/hack/build-images.sh"
log "building the test app images (${TESTAPP_IMAGES[*]})"
"$KIND_DIR/testapp-images.sh"
