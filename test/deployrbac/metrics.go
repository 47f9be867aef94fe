package deployrbac

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// MetricsReaderRole is the ClusterRole deploy/ ships for scrapers.
const MetricsReaderRole = "flotilla-metrics-reader"

// BindMetricsReader binds MetricsReaderRole to service account
// namespace/name, as an operator does for Prometheus, and returns the
// binding so the caller can delete it.
func BindMetricsReader(ctx context.Context, c client.Client, namespace, name string) (*rbacv1.ClusterRoleBinding, error) {
	b := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: namespace + "-" + name + "-flotilla-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: MetricsReaderRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}},
	}
	if err := c.Create(ctx, b); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	return b, nil
}

// GetMetrics fetches https://addr/metrics with token as the bearer token
// ("" sends none) and returns the status code and body. It does not verify
// the server's certificate: controller-runtime's secure metrics server
// presents a self-signed one made in memory, and what is under test is who
// the server lets in, not who it is.
func GetMetrics(ctx context.Context, addr, token string) (int, string, error) {
	code, _, body, err := getMetrics(ctx, addr, token, "")
	return code, body, err
}

// GetMetricsEncoded is GetMetrics asking for acceptEncoding (a scraper's
// Accept-Encoding, e.g. "gzip"); it returns the Content-Encoding the server
// chose, and the body as sent.
func GetMetricsEncoded(ctx context.Context, addr, token, acceptEncoding string) (code int, contentEncoding, body string, err error) {
	return getMetrics(ctx, addr, token, acceptEncoding)
}

func getMetrics(ctx context.Context, addr, token, acceptEncoding string) (int, string, string, error) {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // See above.
	}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
	if err != nil {
		return 0, "", "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if acceptEncoding != "" {
		// Set by hand, the transport leaves the answer as it came.
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Encoding"), string(b), err
}
