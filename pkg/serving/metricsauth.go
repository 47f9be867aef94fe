package serving

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// metricsAuth is the secure /metrics filter: the request's bearer token
// must pass a TokenReview and its identity a SubjectAccessReview for the
// non-resource URL, both against the process's own apiserver (cached: an
// accepted token for a minute, an allowed identity five, a denied one 30 s).
//
// It answers like kube-apiserver does: 401 for any request it cannot
// authenticate (no token, a token of another cluster, a made-up or
// expired one; controller-runtime's filter answers 500 when the
// TokenReview carries an error, which is how the apiserver rejects an
// invalid token, and a scraper's operator would then look for a server
// fault), 403 for an identity not allowed /metrics, 500 only when the
// authorization could not be decided.
func metricsAuth(config *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	authn, err := authenticationv1.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, err
	}
	authz, err := authorizationv1.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, err
	}
	// Retries of a review that failed to reach the apiserver.
	backoff := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	authenticator, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		CacheTTL:                 time.Minute,
		TokenAccessReviewClient:  authn,
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("metrics authentication: %w", err)
	}
	authorize, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: authz,
		AllowCacheTTL:             5 * time.Minute,
		DenyCacheTTL:              30 * time.Second,
		WebhookRetryBackoff:       backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("metrics authorization: %w", err)
	}
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			res, ok, err := authenticator.AuthenticateRequest(req)
			if err != nil || !ok {
				if err != nil {
					log.Info("refused a /metrics request: its token was not accepted", "remote", req.RemoteAddr, "reason", err.Error())
				}
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
				return
			}
			attrs := authorizer.AttributesRecord{User: res.User, Verb: strings.ToLower(req.Method), Path: req.URL.Path}
			decision, reason, err := authorize.Authorize(req.Context(), attrs)
			if err != nil {
				log.Error(err, "could not authorize a /metrics request", "user", res.User.GetName())
				http.Error(w, "authorization could not be decided", http.StatusInternalServerError)
				return
			}
			if decision != authorizer.DecisionAllow {
				http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, path=%s): %s", res.User.GetName(), attrs.Verb, attrs.Path, reason), http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, req)
		}), nil
	}, nil
}
