// Package metricsauth is the secure /metrics filter of the hub and the
// agent: a request's bearer token must pass a TokenReview and its identity
// a SubjectAccessReview for the non-resource URL, both against the
// process's own apiserver, with their answers cached.
//
// The reviews are created through a kclient.Client, not client-go's
// typed clients: those link client-go's scheme of every API group, which
// an agent without controller-runtime does not carry (docs/architecture.md,
// "Executable size"). The caller builds the client, a direct client
// (pkg/kclient/direct) with a scheme that knows the review types
// (Scheme, AddToScheme), and this package links neither controller-runtime
// nor k8s.io/client-go/kubernetes; pkg/kclient's tests check it.
package metricsauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// How long a review's answer is reused, as the delegating authenticator
// and authorizer of k8s.io/apiserver were configured here before: a
// token's answer, accepted or refused, for a minute; an allowed identity
// five minutes, a denied one 30 s. At most reviewCacheSize answers of each kind
// are kept: made-up tokens cannot grow the process.
const (
	acceptedTokenTTL = time.Minute
	refusedTokenTTL  = time.Minute
	allowedTTL       = 5 * time.Minute
	deniedTTL        = 30 * time.Second
	reviewCacheSize  = 4096
	reviewTimeout    = 10 * time.Second
)

// reviewBackoff retries a review that failed to reach the apiserver (or
// that it could not answer: 429, 5xx).
var reviewBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// AddToScheme registers the two review kinds, TokenReview
// (authentication.k8s.io/v1) and SubjectAccessReview
// (authorization.k8s.io/v1), in s: a direct client built on s can then
// create them.
func AddToScheme(s *runtime.Scheme) error {
	if err := authnv1.AddToScheme(s); err != nil {
		return err
	}
	return authzv1.AddToScheme(s)
}

// Scheme is a scheme of the review kinds only, for a direct client that
// does nothing but review /metrics requests.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		// Registering generated types in a new scheme cannot fail but for
		// a programming error.
		panic(err)
	}
	return s
}

// Reviewer authenticates and authorizes /metrics requests (see Wrap).
// The handlers one Reviewer wraps share its answers.
type Reviewer struct {
	client  kclient.Client
	idents  *answerCache[identity]
	answers *answerCache[decision]
	now     func() time.Time
}

// NewReviewer returns a Reviewer that creates its TokenReviews and
// SubjectAccessReviews with c, whose scheme must know them
// (AddToScheme). c's identity needs create on tokenreviews and
// subjectaccessreviews (the agent's and the hub's RBAC grant it).
func NewReviewer(c kclient.Client) *Reviewer {
	return &Reviewer{
		client:  c,
		idents:  newAnswerCache[identity](reviewCacheSize),
		answers: newAnswerCache[decision](reviewCacheSize),
		now:     time.Now,
	}
}

// NewFilter returns a filter that lets through to next only the requests
// a new Reviewer on c passes, logging refusals to log. The handlers it
// wraps share one Reviewer.
func NewFilter(c kclient.Client, log logr.Logger) func(next http.Handler) http.Handler {
	rv := NewReviewer(c)
	return func(next http.Handler) http.Handler { return rv.Wrap(log, next) }
}

