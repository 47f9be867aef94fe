package metricsauth

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
	"github.com/flotilla-dev/flotilla/pkg/kclient/direct"
	"github.com/flotilla-dev/flotilla/pkg/serving/internal/scrapetest"
	"github.com/flotilla-dev/flotilla/test/deployrbac"
)

// countingClient is a real direct client of the apiserver that counts
// the reviews created through it. A review it is told to fail (failTokens,
// failAccess) goes instead to a direct client of an address nothing
// listens on, so the failure is a real unreachable apiserver.
type countingClient struct {
	kclient.Client
	unreachable kclient.Client

	failTokens, failAccess      atomic.Int32
	tokenReviews, accessReviews atomic.Int32
	// editToken, when set, changes each TokenReview's answer.
	editToken func(*authnv1.TokenReview)

	mu         sync.Mutex
	lastAccess authzv1.SubjectAccessReviewSpec
}

func (c *countingClient) Create(ctx context.Context, obj kclient.Object, fieldOwner string) error {
	fail := &c.failTokens
	switch o := obj.(type) {
	case *authnv1.TokenReview:
		c.tokenReviews.Add(1)
	case *authzv1.SubjectAccessReview:
		c.accessReviews.Add(1)
		fail = &c.failAccess
		c.mu.Lock()
		c.lastAccess = *o.Spec.DeepCopy()
		c.mu.Unlock()
	}
	if fail.Load() > 0 {
		fail.Add(-1)
		return c.unreachable.Create(ctx, obj, fieldOwner)
	}
	if err := c.Client.Create(ctx, obj, fieldOwner); err != nil {
		return err
	}
	if tr, ok := obj.(*authnv1.TokenReview); ok && c.editToken != nil {
		c.editToken(tr)
	}
	return nil
}

func (c *countingClient) counts() (tokens, access int32) {
	return c.tokenReviews.Load(), c.accessReviews.Load()
}

// newCountingClient is a countingClient of the apiserver cfg reaches, as
// cfg's identity.
func newCountingClient(t *testing.T, cfg *rest.Config) *countingClient {
	t.Helper()
	real, err := direct.New(cfg, Scheme())
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := rest.CopyConfig(cfg)
	closed.Host = "https://" + l.Addr().String()
	l.Close()
	unreachable, err := direct.New(closed, Scheme())
	if err != nil {
		t.Fatal(err)
	}
	return &countingClient{Client: real, unreachable: unreachable}
}

// fastRetries makes the reviews' retries quick (three attempts) for the
// test.
func fastRetries(t *testing.T) {
	orig := reviewBackoff
	reviewBackoff = wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 3}
	t.Cleanup(func() { reviewBackoff = orig })
}

