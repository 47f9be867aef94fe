package setup

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// checkJoin joins a cluster rbac-join-<token id> (new on every run)
// through the hub at syncAddr with an auto-accepting token and waits for
// its certificate: every step the
// hub takes (token Secret get and update, MemberCluster and CSR create,
// approval, signing) runs under the RBAC the hub was started with.
func checkJoin(t *testing.T, ctx context.Context, admin client.Client, syncAddr string, ca *pki.KeyPair) {
	t.Helper()
	tok, err := bootstrap.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, bootstrap.NewSecret(flotillav1.SystemNamespace, tok, bootstrap.Options{TTL: time.Hour, SingleUse: true, AutoAccept: true}, time.Now())); err != nil {
		t.Fatal(err)
	}
	cluster := "rbac-join-" + tok.ID
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csrPEM, err := pki.NewAgentCSR(key, cluster)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	conn, err := grpc.NewClient(syncAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS13})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	bc := syncv1.NewBootstrapClient(conn)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := bc.Register(rctx, &syncv1.RegisterRequest{Token: tok.String(), ClusterName: cluster, Csr: csrPEM})
	if err != nil {
		t.Fatalf("Register with the hub's shipped RBAC: %v", err)
	}
	testutil.Eventually(t, "the hub approving and signing "+cluster+"'s certificate", 30*time.Second, func() error {
		c, err := bc.Certificate(rctx, &syncv1.CertificateRequest{Request: resp.GetRequest()})
		if err != nil {
			return err
		}
		if c.GetState() != syncv1.CertificateResponse_ISSUED {
			return fmt.Errorf("%s: %s", c.GetState(), c.GetMessage())
		}
		cert, err := pki.ParseCertificatePEM(c.GetCertificate())
		if err != nil {
			return err
		}
		if got, err := pki.VerifyAgent([]*x509.Certificate{cert}, roots, time.Now()); err != nil || got != cluster {
			return fmt.Errorf("issued certificate: cluster %q, %v", got, err)
		}
		return nil
	})
}