// Wrap lets through to next only the requests whose bearer token the
// apiserver authenticates and whose identity it authorizes for the
// request's verb (its method, lower case) on its path.
//
// It answers like kube-apiserver does: 401 for any request it cannot
// authenticate (no token, a token of another cluster, a made-up or
// expired one; controller-runtime's filter answers 500 when the
// TokenReview carries an error, which is how the apiserver rejects an
// invalid token, and a scraper's operator would then look for a server
// fault), 403 for an identity not allowed /metrics, 500 only when the
// authorization could not be decided.
//
// It is the two reviews, written here rather than taken from
// k8s.io/apiserver's delegating authenticator and authorizer: those bring
// some 185 packages (CEL, OpenTelemetry, component-base) into both
// binaries for two API calls, and the agent's memory is mostly its
// binary's pages (docs/benchmarks.md).
func (rv *Reviewer) Wrap(log logr.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		id, err := rv.authenticate(req.Context(), req)
		if err != nil {
			if errors.Is(err, errNoToken) {
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
				return
			}
			log.Info("refused a /metrics request: its token was not accepted", "remote", req.RemoteAddr, "reason", err.Error())
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		verb := strings.ToLower(req.Method)
		d, err := rv.authorize(req.Context(), id, verb, req.URL.Path)
		if err != nil {
			log.Error(err, "could not authorize a /metrics request", "user", id.user.Username)
			http.Error(w, "authorization could not be decided", http.StatusInternalServerError)
			return
		}
		if !d.allowed {
			http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, path=%s): %s", id.user.Username, verb, req.URL.Path, d.reason), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// identity is a TokenReview's answer: the user, or why the token was
// refused (user unset).
type identity struct {
	user    authnv1.UserInfo
	refused string
}

// decision is a SubjectAccessReview's answer.
type decision struct {
	allowed bool
	reason  string
}

// authenticatedGroup is the group of every authenticated user.
const authenticatedGroup = "system:authenticated"

// errNoToken is a request without a bearer token.
var errNoToken = errors.New("no bearer token")

// bearerToken is the token of an "Authorization: Bearer <token>" header,
// as kube-apiserver reads it.
func bearerToken(req *http.Request) (string, bool) {
	parts := strings.SplitN(strings.TrimSpace(req.Header.Get("Authorization")), " ", 3)
	if len(parts) < 2 || !strings.EqualFold(parts[0], "bearer") || parts[1] == "" {
		return "", false
	}
	return parts[1], true
}

// create creates review with rv's client, retried as retryReview says,
// each attempt within reviewTimeout. The apiserver's answer, status
// included, is decoded back into review. No field manager is sent: a
// review is not stored.
func (rv *Reviewer) create(ctx context.Context, review kclient.Object) error {
	return retryReview(func() error {
		ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
		defer cancel()
		return rv.client.Create(ctx, review, "")
	})
}

// authenticate returns the identity of req's bearer token, or an error
// saying why it has none.
func (rv *Reviewer) authenticate(ctx context.Context, req *http.Request) (identity, error) {
	token, ok := bearerToken(req)
	if !ok {
		return identity{}, errNoToken
	}
	// The key is the token's hash: the cache holds no credential.
	key := fmt.Sprintf("%x", sha256.Sum256([]byte(token)))
	id, ok := rv.idents.get(key, rv.now())
	if !ok {
		answer := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}
		if err := rv.create(ctx, answer); err != nil {
			// Not cached: the next request asks again.
			return identity{}, fmt.Errorf("the TokenReview failed: %w", err)
		}
		ttl := acceptedTokenTTL
		if answer.Status.Authenticated {
			id = identity{user: answer.Status.User}
			// As kube's authenticators do for every authenticated user.
			if !slices.Contains(id.user.Groups, authenticatedGroup) {
				id.user.Groups = append(slices.Clone(id.user.Groups), authenticatedGroup)
			}
		} else {
			ttl = refusedTokenTTL
			id = identity{refused: answer.Status.Error}
			if id.refused == "" {
				id.refused = "the apiserver did not authenticate the token"
			}
		}
		rv.idents.put(key, id, rv.now(), ttl)
	}
	if id.refused != "" {
		return identity{}, errors.New(id.refused)
	}
	return id, nil
}

// authorize asks whether id may verb the non-resource path.
func (rv *Reviewer) authorize(ctx context.Context, id identity, verb, path string) (decision, error) {
	extra := make(map[string]authzv1.ExtraValue, len(id.user.Extra))
	for k, v := range id.user.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	spec := authzv1.SubjectAccessReviewSpec{
		User: id.user.Username, UID: id.user.UID, Groups: id.user.Groups, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: verb},
	}
	key := accessKey(spec)
	if d, ok := rv.answers.get(key, rv.now()); ok {
		return d, nil
	}
	answer := &authzv1.SubjectAccessReview{Spec: spec}
	if err := rv.create(ctx, answer); err != nil {
		return decision{}, fmt.Errorf("the SubjectAccessReview failed: %w", err)
	}
	d := decision{allowed: answer.Status.Allowed && !answer.Status.Denied, reason: answer.Status.Reason}
	if !d.allowed && answer.Status.EvaluationError != "" && d.reason == "" {
		d.reason = answer.Status.EvaluationError
	}
	ttl := allowedTTL
	if !d.allowed {
		ttl = deniedTTL
	}
	rv.answers.put(key, d, rv.now(), ttl)
	return d, nil
}

// accessKey identifies a SubjectAccessReview's question: the whole
// identity and the request, with groups and extra values in their order
// and extra keys sorted.
func accessKey(s authzv1.SubjectAccessReviewSpec) string {
	var b strings.Builder
	field := func(v string) { fmt.Fprintf(&b, "%d:%s;", len(v), v) }
	field(s.User)
	field(s.UID)
	field(s.NonResourceAttributes.Verb)
	field(s.NonResourceAttributes.Path)
	fmt.Fprintf(&b, "g%d;", len(s.Groups))
	for _, g := range s.Groups {
		field(g)
	}
	keys := make([]string, 0, len(s.Extra))
	for k := range s.Extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		field(k)
		fmt.Fprintf(&b, "v%d;", len(s.Extra[k]))
		for _, v := range s.Extra[k] {
			field(v)
		}
	}
	return b.String()
}

// retryReview calls create until it succeeds, fails for good (a 4xx other
// than 429: asking again gets the same answer), or reviewBackoff runs out.
func retryReview(create func() error) error {
	return retry.OnError(reviewBackoff, func(err error) bool {
		var status apierrors.APIStatus
		if !errors.As(err, &status) {
			return true // the apiserver was not reached
		}
		code := status.Status().Code
		return code == http.StatusTooManyRequests || code >= 500 || code == 0
	}, create)
}

// answerCache keeps answers until they expire, at most size of them: a
// put into a full cache first drops the expired answers and, if none
// were, every answer (a flood of new tokens then costs reviews, not
// memory).
type answerCache[T any] struct {
	mu      sync.Mutex
	size    int
	entries map[string]cached[T]
}

type cached[T any] struct {
	value   T
	expires time.Time
}

func newAnswerCache[T any](size int) *answerCache[T] {
	return &answerCache[T]{size: size, entries: map[string]cached[T]{}}
}

func (c *answerCache[T]) get(key string, now time.Time) (T, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || !now.Before(e.expires) {
		var zero T
		return zero, false
	}
	return e.value, true
}

// put keeps value for key from now for ttl.
func (c *answerCache[T]) put(key string, value T, now time.Time, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[key]; !ok && len(c.entries) >= c.size {
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= c.size {
			clear(c.entries)
		}
	}
	c.entries[key] = cached[T]{value: value, expires: now.Add(ttl)}
}

// len is how many answers the cache holds.
func (c *answerCache[T]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
