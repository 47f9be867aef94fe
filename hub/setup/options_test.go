package setup

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// TestMemberDeleteFlagsValidated checks that New refuses a negative
// --member-delete-burst and a NaN --member-delete-rate with an error
// naming the flag, before it builds anything, and accepts the zero values
// (the defaults) and a negative rate (no limit).
func TestMemberDeleteFlagsValidated(t *testing.T) {
	for _, tt := range []struct {
		rate  float64
		burst int
		want  string // "" means valid
	}{
		{},
		{rate: 2, burst: 50},
		{rate: -1},
		{rate: 0.5, burst: 1},
		{rate: 2, burst: -1, want: "--member-delete-burst"},
		{rate: math.NaN(), burst: 50, want: "--member-delete-rate"},
	} {
		opts := Options{MemberDeleteRate: tt.rate, MemberDeleteBurst: tt.burst}
		err := validateOptions(opts)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("rate %v burst %d: %v, want no error", tt.rate, tt.burst, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("rate %v burst %d: err = %v, want one naming %s", tt.rate, tt.burst, err, tt.want)
		}
		if tt.want == "" {
			continue
		}
		// New refuses it before it touches the apiserver.
		opts.Config = &rest.Config{Host: "https://127.0.0.1:1"}
		if _, err := New(context.Background(), opts); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New with rate %v burst %d: err = %v, want one naming %s", tt.rate, tt.burst, err, tt.want)
		}
	}
}

// TestSyncConnectionFlagsValidated checks that New refuses bad --sync-*
// connection values and an unreadable --agent-ca-file with an error
// naming the flag, and accepts zero values (the defaults).
func TestSyncConnectionFlagsValidated(t *testing.T) {
	for _, tt := range []struct {
		conn SyncConnectionOptions
		want string // "" means valid
	}{
		{},
		{conn: SyncConnectionOptions{MaxStreamsPerConnection: 4, MaxConnectionIdle: time.Minute, MaxConnectionAge: time.Hour, MaxConnectionAgeGrace: time.Minute, HandshakeTimeout: time.Second, MaxPendingConnections: 10}},
		{conn: SyncConnectionOptions{MaxStreamsPerConnection: -1}, want: "--sync-max-streams-per-connection"},
		{conn: SyncConnectionOptions{MaxPendingConnections: -1}, want: "--sync-max-pending-connections"},
		{conn: SyncConnectionOptions{MaxConnectionIdle: -time.Second}, want: "--sync-max-connection-idle"},
		{conn: SyncConnectionOptions{MaxConnectionAge: -time.Second}, want: "--sync-max-connection-age"},
		{conn: SyncConnectionOptions{MaxConnectionAgeGrace: time.Millisecond}, want: "--sync-max-connection-age-grace"},
		{conn: SyncConnectionOptions{HandshakeTimeout: -time.Second}, want: "--sync-handshake-timeout"},
	} {
		err := validateOptions(Options{SyncConnections: tt.conn})
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: %v, want no error", tt.conn, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%+v: err = %v, want one naming %s", tt.conn, err, tt.want)
		}
	}
}

// TestAgentCAFileValidated checks that a missing --agent-ca-file, or one
// without a PEM certificate, is refused naming the flag.
func TestAgentCAFileValidated(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{filepath.Join(dir, "missing.pem"), empty} {
		err := validateOptions(Options{AgentCAFile: file})
		if err == nil || !strings.Contains(err.Error(), "--agent-ca-file") {
			t.Errorf("%s: err = %v, want one naming --agent-ca-file", file, err)
		}
	}
}

// TestMemberInputFlagsValidated checks the flags that bound what one
// member can make the hub do: New refuses bad values with an error naming
// the flag, and accepts the zero values (the defaults) and negative rates
// (no limit).
func TestMemberInputFlagsValidated(t *testing.T) {
	for _, tt := range []struct {
		name   string
		mutate func(*Options)
		want   string // "" means valid
	}{
		{"defaults", func(*Options) {}, ""},
		{"set", func(o *Options) {
			o.SyncMaxRecvMessageBytes, o.MemberStatusRate, o.MemberStatusBurst = 4<<20, 10, 100
			o.MemberStatusBufferBytes, o.MemberConnectRate, o.MemberConnectBurst = 1<<20, 0.1, 3
		}, ""},
		{"no limits", func(o *Options) { o.MemberStatusRate, o.MemberConnectRate = -1, -1 }, ""},
		{"negative receive size", func(o *Options) { o.SyncMaxRecvMessageBytes = -1 }, "--sync-max-recv-message-bytes"},
		{"NaN status rate", func(o *Options) { o.MemberStatusRate = math.NaN() }, "--member-status-rate"},
		{"negative status burst", func(o *Options) { o.MemberStatusBurst = -5 }, "--member-status-burst"},
		{"negative status buffer", func(o *Options) { o.MemberStatusBufferBytes = -1 }, "--member-status-buffer-bytes"},
		{"work status linger past its bound", func(o *Options) { o.WorkStatusLinger = time.Minute }, "--work-status-linger"},
		{"NaN connect rate", func(o *Options) { o.MemberConnectRate = math.NaN() }, "--member-connect-rate"},
		{"negative connect burst", func(o *Options) { o.MemberConnectBurst = -1 }, "--member-connect-burst"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var opts Options
			tt.mutate(&opts)
			err := validateOptions(opts)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("%v, want no error", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("err = %v, want one naming %s", err, tt.want)
			}
			if tt.want == "" {
				return
			}
			opts.Config = &rest.Config{Host: "https://127.0.0.1:1"}
			if _, err := New(context.Background(), opts); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: err = %v, want one naming %s", err, tt.want)
			}
		})
	}
}

// TestPushResyncValidated checks that a negative --push-resync is refused
// with an error naming the flag, and zero (the default) is accepted.
func TestPushResyncValidated(t *testing.T) {
	if err := validateOptions(Options{PushResync: -time.Second}); err == nil || !strings.Contains(err.Error(), "--push-resync") {
		t.Errorf("PushResync -1s: err = %v, want one naming --push-resync", err)
	}
	if err := validateOptions(Options{}); err != nil {
		t.Errorf("PushResync 0: %v, want no error", err)
	}
}
