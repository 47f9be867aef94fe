// Package memberprobe asks a member cluster's apiserver the two things
// both ends of Flotilla need before they act on a member: whether it is
// ready (/readyz) and which Kubernetes version it runs. The agent's member
// gate and the hub's push mode call it, so a member is judged the same way
// whichever side applies its Works.
package memberprobe

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// Timeout bounds one /readyz request.
const Timeout = time.Second

// Readyz returns a check that asks the apiserver of cfg for /readyz,
// within Timeout, and returns an error naming /readyz when it does not
// answer ok.
func Readyz(cfg *rest.Config) (func(ctx context.Context) error, error) {
	c := rest.CopyConfig(cfg)
	c.Timeout = Timeout
	// The unversioned client needs a serializer; /readyz returns text.
	c.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	rc, err := rest.UnversionedRESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		if err := rc.Get().AbsPath("/readyz").Do(ctx).Error(); err != nil {
			return fmt.Errorf("member /readyz: %w", err)
		}
		return nil
	}, nil
}

// ServerVersion returns the apiserver's git version (e.g. v1.37.2), or ""
// when it cannot be read: the version is reported, never required.
func ServerVersion(cfg *rest.Config) string {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return ""
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return ""
	}
	return v.GitVersion
}
