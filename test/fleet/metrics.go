package fleet

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/testbed"
)

// With Config.SecureMetrics the hub and the agents serve /metrics as a
// shipped install does: HTTPS, admitting only bearer tokens their
// apiserver authenticates and authorizes for the non-resource URL
// /metrics (ClusterRole flotilla-metrics-reader, from the file the
// kustomize bases and the charts ship). The fleet binds that role to a
// ServiceAccount of its own in each cluster and scrapes with its token.

// MetricsScraper is the ServiceAccount (in flotilla-system of the hub and
// of every Pull member) whose token scrapes the hub and the agents.
const MetricsScraper = "flotilla-metrics-scraper"

// metricsReaderRole is the shipped ClusterRole file: next to the hub's
// CRD folder (deploy/hub/crds -> deploy/hub/metrics_reader_role.yaml)
// unless Config.MetricsReaderRole names it.
func (f *Fleet) metricsReaderRole() (*rbacv1.ClusterRole, error) {
	path := f.cfg.MetricsReaderRole
	if path == "" {
		path = filepath.Join(f.cfg.CRDDir, "..", "metrics_reader_role.yaml")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the metrics reader ClusterRole: %w", err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(b, role); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return role, nil
}

// metricsToken installs the metrics reader ClusterRole in the cluster c
// serves, binds it to the scraper ServiceAccount and returns a token of
// that account valid for lifetime.
func metricsToken(ctx context.Context, c client.Client, role *rbacv1.ClusterRole, lifetime time.Duration) (string, error) {
	if err := ensureNamespace(ctx, c, flotillav1.SystemNamespace); err != nil {
		return "", err
	}
	objs := []client.Object{
		role.DeepCopy(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: MetricsScraper, Namespace: flotillav1.SystemNamespace}},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: MetricsScraper},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: MetricsScraper, Namespace: flotillav1.SystemNamespace}},
		},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(lifetime.Seconds()))}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: MetricsScraper, Namespace: flotillav1.SystemNamespace}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", fmt.Errorf("requesting a token of %s: %w", MetricsScraper, err)
	}
	return tr.Status.Token, nil
}

// metricsTokenLifetime is how long the scraper's tokens last: longer
// than any suite that uses one fleet.
const metricsTokenLifetime = 6 * time.Hour

// makeMetricsTokens makes the scraper's token in the hub and in each of
// members (the Pull ones: a Push member runs no agent).
func (f *Fleet) makeMetricsTokens(ctx context.Context, members []string) error {
	if _, err := f.ensureMetricsToken(ctx, hubCluster, f.Hub); err != nil {
		return err
	}
	for _, m := range members {
		if _, err := f.ensureMetricsToken(ctx, m, f.members[m]); err != nil {
			return err
		}
	}
	return nil
}

// ensureMetricsToken is the scraper's token for cluster (c serves it),
// made the first time it is asked for.
func (f *Fleet) ensureMetricsToken(ctx context.Context, cluster string, c client.Client) (string, error) {
	if tok := f.MetricsToken(cluster); tok != "" {
		return tok, nil
	}
	role, err := f.metricsReaderRole()
	if err != nil {
		return "", err
	}
	tok, err := metricsToken(ctx, c, role, metricsTokenLifetime)
	if err != nil {
		return "", fmt.Errorf("%s: metrics token: %w", cluster, err)
	}
	f.mu.Lock()
	if f.metricsTokens == nil {
		f.metricsTokens = map[string]string{}
	}
	f.metricsTokens[cluster] = tok
	f.mu.Unlock()
	return tok, nil
}

// hubCluster keys the hub's token in metricsTokens.
const hubCluster = "hub"

// MetricsToken is the scraper's token for cluster ("hub" or a member;
// "" when the fleet serves metrics over plain HTTP, or the member has no
// agent).
func (f *Fleet) MetricsToken(cluster string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.metricsTokens[cluster]
}

