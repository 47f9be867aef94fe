package wire

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// Raw is a received message left undecoded. Receiving into a *Raw (with
// RecvMsg on a stream that uses Codec) hands the bytes to the caller, who
// decodes them itself. That way a malformed message is the receiver's to
// judge: it ends the stream with INVALID_ARGUMENT and a message saying what
// was wrong, where gRPC's own decoding would report INTERNAL, and the fuzz
// tests exercise exactly the decoder the stream uses.
type Raw []byte

// Codec is gRPC's proto codec, except that it leaves a *Raw undecoded. Its
// name is "proto", so peers see the usual content type.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

func protoCodec() encoding.CodecV2 { return encoding.GetCodecV2(proto.Name) }

// Marshal encodes v as protobuf.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*Raw); ok {
		return mem.BufferSlice{mem.SliceBuffer(*r)}, nil
	}
	return protoCodec().Marshal(v)
}

// Unmarshal decodes data into v, or copies it into v when v is a *Raw.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*Raw); ok {
		// data is freed when this returns, so keep a copy.
		*r = data.Materialize()
		return nil
	}
	if err := protoCodec().Unmarshal(data, v); err != nil {
		return fmt.Errorf("decoding %T: %w", v, err)
	}
	return nil
}

// Name is the content subtype, the same as gRPC's proto codec.
func (Codec) Name() string { return proto.Name }
