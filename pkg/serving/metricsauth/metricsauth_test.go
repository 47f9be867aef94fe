package metricsauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
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
		"another group":  func(s *authzv1.SubjectAccessReviewSpec) { s.Groups = []string{"a", "c"} },
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

// A review is asked again only when the next attempt may get another
// answer: the apiserver was not reached, was busy (429) or failed (5xx).
// The errors are made up here; review_test.go sees the real ones (an
// unreachable apiserver, a 403) on the reviewer.
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
