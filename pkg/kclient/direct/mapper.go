package direct

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// refetchAfter is how long a group version's resources are trusted to
// answer "no such kind": a miss older than this asks discovery again, so
// a kind installed meanwhile (a CRD) is found, while a Work that names a
// missing kind does not send a discovery request on every retry.
const refetchAfter = time.Second

// discoveryTimeout bounds one discovery request.
const discoveryTimeout = 30 * time.Second

// Mapper maps kinds to resources with the apiserver's discovery, one group
// version at a time, when first asked about it. What it learnt is kept:
// a kind the cluster stops serving keeps its mapping, and requests for it
// then fail at the apiserver (NotFound), as they would between a
// discovery and its use anyway.
type Mapper struct {
	rc *rest.RESTClient

	mu sync.Mutex
	// groups holds each group version's kinds, by kind, and when they
	// were read.
	groups map[schema.GroupVersion]*groupVersion
	// preferred holds each group's preferred version, read when a mapping
	// is asked for without versions.
	preferred map[string]string
}

type groupVersion struct {
	kinds   map[string]metav1.APIResource
	fetched time.Time
}

// NewMapper returns a Mapper of the apiserver cfg reaches.
func NewMapper(cfg *rest.Config) (*Mapper, error) {
	rc, err := UntypedRESTClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the discovery client: %w", err)
	}
	return &Mapper{rc: rc, groups: map[schema.GroupVersion]*groupVersion{}, preferred: map[string]string{}}, nil
}

// UntypedRESTClient returns a REST client of the apiserver cfg reaches for
// answers read raw (discovery, /readyz, /version): its serializer knows no
// types, so it needs neither client-go's scheme of every API group nor its
// discovery client, which links that scheme.
func UntypedRESTClient(cfg *rest.Config) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.AcceptContentTypes = "application/json"
	c.NegotiatedSerializer = serializer.NewCodecFactory(runtime.NewScheme()).WithoutConversion()
	return rest.UnversionedRESTClientFor(c)
}

// TypedRESTClient returns a REST client of group version gv on the
// apiserver base reaches, through httpClient, that asks for protobuf (then
// JSON, for kinds without protobuf) and decodes with codecs only: the
// caller's scheme, not client-go's of every API group.
func TypedRESTClient(base *rest.Config, httpClient *http.Client, codecs runtime.NegotiatedSerializer, gv schema.GroupVersion) (rest.Interface, error) {
	cfg := rest.CopyConfig(base)
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	if gv.Group == "" {
		cfg.APIPath = "/api"
	}
	cfg.NegotiatedSerializer = codecs
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("building the REST client of %s: %w", gv, err)
	}
	return rc, nil
}

// RESTMapping returns the resource and scope of kind gk in the first of
// versions the apiserver serves it in (its group's preferred version when
// none is given), or a *meta.NoKindMatchError.
func (m *Mapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if len(versions) == 0 {
		v, err := m.preferredVersion(gk.Group)
		if err != nil {
			return nil, err
		}
		if v == "" {
			return nil, &meta.NoKindMatchError{GroupKind: gk}
		}
		versions = []string{v}
	}
	for _, v := range versions {
		gv := schema.GroupVersion{Group: gk.Group, Version: v}
		r, err := m.lookup(gv, gk.Kind)
		if err != nil {
			return nil, err
		}
		if r == nil {
			continue
		}
		scope := meta.RESTScopeRoot
		if r.Namespaced {
			scope = meta.RESTScopeNamespace
		}
		return &meta.RESTMapping{
			Resource:         gv.WithResource(r.Name),
			GroupVersionKind: gv.WithKind(gk.Kind),
			Scope:            scope,
		}, nil
	}
	return nil, &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: versions}
}

// lookup returns kind's resource in gv, or nil when gv does not serve it;
// a miss in resources read over refetchAfter ago reads them again. The
// request is made without the lock, so lookups of kinds already known do
// not wait for it.
func (m *Mapper) lookup(gv schema.GroupVersion, kind string) (*metav1.APIResource, error) {
	m.mu.Lock()
	g := m.groups[gv]
	m.mu.Unlock()
	if g != nil {
		if r, ok := g.kinds[kind]; ok {
			return &r, nil
		}
		if time.Since(g.fetched) < refetchAfter {
			return nil, nil
		}
	}
	g, err := m.fetch(gv)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if old := m.groups[gv]; old == nil || old.fetched.Before(g.fetched) {
		m.groups[gv] = g
	}
	m.mu.Unlock()
	if r, ok := g.kinds[kind]; ok {
		return &r, nil
	}
	return nil, nil
}

// get reads path raw, within discoveryTimeout.
func (m *Mapper) get(path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), discoveryTimeout)
	defer cancel()
	return m.rc.Get().AbsPath(path).Do(ctx).Raw()
}

// fetch reads gv's resources from discovery.
func (m *Mapper) fetch(gv schema.GroupVersion) (*groupVersion, error) {
	path := "/apis/" + gv.Group + "/" + gv.Version
	if gv.Group == "" {
		path = "/api/" + gv.Version
	}
	g := &groupVersion{kinds: map[string]metav1.APIResource{}, fetched: time.Now()}
	raw, err := m.get(path)
	if apierrors.IsNotFound(err) {
		return g, nil // the apiserver does not serve gv at all
	}
	if err != nil {
		return nil, fmt.Errorf("discovering the resources of %s: %w", gv, err)
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("decoding the resources of %s: %w", gv, err)
	}
	for _, r := range list.APIResources {
		if strings.Contains(r.Name, "/") {
			continue // a subresource
		}
		g.kinds[r.Kind] = r
	}
	return g, nil
}

// preferredVersion returns group's preferred version, "" when the
// apiserver does not serve the group.
func (m *Mapper) preferredVersion(group string) (string, error) {
	if group == "" {
		return "v1", nil
	}
	m.mu.Lock()
	v, ok := m.preferred[group]
	m.mu.Unlock()
	if ok {
		return v, nil
	}
	raw, err := m.get("/apis/" + group)
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("discovering the versions of group %s: %w", group, err)
	}
	var g metav1.APIGroup
	if err := json.Unmarshal(raw, &g); err != nil {
		return "", fmt.Errorf("decoding the versions of group %s: %w", group, err)
	}
	m.mu.Lock()
	m.preferred[group] = g.PreferredVersion.Version
	m.mu.Unlock()
	return g.PreferredVersion.Version, nil
}
