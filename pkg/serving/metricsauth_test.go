package serving

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestBearerToken(t *testing.T) {
	for _, c := range []struct {
		header string
		token  string
		ok     bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"  BEARER abc  ", "abc", true},
		{"Bearer abc extra", "abc", true},
		{"", "", false},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Basic dXNlcjpwYXNz", "", false},
		{"abc", "", false},
	} {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if c.header != "" {
			req.Header.Set("Authorization", c.header)
		}
		token, ok := bearerToken(req)
		if token != c.token || ok != c.ok {
			t.Errorf("Authorization %q: token %q, %v; want %q, %v", c.header, token, ok, c.token, c.ok)
		}
	}
}

// Two questions get the same key only when every part of them is the
// same; a value cannot pass for the next field's.
func TestAccessKeyTellsQuestionsApart(t *testing.T) {
	base := authzv1.SubjectAccessReviewSpec{
		User: "u", UID: "1", Groups: []string{"a", "b"},
		Extra:                 map[string]authzv1.ExtraValue{"k": {"v"}, "j": {"w"}},
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
	}
	same := *base.DeepCopy()
	same.Extra = map[string]authzv1.ExtraValue{"j": {"w"}, "k": {"v"}}
	if accessKey(base) != accessKey(same) {
		t.Errorf("the same question (extra keys in another map order) got two keys")
	}
	variants := map[string]func(*authzv1.SubjectAccessReviewSpec){
		"user":           func(s *authzv1.SubjectAccessReviewSpec) { s.User = "v" },
		"uid":            func(s *authzv1.SubjectAccessReviewSpec) { s.UID = "2" },
		"a group less":   func(s *authzv1.SubjectAccessReviewSpec) { s.Groups = []string{"a"} },
		"groups joined":  func(s *authzv1.SubjectAccessReviewSpec) { s.Groups = []string{"a;b"} },
		"an extra value": func(s *authzv1.SubjectAccessReviewSpec) { s.Extra["k"] = authzv1.ExtraValue{"x"} },
		"path":           func(s *authzv1.SubjectAccessReviewSpec) { s.NonResourceAttributes.Path = "/metrics/x" },
		"verb":           func(s *authzv1.SubjectAccessReviewSpec) { s.NonResourceAttributes.Verb = "post" },
		"user into uid":  func(s *authzv1.SubjectAccessReviewSpec) { s.User, s.UID = "u1", "" },
	}
	for name, change := range variants {
		v := *base.DeepCopy()
		change(&v)
		if accessKey(v) == accessKey(base) {
			t.Errorf("%s changed: same key %q", name, accessKey(v))
		}
	}
}

func TestAnswerCacheExpiresAndStaysBounded(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	c := newAnswerCache[int](3)
	c.put("a", 1, t0, time.Minute)
	if v, ok := c.get("a", t0.Add(59*time.Second)); !ok || v != 1 {
		t.Fatalf("within its TTL: %v, %v; want 1, true", v, ok)
	}
	if _, ok := c.get("a", t0.Add(time.Minute)); ok {
		t.Fatalf("an answer is served at the end of its TTL")
	}
	c.put("b", 2, t0, time.Second)
	c.put("c", 3, t0, time.Hour)
	// Full (a, b, c): a put at t0+2s drops the expired b only.
	c.put("d", 4, t0.Add(2*time.Second), time.Hour)
	if n := c.len(); n != 3 {
		t.Fatalf("after dropping the expired: %d answers, want 3 (a, c, d)", n)
	}
	if _, ok := c.get("c", t0.Add(2*time.Second)); !ok {
		t.Fatalf("an unexpired answer was dropped while an expired one could go")
	}
	// Full of unexpired answers: a new key clears them all.
	c2 := newAnswerCache[int](3)
	for i := range 10 * 3 {
		c2.put(fmt.Sprint(i), i, t0, time.Hour)
		if n := c2.len(); n > 3 {
			t.Fatalf("%d answers in a cache of 3", n)
		}
	}
	// A key already held is replaced in place, full or not.
	c2.put("29", 99, t0, time.Hour)
	if v, _ := c2.get("29", t0); v != 99 {
		t.Fatalf("replaced answer %d, want 99", v)
	}
}

// fakeReviews is an apiserver that answers TokenReviews and
// SubjectAccessReviews from tables and counts them.
type fakeReviews struct {
	users      map[string]authnv1.UserInfo // token -> user
	allowed    map[string]bool             // user -> may get /metrics
	failTokens atomic.Int32                // TokenReviews to fail with 503 first
	failWith   error                       // instead of 503, when set
	tokenCalls atomic.Int32
	sarCalls   atomic.Int32
	lastGroups []string
}

func (f *fakeReviews) reviewer(now func() time.Time) *reviewer {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.tokenCalls.Add(1)
		if f.failTokens.Load() > 0 {
			f.failTokens.Add(-1)
			if f.failWith != nil {
				return true, nil, f.failWith
			}
			return true, nil, apierrors.NewServiceUnavailable("starting")
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
		if u, ok := f.users[tr.Spec.Token]; ok {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: u}
		} else {
			tr.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, tr, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.sarCalls.Add(1)
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview).DeepCopy()
		f.lastGroups = sar.Spec.Groups
		ok := f.allowed[sar.Spec.User] && sar.Spec.NonResourceAttributes != nil && sar.Spec.NonResourceAttributes.Path == "/metrics"
		sar.Status = authzv1.SubjectAccessReviewStatus{Allowed: ok}
		if !ok {
			sar.Status.Reason = "no RBAC policy matched"
		}
		return true, sar, nil
	})
	return &reviewer{
		tokens:  cs.AuthenticationV1().TokenReviews(),
		access:  cs.AuthorizationV1().SubjectAccessReviews(),
		idents:  newAnswerCache[identity](reviewCacheSize),
		answers: newAnswerCache[decision](reviewCacheSize),
		now:     now,
	}
}

