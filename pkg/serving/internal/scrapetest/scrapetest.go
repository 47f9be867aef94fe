// Package scrapetest gives pkg/serving's tests the scrapers of a real
// apiserver: a service account bound to the flotilla-metrics-reader
// ClusterRole deploy/ ships and one that nothing grants, with their
// tokens. It is for tests only: it links controller-runtime's client
// (through test/deployrbac), which the packages under test must not.
package scrapetest

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/kclient/direct"
	"github.com/flotilla-dev/flotilla/test/deployrbac"
)

// Scrapers are two service accounts of a namespace of their own and a
// token of each.
type Scrapers struct {
	// Namespace holds both service accounts.
	Namespace string
	// Reader is a token of Namespace/prometheus, bound to
	// flotilla-metrics-reader: it may get /metrics.
	Reader string
	// Nobody is a token of Namespace/nobody, which no binding names: the
	// apiserver authenticates it and allows it nothing.
	Nobody string
}

// User is the user name the apiserver gives the service account name of
// s's namespace.
func (s Scrapers) User(name string) string {
	user, _ := deployrbac.ServiceAccountUser(s.Namespace, name)
	return user
}

var namespaces atomic.Int32

// New makes Scrapers on the apiserver admin reaches (as admin), in a
// namespace of the test's own, and returns once the apiserver
// authenticates both tokens and authorizes the reader: a review asked
// before would get, and a reviewer cache, a refusal that the test did
// not mean. The binding is deleted when the test ends.
func New(t testing.TB, admin *rest.Config) Scrapers {
	t.Helper()
	ctx := context.Background()
	c, err := client.New(admin, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	role, err := deployrbac.Load(filepath.Join(deployrbac.DeployDir(), "agent", "metrics_reader_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := deployrbac.Apply(ctx, c, role); err != nil {
		t.Fatal(err)
	}
	s := Scrapers{Namespace: fmt.Sprintf("scrapers-%d-%d", time.Now().UnixNano()%100000, namespaces.Add(1))}
	if s.Reader, err = deployrbac.ServiceAccountToken(ctx, admin, s.Namespace, "prometheus"); err != nil {
		t.Fatal(err)
	}
	if s.Nobody, err = deployrbac.ServiceAccountToken(ctx, admin, s.Namespace, "nobody"); err != nil {
		t.Fatal(err)
	}
	binding, err := deployrbac.BindMetricsReader(ctx, c, s.Namespace, "prometheus")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), binding) })

	// The scheme is made here, not taken from metricsauth, whose own
	// tests import this package.
	scheme := runtime.NewScheme()
	if err := authnv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	reviews, err := direct.New(admin, scheme)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the apiserver authenticating the scrapers' tokens and authorizing the reader", 30*time.Second, func() error {
		for _, token := range []string{s.Reader, s.Nobody} {
			tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}
			if err := reviews.Create(ctx, tr, ""); err != nil {
				return err
			}
			if !tr.Status.Authenticated {
				return fmt.Errorf("a token not authenticated yet: %s", tr.Status.Error)
			}
		}
		allowed, err := deployrbac.Allowed(ctx, c, s.Namespace, "prometheus", nil, &authzv1.NonResourceAttributes{Path: "/metrics", Verb: "get"})
		if err != nil {
			return err
		}
		if !allowed {
			return fmt.Errorf("%s may not get /metrics yet", s.User("prometheus"))
		}
		return nil
	}, testutil.Every(200*time.Millisecond))
	return s
}
