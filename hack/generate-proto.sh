#!/usr/bin/env bash
# Generates the Go code for every .proto file listed below, beside the .proto
# itself. `make generate` calls it; running it twice gives byte-identical
# output.
#
# The toolchain comes from two tools modules, built into $BIN (default ./bin)
# once and skipped when present:
#   hack/tools/proto          buf, which compiles .proto files without protoc
#   hack/tools/proto/plugins  protoc-gen-go and protoc-gen-go-grpc
# To move to a new version, change the module's go.mod and delete the binary.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$root/bin}
mkdir -p "$bin"

# Each path is relative to the repository root; that relative path is also
# the file's name in the protobuf registry, which keeps it unique.
protos=(
  pkg/sync/syncv1/sync.proto
  pkg/sync/syncv1/bootstrap.proto
)

build() { # build <module dir> <package>...
  local dir=$1; shift
  local missing=()
  for pkg in "$@"; do
    [ -x "$bin/$(basename "$pkg")" ] || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "building ${missing[*]}"
    (cd "$dir" && go build -trimpath -o "$bin/" "${missing[@]}")
  fi
}
build "$root/hack/tools/proto" github.com/bufbuild/buf/cmd/buf
build "$root/hack/tools/proto/plugins" \
  google.golang.org/protobuf/cmd/protoc-gen-go \
  google.golang.org/grpc/cmd/protoc-gen-go-grpc

# buf compiles in a scratch copy holding only the .proto files, so nothing
# else in the work tree (test data, control-plane state) is ever scanned and
# the output depends on the .proto files alone.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for p in "${protos[@]}"; do
  mkdir -p "$work/$(dirname "$p")"
  cp "$root/$p" "$work/$p"
done
(cd "$work" && PATH="$bin:$PATH" "$bin/buf" generate \
  --template "$root/hack/tools/proto/buf.gen.yaml" .)
for p in "${protos[@]}"; do
  base=${p%.proto}
  for f in "$work/$base".pb.go "$work/$base"_grpc.pb.go; do
    [ -f "$f" ] || continue
    dest=$root/${f#"$work"/}
    # Only touch files whose content changed, so timestamps (and go build's
    # cache) stay put on a no-op run.
    cmp -s "$f" "$dest" 2>/dev/null || cp "$f" "$dest"
  done
done
echo "generated Go code for ${#protos[@]} .proto file(s)"
