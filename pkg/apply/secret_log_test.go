package apply

import (
	"encoding/base64"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// TestSecretContentIsNeverLogged applies, deletes and re-applies Works
// carrying a shared Secret with every log level on, including a Secret the
// apiserver refuses (an invalid data key), and searches everything the
// applier logged, and every Result message and detail, for the Secret's
// value, as given and base64-encoded. The logger is at verbosity 10:
// client-go traces request and response bodies from level 8 through the
// context's logger, which the Applier caps at 7 (logging.go).
func TestSecretContentIsNeverLogged(t *testing.T) {
	f := newFixture(t)
	const value = "hunter2-do-not-log-me"
	var mu sync.Mutex
	var logged strings.Builder
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logged.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 10})
	f.ctx = log.IntoContext(f.ctx, logger)
	a := f.sharedDepApplier(Options{})

	secret := func(name, key string) *corev1.Secret {
		return &corev1.Secret{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name,
				Labels: map[string]string{v1alpha1.LabelDependency: "true"}},
			Data: map[string][]byte{key: []byte(value)},
		}
	}
	good := sharedDepWork(t, f.work("good"), 1, "team-a", secret("db", "password"), deployment(f.ns, "good", "good:1", 1))
	bad := sharedDepWork(t, f.work("bad"), 1, "team-a", secret("broken", "not a valid key!"))
	var messages []string
	for _, w := range []struct {
		work *v1alpha1.Work
		ok   bool
	}{{good, true}, {bad, false}} {
		results, err := a.Apply(f.ctx, w.work)
		if (err == nil) != w.ok {
			t.Fatalf("applying Work %s: err = %v, want ok=%v", w.work.Name, err, w.ok)
		}
		if err != nil {
			messages = append(messages, err.Error())
		}
		for _, r := range results {
			messages = append(messages, r.Message, r.Detail)
		}
	}
	if _, err := a.Delete(f.ctx, good.Name); err != nil {
		t.Fatalf("deleting Work %s: %v", good.Name, err)
	}
	logr.FromContextOrDiscard(f.ctx).V(1).Info("end of test")

	mu.Lock()
	all := logged.String()
	mu.Unlock()
	if !strings.Contains(all, "end of test") || !strings.Contains(all, "applied") {
		t.Fatalf("the test's logger saw nothing of the applier, so the check below would prove nothing:\n%s", all)
	}
	// As given, and as a Secret's data reads in JSON (base64).
	for _, v := range []string{value, base64.StdEncoding.EncodeToString([]byte(value))} {
		if strings.Contains(all, v) {
			t.Errorf("the applier logged the Secret's value (%s):\n%s", v, all)
		}
		for _, m := range messages {
			if strings.Contains(m, v) {
				t.Errorf("a result or error carries the Secret's value (%s): %s", v, m)
			}
		}
	}
}
