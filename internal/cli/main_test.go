package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/flotilla-dev/flotilla/test/envtestenv"
	"github.com/flotilla-dev/flotilla/test/testbed"
)

// Two real apiservers, each started by the first test that needs it: a
// hub, with Flotilla's CRDs, and a bare member cluster. pushMemberBed is a
// bare testbed member (etcd, kube-apiserver and kube-controller-manager,
// whose token controller fills service-account-token Secrets, which a
// push join waits for), also started on first use.
var (
	hubEnv        = &lazyEnv{crds: true}
	memberEnv     = &lazyEnv{}
	pushMemberBed = &lazyTestbed{}
)

func TestMain(m *testing.M) {
	// Waits in the commands poll every second; the tests need not.
	pollInterval = 50 * time.Millisecond
	code := m.Run()
	if err := pushMemberBed.stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the testbed: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	for _, e := range []*lazyEnv{hubEnv, memberEnv} {
		if e.env == nil {
			continue
		}
		if err := e.env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// lazyEnv is an envtest apiserver started on first use.
type lazyEnv struct {
	crds bool
	once sync.Once
	env  *envtest.Environment
	cfg  *rest.Config
	err  error
}

func (e *lazyEnv) config(t *testing.T) *rest.Config {
	t.Helper()
	e.once.Do(func() {
		if os.Getenv("KUBEBUILDER_ASSETS") == "" {
			os.Setenv("KUBEBUILDER_ASSETS", testbed.DefaultBinDir())
		}
		dir := os.Getenv("KUBEBUILDER_ASSETS")
		for _, bin := range []string{"kube-apiserver", "etcd"} {
			if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
				e.err = fmt.Errorf("%s is missing from KUBEBUILDER_ASSETS=%s; run `make testbed-bin` in the repository root", bin, dir)
				return
			}
		}
		e.env = &envtest.Environment{}
		if e.crds {
			e.env.CRDDirectoryPaths = []string{envtestenv.CRDDir()}
			e.env.ErrorIfCRDPathMissing = true
		}
		e.cfg, e.err = e.env.Start()
	})
	if e.err != nil {
		t.Fatalf("starting envtest: %v", e.err)
	}
	return e.cfg
}

func (e *lazyEnv) client(t *testing.T) client.Client {
	t.Helper()
	c, err := NewClient(e.config(t))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// kubeconfig writes a kubeconfig for e's apiserver, so tests can run the
// commands as a user does, flags and all.
func (e *lazyEnv) kubeconfig(t *testing.T) string {
	t.Helper()
	cfg := e.config(t)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin", Namespace: "default"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// lazyTestbed is a testbed with one bare member, started on first use.
type lazyTestbed struct {
	once sync.Once
	dir  string
	tb   *testbed.Testbed
	err  error
}

func (l *lazyTestbed) member(t *testing.T) *testbed.Cluster {
	t.Helper()
	l.once.Do(func() {
		if l.dir, l.err = os.MkdirTemp("", "cli-testbed-"); l.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		l.tb, l.err = testbed.Start(ctx, testbed.Config{Dir: l.dir, Members: []testbed.ClusterSpec{{Name: "push-member"}}})
	})
	if l.err != nil {
		t.Fatalf("starting the testbed member (needs bin/ from `make testbed-bin`): %v", l.err)
	}
	return l.tb.Members[0]
}

func (l *lazyTestbed) stop() error {
	var err error
	if l.tb != nil {
		err = l.tb.Stop()
	}
	if l.dir != "" {
		err = errors.Join(err, os.RemoveAll(l.dir))
	}
	return err
}
