package client

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/pki"
)

type nopApplier struct{ Applier }

// TestClusterFromTLS checks where the client takes its cluster from: the
// configuration's first certificate, or the certificate
// GetClientCertificate returns now (an agent whose identity is in memory);
// a configuration with neither needs Config.Cluster, and one that names
// another cluster than Config.Cluster is refused.
func TestClusterFromTLS(t *testing.T) {
	ca, err := pki.NewCA("test-ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	east, err := ca.IssueAgent("east", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	eastCert := east.TLSCertificate()
	fromFunc := func(c tls.Certificate) func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c, nil }
	}
	for _, tt := range []struct {
		name    string
		tls     *tls.Config
		cluster string
		want    string
		wantErr string
	}{
		{name: "Certificates", tls: &tls.Config{Certificates: []tls.Certificate{eastCert}}, want: "east"},
		{name: "GetClientCertificate", tls: &tls.Config{GetClientCertificate: fromFunc(eastCert)}, want: "east"},
		{name: "GetClientCertificate with none yet, Cluster given", tls: &tls.Config{GetClientCertificate: fromFunc(tls.Certificate{})}, cluster: "east", want: "east"},
		{name: "GetClientCertificate with none yet, no Cluster", tls: &tls.Config{GetClientCertificate: fromFunc(tls.Certificate{})}, wantErr: "no client certificate"},
		{name: "GetClientCertificate naming another cluster", tls: &tls.Config{GetClientCertificate: fromFunc(eastCert)}, cluster: "west", wantErr: `certificate is for cluster "east"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Address: "127.0.0.1:1", TLS: tt.tls, Applier: nopApplier{}, Cluster: tt.cluster,
				Resources: func(context.Context) (*v1alpha1.ResourceSummary, error) { return nil, nil }}
			err := cfg.defaults()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("defaults: %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || cfg.Cluster != tt.want {
				t.Fatalf("defaults: cluster %q, %v; want %q", cfg.Cluster, err, tt.want)
			}
		})
	}
}
