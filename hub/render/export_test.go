package render

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// SplitImage exposes splitImage to the fuzz targets of package render_test,
// which check it against the webhook's image grammar (the webhook imports
// this package, so only an external test package can import it).
var SplitImage = splitImage

// mustDeployment renders app's Deployment and fails t if it cannot.
func mustDeployment(t testing.TB, app *flotillav1.MyApp, replicas int32, ov ClusterOverrides) *appsv1.Deployment {
	t.Helper()
	d, err := Deployment(app, replicas, ov)
	if err != nil {
		t.Fatalf("rendering the Deployment of %s: %v", app.Name, err)
	}
	return d
}
