// Tools module for the protoc plugins buf runs. protoc-gen-go is pinned to
// the google.golang.org/protobuf version the main module requires, so the
// generated code never asks for a newer runtime than the one it links.
module flotilla.dev/hack/tools/proto/plugins

go 1.26.0

tool (
	google.golang.org/grpc/cmd/protoc-gen-go-grpc
	google.golang.org/protobuf/cmd/protoc-gen-go
)

require (
	google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.6.2 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
