// Package memberprobe asks a member cluster's apiserver the two things
// both ends of Flotilla need before they act on a member: whether it is
// ready (/readyz) and which Kubernetes version it runs. The agent's member
// gate and the hub's push mode call it, so a member is judged the same way
// whichever side applies its Works.
package memberprobe

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/pkg/kclient/direct"
)

// Timeout bounds one /readyz request.
const Timeout = time.Second

// Readyz returns a check that asks the apiserver of cfg for /readyz,
// within Timeout, and returns an error naming /readyz when it does not
// answer ok.
func Readyz(cfg *rest.Config) (func(ctx context.Context) error, error) {
	c := rest.CopyConfig(cfg)
	c.Timeout = Timeout
	rc, err := direct.UntypedRESTClient(c)
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
	c := rest.CopyConfig(cfg)
	if c.Timeout == 0 {
		c.Timeout = versionTimeout
	}
	rc, err := direct.UntypedRESTClient(c)
	if err != nil {
		return ""
	}
	raw, err := rc.Get().AbsPath("/version").Do(context.Background()).Raw()
	if err != nil {
		return ""
	}
	var v version.Info
	if err := json.Unmarshal(raw, &v); err != nil {
		return ""
	}
	return v.GitVersion
}

// versionTimeout bounds the /version request of a config without a
// timeout of its own.
const versionTimeout = 10 * time.Second
