package startup

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestUnreachable(t *testing.T) {
	secrets := schema.GroupResource{Resource: "secrets"}
	get := func(err error) error {
		// As client-go and the callers wrap them.
		return fmt.Errorf("reading Secret flotilla-system/x: %w", &url.Error{Op: "Get", URL: "https://10.96.0.1:443/api", Err: err})
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", get(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), true},
		{"connection reset", get(&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), true},
		{"cut during the handshake", get(io.EOF), true},
		{"a certificate that does not verify", get(&tls.CertificateVerificationError{Err: x509.HostnameError{Certificate: &x509.Certificate{}, Host: "10.96.0.1"}}), true},
		{"a dial that timed out", get(&net.OpError{Op: "dial", Net: "tcp", Err: timeoutError{}}), true},
		{"503", apierrors.NewServiceUnavailable("starting"), true},
		{"429", apierrors.NewTooManyRequests("slow down", 1), true},
		{"500", apierrors.NewInternalError(errors.New("etcd")), true},
		{"504", apierrors.NewTimeoutError("slow", 1), true},
		{"401", apierrors.NewUnauthorized("who are you"), false},
		{"403", apierrors.NewForbidden(secrets, "x", errors.New("no")), false},
		{"404", apierrors.NewNotFound(secrets, "x"), false},
		{"409", apierrors.NewAlreadyExists(secrets, "x"), false},
		{"our own deadline", get(context.DeadlineExceeded), false},
		{"cancelled", context.Canceled, false},
		{"a Secret that does not parse", errors.New("flotilla-agent-credentials: tls.crt: no certificate"), false},
	}
	for _, tt := range tests {
		if got := Unreachable(tt.err); got != tt.want {
			t.Errorf("%s (%v): Unreachable = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

func TestRetry(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	log := testr.New(t)

	t.Run("until it succeeds", func(t *testing.T) {
		calls := 0
		_, err := Retry(context.Background(), log, "a call", func(context.Context) (struct{}, error) {
			calls++
			if calls < 3 {
				return struct{}{}, refused
			}
			return struct{}{}, nil
		})
		if err != nil || calls != 3 {
			t.Errorf("Retry = %v after %d calls, want nil after 3", err, calls)
		}
	})
	t.Run("an answer at once", func(t *testing.T) {
		calls := 0
		forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "x", errors.New("no"))
		_, err := Retry(context.Background(), log, "a call", func(context.Context) (struct{}, error) {
			calls++
			return struct{}{}, forbidden
		})
		if !apierrors.IsForbidden(err) || calls != 1 {
			t.Errorf("Retry = %v after %d calls, want the 403 after 1", err, calls)
		}
	})
	t.Run("until ctx ends", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		calls := 0
		_, err := Retry(ctx, log, "a call", func(context.Context) (struct{}, error) {
			calls++
			return struct{}{}, refused
		})
		if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), fmt.Sprintf("tried %d times", calls)) || calls < 2 {
			t.Errorf("Retry = %v after %d calls, want the refusal, the count and more than one call", err, calls)
		}
	})
}