// scrape sends GET /metrics with token ("" sends none) through rv's
// filter and returns the status and the body.
func scrape(rv *Reviewer, log logr.Logger, token string) (int, string) {
	h := rv.Wrap(log, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// The apiserver's answers, read through the direct client: the reader's
// token gets the metrics, a token of an identity without the grant 403,
// a made-up token and none 401. The SubjectAccessReview asks about the
// identity the TokenReview returned (its UID too: the answer's status is
// decoded whole) and the authenticated group. A refused token is logged
// with the apiserver's reason, never the token itself.
func TestReviewAnswersLikeTheAPIServer(t *testing.T) {
	admin := sharedEnv.Config(t)
	s := scrapetest.New(t, admin)
	c := newCountingClient(t, admin)
	rv := NewReviewer(c)
	logs := &testutil.LogBuffer{}
	log := logs.Logger()

	for _, tt := range []struct {
		who, token string
		want       int
		body       string
	}{
		{"the reader", s.Reader, http.StatusOK, "metrics"},
		{"an identity without the grant", s.Nobody, http.StatusForbidden, "Forbidden (user=" + s.User("nobody") + ", verb=get, path=/metrics)"},
		{"a made-up token", "not-a-token", http.StatusUnauthorized, "Unauthorized"},
		{"no token", "", http.StatusUnauthorized, "Unauthorized"},
	} {
		code, body := scrape(rv, log, tt.token)
		if code != tt.want || !strings.Contains(body, tt.body) {
			t.Errorf("%s: %d %q, want %d and %q", tt.who, code, body, tt.want, tt.body)
		}
	}

	// The last SubjectAccessReview was the nobody's.
	c.mu.Lock()
	asked := c.lastAccess
	c.mu.Unlock()
	user, groups := deployrbac.ServiceAccountUser(s.Namespace, "nobody")
	if asked.User != user || asked.UID == "" || asked.NonResourceAttributes == nil ||
		asked.NonResourceAttributes.Path != "/metrics" || asked.NonResourceAttributes.Verb != "get" {
		t.Errorf("the SubjectAccessReview asked about user %q (uid %q), %+v; want %s with its uid, get /metrics", asked.User, asked.UID, asked.NonResourceAttributes, user)
	}
	for _, g := range groups {
		if !slices.Contains(asked.Groups, g) {
			t.Errorf("the SubjectAccessReview asked for groups %q, without %s", asked.Groups, g)
		}
	}

	out := logs.String()
	if strings.Count(out, "its token was not accepted") != 1 || !strings.Contains(out, `"reason"="invalid bearer token"`) {
		t.Errorf("want the made-up token's refusal logged once with the apiserver's reason; log:\n%s", out)
	}
	for _, token := range []string{s.Reader, s.Nobody, "not-a-token"} {
		if strings.Contains(out, token) {
			t.Errorf("the log holds a bearer token:\n%s", out)
		}
	}
}

// The SubjectAccessReview asks for system:authenticated even when the
// TokenReview's answer lacks it, as kube's authenticators add it to every
// authenticated user. kube-apiserver's own answer always has it, so the
// answer is edited to lack it: as a token authenticator that does not add
// it (a webhook's, an older apiserver's) would answer.
func TestReviewAddsTheAuthenticatedGroup(t *testing.T) {
	admin := sharedEnv.Config(t)
	s := scrapetest.New(t, admin)
	c := newCountingClient(t, admin)
	var answered []string
	c.editToken = func(tr *authnv1.TokenReview) {
		answered = slices.DeleteFunc(tr.Status.User.Groups, func(g string) bool { return g == authenticatedGroup })
		tr.Status.User.Groups = answered
	}
	rv := NewReviewer(c)
	if got, body := scrape(rv, logr.Discard(), s.Reader); got != http.StatusOK {
		t.Fatalf("the reader: %d, want 200 (%s)", got, body)
	}
	c.mu.Lock()
	asked := c.lastAccess.Groups
	c.mu.Unlock()
	if len(answered) == 0 || !slices.Contains(asked, authenticatedGroup) || len(asked) != len(answered)+1 {
		t.Errorf("the TokenReview answered groups %q; the SubjectAccessReview asked for %q, want them and %s", answered, asked, authenticatedGroup)
	}
}

// Answers are reused within their TTL and asked again after it; a
// denial is cached for less time than an allowance. The clock is the
// test's, the apiserver real; the counts are of reviews the apiserver
// received.
func TestReviewCachesAnswersForTheirTTL(t *testing.T) {
	admin := sharedEnv.Config(t)
	s := scrapetest.New(t, admin)
	c := newCountingClient(t, admin)
	rv := NewReviewer(c)
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	rv.now = func() time.Time { return now }
	log := logr.Discard()

	for _, tt := range []struct {
		token string
		want  int
	}{{"", 401}, {"made-up", 401}, {s.Nobody, 403}, {s.Reader, 200}} {
		if got, body := scrape(rv, log, tt.token); got != tt.want {
			t.Fatalf("token %.10q: %d, want %d (%s)", tt.token, got, tt.want, body)
		}
	}
	if tc, sc := c.counts(); tc != 3 || sc != 2 {
		t.Fatalf("%d TokenReviews and %d SubjectAccessReviews for 3 tokens (and a request without one), want 3 and 2", tc, sc)
	}

	// Within every TTL: no new review, and the same answers.
	now = now.Add(9 * time.Second)
	for tok, want := range map[string]int{"made-up": 401, s.Nobody: 403, s.Reader: 200} {
		if got, _ := scrape(rv, log, tok); got != want {
			t.Fatalf("token %.10q from the cache: %d, want %d", tok, got, want)
		}
	}
	if tc, sc := c.counts(); tc != 3 || sc != 2 {
		t.Fatalf("within the TTLs: %d TokenReviews and %d SubjectAccessReviews, want 3 and 2 (answers reused)", tc, sc)
	}
	// 31 s: the denied identity is asked again, the allowed one and the
	// tokens are not.
	now = now.Add(22 * time.Second)
	scrape(rv, log, "made-up")
	scrape(rv, log, s.Nobody)
	scrape(rv, log, s.Reader)
	if tc, sc := c.counts(); tc != 3 || sc != 3 {
		t.Fatalf("after 31 s: %d TokenReviews and %d SubjectAccessReviews, want 3 and 3 (only the denial expired)", tc, sc)
	}
	// 61 s: the tokens' answers, accepted or refused, expired; the
	// allowed identity's has not.
	now = now.Add(30 * time.Second)
	scrape(rv, log, "made-up")
	if got, _ := scrape(rv, log, s.Reader); got != 200 {
		t.Fatalf("the reader after 61 s: %d, want 200", got)
	}
	if tc, sc := c.counts(); tc != 5 || sc != 3 {
		t.Fatalf("after 61 s: %d TokenReviews and %d SubjectAccessReviews, want 5 and 3 (the tokens asked again)", tc, sc)
	}
	// 5 min 1 s: the allowance expired too.
	now = now.Add(4 * time.Minute)
	scrape(rv, log, s.Reader)
	if tc, sc := c.counts(); tc != 6 || sc != 4 {
		t.Fatalf("after 5 min 1 s: %d TokenReviews and %d SubjectAccessReviews, want 6 and 4 (the allowance asked again)", tc, sc)
	}
}

// A review that cannot reach the apiserver is retried; one that fails
// for good is answered 401 (the TokenReview) or 500 (the
// SubjectAccessReview) and not cached, so the next request, with the
// apiserver back, is served. A refusal of the review itself (a 403: the
// reviewer's identity may not create TokenReviews) is not retried.
func TestReviewRetriesWhatMayPassAndCachesNoFailure(t *testing.T) {
	fastRetries(t)
	admin := sharedEnv.Config(t)
	s := scrapetest.New(t, admin)
	logs := &testutil.LogBuffer{}
	log := logs.Logger()

	t.Run("unreachable twice, then back", func(t *testing.T) {
		c := newCountingClient(t, admin)
		rv := NewReviewer(c)
		c.failTokens.Store(2)
		c.failAccess.Store(2)
		if got, body := scrape(rv, log, s.Reader); got != 200 {
			t.Fatalf("the reader after two failed attempts of each review: %d, want 200 (%s)", got, body)
		}
		if tc, sc := c.counts(); tc != 3 || sc != 3 {
			t.Fatalf("%d TokenReviews and %d SubjectAccessReviews, want 3 and 3 (two retried each)", tc, sc)
		}
	})
	t.Run("TokenReview unreachable for good", func(t *testing.T) {
		c := newCountingClient(t, admin)
		rv := NewReviewer(c)
		c.failTokens.Store(3)
		if got, _ := scrape(rv, log, s.Reader); got != 401 {
			t.Fatalf("the reader, its TokenReview failing: %d, want 401", got)
		}
		if tc, _ := c.counts(); tc != 3 {
			t.Fatalf("%d TokenReviews, want 3 (every attempt)", tc)
		}
		if got, _ := scrape(rv, log, s.Reader); got != 200 {
			t.Fatalf("the reader with the apiserver back: %d, want 200 (a failed review is not cached)", got)
		}
		if tc, sc := c.counts(); tc != 4 || sc != 1 {
			t.Fatalf("%d TokenReviews and %d SubjectAccessReviews, want 4 and 1", tc, sc)
		}
	})
	t.Run("SubjectAccessReview unreachable for good", func(t *testing.T) {
		c := newCountingClient(t, admin)
		rv := NewReviewer(c)
		c.failAccess.Store(3)
		if got, body := scrape(rv, log, s.Reader); got != 500 || !strings.Contains(body, "authorization could not be decided") {
			t.Fatalf("the reader, its SubjectAccessReview failing: %d %q, want 500", got, body)
		}
		if got, _ := scrape(rv, log, s.Reader); got != 200 {
			t.Fatalf("the reader with the apiserver back: %d, want 200 (a failed review is not cached)", got)
		}
		if tc, sc := c.counts(); tc != 1 || sc != 4 {
			t.Fatalf("%d TokenReviews and %d SubjectAccessReviews, want 1 (its answer cached) and 4 (three failed)", tc, sc)
		}
		if !strings.Contains(logs.String(), "could not authorize a /metrics request") {
			t.Errorf("the undecided authorization was not logged:\n%s", logs.String())
		}
	})
	t.Run("refused by the apiserver", func(t *testing.T) {
		// The nobody may not create TokenReviews: the apiserver answers
		// 403 however often it is asked.
		cfg, err := deployrbac.ServiceAccountConfig(context.Background(), admin, s.Namespace, "nobody")
		if err != nil {
			t.Fatal(err)
		}
		c := newCountingClient(t, cfg)
		rv := NewReviewer(c)
		for i := range 2 {
			if got, _ := scrape(rv, log, s.Reader); got != 401 {
				t.Fatalf("request %d, the reviewer refused TokenReviews: %d, want 401", i+1, got)
			}
			if tc, _ := c.counts(); tc != int32(i+1) {
				t.Fatalf("after request %d: %d TokenReviews, want %d (a 403 is not retried, nor cached)", i+1, tc, i+1)
			}
		}
		if !strings.Contains(logs.String(), "forbidden") {
			t.Errorf("the refusal's reason (forbidden) was not logged:\n%s", logs.String())
		}
	})
}