// memberMetricsToken is the scraper's token for member, made now for a
// member that got its first agent after the fleet started (joined later,
// or switched from Push to Pull); "" without SecureMetrics.
func (f *Fleet) memberMetricsToken(member string) (string, error) {
	if !f.cfg.SecureMetrics {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return f.ensureMetricsToken(ctx, member, f.members[member])
}

// metricsArgs are the hub's or an agent's /metrics flags.
func (f *Fleet) metricsArgs(addr string) []string {
	if f.cfg.SecureMetrics {
		// The shipped default: HTTPS with authentication and authorization.
		return []string{"--metrics-bind-address", addr}
	}
	// The testbed scrapes /metrics over plain HTTP (Scrape) to tell the
	// leader; a shipped hub or agent serves it only over HTTPS with a token.
	return []string{"--metrics-bind-address", addr, "--metrics-secure=false"}
}

// Metrics is the process's /metrics text ("" when it does not answer):
// over HTTPS with its cluster's scraper token when the fleet serves
// metrics securely, else plain HTTP.
func (s *Supervised) Metrics() string {
	if s.MetricsToken == "" {
		return Scrape(s.MetricsAddr)
	}
	return ScrapeTLS(s.MetricsAddr, s.MetricsToken)
}

// ScrapeTLS returns the metrics text at https://addr/metrics, fetched
// with the bearer token, or "" when it does not answer 200. The serving
// certificate is not verified: the hub and the agents serve /metrics with
// a self-signed one unless given a certificate.
func ScrapeTLS(addr, token string) string {
	code, body := GetMetrics(addr, token)
	if code != http.StatusOK {
		return ""
	}
	return body
}

// GetMetrics fetches https://addr/metrics with the bearer token (none
// when ""), returning the HTTP status (0 when it did not answer) and body.
func GetMetrics(addr, token string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed metrics certificate of a test process
	}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
	if err != nil {
		return 0, ""
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// HubMetrics is the hub process's /metrics text ("" when it does not
// answer).
func (f *Fleet) HubMetrics() string {
	f.mu.Lock()
	h := f.hub
	f.mu.Unlock()
	if h == nil {
		return ""
	}
	return h.Metrics()
}

// StartFleetPrometheus starts a Prometheus that scrapes the hub and every
// agent replica of the Pull members every 5 seconds, through the metrics
// authentication when the fleet has it (a token file per cluster), and
// waits until it has scraped every one of them. It runs until Stop. Its jobs are
// flotilla-hub and flotilla-agent, with a cluster label.
func (f *Fleet) StartFleetPrometheus(ctx context.Context) (*testbed.Prometheus, error) {
	dir := filepath.Join(f.cfg.Dir, "prometheus", "fleet")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var targets []testbed.ScrapeTarget
	for _, ep := range f.MetricsEndpoints() {
		component := "flotilla-agent"
		if ep.Process == "hub" {
			component = "flotilla-hub"
		}
		t := testbed.ScrapeTarget{Job: component + "-" + ep.Process, Address: ep.Addr, Labels: map[string]string{"process": ep.Process, "component": component}}
		if ep.Token != "" {
			file := filepath.Join(dir, ep.Cluster+".token")
			if err := os.WriteFile(file, []byte(ep.Token), 0o600); err != nil {
				return nil, err
			}
			t.Scheme, t.BearerTokenFile, t.InsecureSkipVerify = "https", file, true
		}
		targets = append(targets, t)
	}
	name := "prometheus-fleet"
	p, err := testbed.StartPrometheus(ctx, testbed.PrometheusConfig{
		Name: name, BinDir: f.cfg.BinDir, Dir: dir, LogPath: f.logPath(name),
		Targets: targets, ScrapeInterval: 5 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.fleetProm = p
	f.mu.Unlock()
	f.logf("Prometheus at %s (pid %d) scraping the hub and %d agents every 5s", p.URL(), p.Process().Pid(), len(targets)-1)
	// Every target scraped successfully (up is absent for a target not
	// scraped yet, so count the ones that are up).
	all := fmt.Sprintf(`count(up{component=~"flotilla-.*"} == 1) == bool %d`, len(targets))
	if err := waitUp(ctx, p.URL(), all, time.Minute); err != nil {
		return p, err
	}
	return p, nil
}

// MetricsEndpoint is where one process of the fleet serves /metrics.
type MetricsEndpoint struct {
	// Process is hub or the agent replica's name; Cluster is hub or the
	// member.
	Process, Cluster string
	// Addr is host:port; Token the scraper's token ("" over plain HTTP).
	Addr, Token string
}

// MetricsEndpoints lists the hub's and every running agent replica's
// /metrics, the hub first.
func (f *Fleet) MetricsEndpoints() []MetricsEndpoint {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []MetricsEndpoint
	if f.hub != nil {
		out = append(out, MetricsEndpoint{Process: "hub", Cluster: hubCluster, Addr: f.hub.MetricsAddr, Token: f.hub.MetricsToken})
	}
	members := make([]string, 0, len(f.agents))
	for m := range f.agents {
		members = append(members, m)
	}
	sort.Strings(members)
	for _, m := range members {
		for _, a := range f.agents[m] {
			out = append(out, MetricsEndpoint{Process: a.Name, Cluster: m, Addr: a.MetricsAddr, Token: a.MetricsToken})
		}
	}
	return out
}

// HubPprofAddr is where the hub serves /debug/pprof ("" without
// Config.Pprof, or when no hub runs).
func (f *Fleet) HubPprofAddr() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hub == nil {
		return ""
	}
	return f.hub.PprofAddr
}

// AgentPprofAddr is where the agent replica called name serves
// /debug/pprof ("" without Config.Pprof, or when there is no such agent).
func (f *Fleet) AgentPprofAddr(name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a := f.agentLocked(name); a != nil {
		return a.PprofAddr
	}
	return ""
}

// SaveHeapProfile writes the heap profile the process serving
// /debug/pprof at addr takes after a garbage collection to path (go tool
// pprof reads it).
func SaveHeapProfile(addr, path string) error {
	return saveProfile("http://"+addr+"/debug/pprof/heap?gc=1", addr, path)
}

// SaveHeapText is SaveHeapProfile in the runtime's text form (debug=1):
// the sampled allocations by stack, then the runtime's MemStats, which
// say where the memory that is not live heap lies (free heap not yet
// returned, stacks, the runtime's own structures).
func SaveHeapText(addr, path string) error {
	return saveProfile("http://"+addr+"/debug/pprof/heap?gc=1&debug=1", addr, path)
}

func saveProfile(url, addr, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("heap profile from %s: %s", addr, resp.Status)
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