func serve(rv *reviewer, token string) int {
	h, err := rv.filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))
	if err != nil {
		panic(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

// Answers are reused within their TTL and asked again after it; a
// denial is cached for less time than an allowance; the authenticated
// group is added; a review that cannot reach the apiserver is retried
// and, when it fails for good, not cached.
func TestReviewerCachesAnswersForTheirTTL(t *testing.T) {
	orig := reviewBackoff
	reviewBackoff = wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 3}
	defer func() { reviewBackoff = orig }()

	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	f := &fakeReviews{
		users: map[string]authnv1.UserInfo{
			"scraper-token": {Username: "system:serviceaccount:monitoring:prometheus", Groups: []string{"system:serviceaccounts"}},
			"nobody-token":  {Username: "system:serviceaccount:default:nobody"},
		},
		allowed: map[string]bool{"system:serviceaccount:monitoring:prometheus": true},
	}
	rv := f.reviewer(clock)

	for _, c := range []struct {
		token string
		want  int
	}{{"", 401}, {"made-up", 401}, {"nobody-token", 403}, {"scraper-token", 200}} {
		if got := serve(rv, c.token); got != c.want {
			t.Fatalf("token %q: %d, want %d", c.token, got, c.want)
		}
	}
	if got := f.tokenCalls.Load(); got != 3 {
		t.Fatalf("%d TokenReviews for 3 tokens (and a request without one), want 3", got)
	}
	if !strings.Contains(strings.Join(f.lastGroups, ","), authenticatedGroup) {
		t.Fatalf("the SubjectAccessReview asked for groups %v, without %s", f.lastGroups, authenticatedGroup)
	}

	// Within every TTL: no new review.
	now = now.Add(9 * time.Second)
	for _, tok := range []string{"made-up", "nobody-token", "scraper-token"} {
		serve(rv, tok)
	}
	if tc, sc := f.tokenCalls.Load(), f.sarCalls.Load(); tc != 3 || sc != 2 {
		t.Fatalf("within the TTLs: %d TokenReviews and %d SubjectAccessReviews, want 3 and 2 (answers reused)", tc, sc)
	}
	// 31 s: the denied identity is asked again, the allowed one is not.
	now = now.Add(22 * time.Second)
	serve(rv, "nobody-token")
	serve(rv, "scraper-token")
	if tc, sc := f.tokenCalls.Load(), f.sarCalls.Load(); tc != 3 || sc != 3 {
		t.Fatalf("after 31 s: %d TokenReviews and %d SubjectAccessReviews, want 3 and 3 (only the denial expired)", tc, sc)
	}
	// 61 s: the tokens' answers, accepted or refused, expired; the
	// allowed identity's has not.
	now = now.Add(30 * time.Second)
	serve(rv, "made-up")
	serve(rv, "scraper-token")
	if tc, sc := f.tokenCalls.Load(), f.sarCalls.Load(); tc != 5 || sc != 3 {
		t.Fatalf("after 61 s: %d TokenReviews and %d SubjectAccessReviews, want 5 and 3 (the tokens asked again)", tc, sc)
	}

	// The apiserver unavailable twice, then back: retried, then served.
	f.failTokens.Store(2)
	before := f.tokenCalls.Load()
	if got := serve(rv, "new-scraper-token-unknown"); got != 401 {
		t.Fatalf("an unknown token after two 503s: %d, want 401", got)
	}
	if got := f.tokenCalls.Load() - before; got != 3 {
		t.Fatalf("%d TokenReview calls for one request after two 503s, want 3 (two retried)", got)
	}
	// Unavailable for longer than the retries: 401, and not cached.
	f.users["late-token"] = f.users["scraper-token"]
	f.failTokens.Store(3)
	if got := serve(rv, "late-token"); got != 401 {
		t.Fatalf("the apiserver unreachable: %d, want 401", got)
	}
	if got := serve(rv, "late-token"); got != 200 {
		t.Fatalf("the apiserver back: %d, want 200 (a failed review is not cached)", got)
	}
	// A 4xx is not retried.
	f.failWith = apierrors.NewBadRequest("no")
	f.failTokens.Store(1)
	before = f.tokenCalls.Load()
	serve(rv, "yet-another-token")
	if got := f.tokenCalls.Load() - before; got != 1 {
		t.Fatalf("%d TokenReview calls after a 400, want 1 (not retried)", got)
	}
}

func TestRetryReviewRetriesOnlyWhatMayPass(t *testing.T) {
	orig := reviewBackoff
	reviewBackoff = wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 4}
	defer func() { reviewBackoff = orig }()
	gr := schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}
	for name, c := range map[string]struct {
		err   error
		calls int
	}{
		"network":    {errors.New("connection refused"), 4},
		"deadline":   {context.DeadlineExceeded, 4},
		"429":        {apierrors.NewTooManyRequests("slow down", 1), 4},
		"500":        {apierrors.NewInternalError(errors.New("x")), 4},
		"503":        {apierrors.NewServiceUnavailable("x"), 4},
		"403":        {apierrors.NewForbidden(gr, "", errors.New("x")), 1},
		"400":        {apierrors.NewBadRequest("x"), 1},
		"401":        {apierrors.NewUnauthorized("x"), 1},
		"no failure": {nil, 1},
	} {
		calls := 0
		err := retryReview(func() error { calls++; return c.err })
		if calls != c.calls || !errors.Is(err, c.err) && err != c.err {
			t.Errorf("%s: %d calls, error %v; want %d calls and the error", name, calls, err, c.calls)
		}
	}
}
