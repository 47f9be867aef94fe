package bootstrap

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// Keys of a token Secret's data.
const (
	KeyTokenID       = "token-id"
	KeySecretSHA256  = "token-secret-sha256"
	KeyExpiration    = "expiration"  // RFC 3339; empty: never expires
	KeyUsage         = "usage"       // "single" or "multi"
	KeyAutoAccept    = "auto-accept" // "true" or "false"
	KeyDescription   = "description"
	KeyUsedBy        = "used-by" // comma-separated cluster names that joined with it
	KeyLabels        = "labels"  // k=v,k=v put on MemberClusters joined with it
	UsageSingle      = "single"
	UsageMulti       = "multi"
	maxUsedByEntries = 1000
)

var (
	tokenRE = regexp.MustCompile(`^([a-z0-9]{6})\.([a-z0-9]{16})$`)
	idRE    = regexp.MustCompile(`^[a-z0-9]{6}$`)
)

// Errors a token check returns; each wraps into a message that names the
// token id and what to do.
var (
	ErrMalformed = errors.New("malformed bootstrap token")
	ErrUnknown   = errors.New("unknown bootstrap token")
	ErrExpired   = errors.New("bootstrap token expired")
	ErrUsed      = errors.New("single-use bootstrap token already used")
	ErrMismatch  = errors.New("bootstrap token secret does not match")
)

// Token is a parsed bootstrap token.
type Token struct {
	ID     string
	Secret string
}

// String is the token as a join command carries it.
func (t Token) String() string { return t.ID + "." + t.Secret }

// ParseToken parses <id>.<secret>.
func ParseToken(s string) (Token, error) {
	m := tokenRE.FindStringSubmatch(s)
	if m == nil {
		return Token{}, fmt.Errorf("%w: want <id>.<secret>, 6 and 16 characters of [a-z0-9]", ErrMalformed)
	}
	return Token{ID: m[1], Secret: m[2]}, nil
}

// ValidID says whether id can be a token id.
func ValidID(id string) bool { return idRE.MatchString(id) }

const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// NewToken makes a random token.
func NewToken() (Token, error) {
	b := make([]byte, 22)
	if _, err := rand.Read(b); err != nil {
		return Token{}, err
	}
	out := make([]byte, len(b))
	for i, c := range b {
		// 256 % 36 = 4: the bias is below 2 %, and 16 characters keep
		// over 80 bits of secret.
		out[i] = alphabet[int(c)%len(alphabet)]
	}
	return Token{ID: string(out[:6]), Secret: string(out[6:])}, nil
}

// SecretName is the name of token id's Secret.
func SecretName(id string) string { return flotillav1.BootstrapTokenSecretPrefix + id }

// Options describe a token to create.
type Options struct {
	// TTL is how long it is valid; 0: forever.
	TTL time.Duration
	// SingleUse: one cluster can join with it.
	SingleUse bool
	// AutoAccept: clusters joining with it are Accepted at once, without
	// `kubectl flotilla accept`.
	AutoAccept bool
	// Description is free text for `token list`.
	Description string
	// Labels go onto each MemberCluster joined with it.
	Labels map[string]string
}

// NewSecret returns the Secret that stores t with opts, in namespace ns.
func NewSecret(ns string, t Token, opts Options, now time.Time) *corev1.Secret {
	sum := sha256.Sum256([]byte(t.Secret))
	data := map[string][]byte{
		KeyTokenID:      []byte(t.ID),
		KeySecretSHA256: []byte(hex.EncodeToString(sum[:])),
		KeyUsage:        []byte(UsageMulti),
		KeyAutoAccept:   []byte(strconv.FormatBool(opts.AutoAccept)),
	}
	if opts.SingleUse {
		data[KeyUsage] = []byte(UsageSingle)
	}
	if opts.TTL > 0 {
		data[KeyExpiration] = []byte(now.Add(opts.TTL).UTC().Format(time.RFC3339))
	}
	if opts.Description != "" {
		data[KeyDescription] = []byte(opts.Description)
	}
	if len(opts.Labels) > 0 {
		data[KeyLabels] = []byte(FormatLabels(opts.Labels))
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretName(t.ID), Namespace: ns,
			Labels: map[string]string{"app.kubernetes.io/part-of": "flotilla"}},
		Type: corev1.SecretType(flotillav1.BootstrapTokenSecretType),
		Data: data,
	}
}

// Info is what a token Secret says, without the secret.
type Info struct {
	ID          string
	Expiration  *time.Time
	SingleUse   bool
	AutoAccept  bool
	Description string
	UsedBy      []string
	Labels      map[string]string
}

// ReadSecret reads a token Secret; an error names what is wrong with it.
func ReadSecret(s *corev1.Secret) (Info, error) {
	if string(s.Type) != flotillav1.BootstrapTokenSecretType {
		return Info{}, fmt.Errorf("secret %s is of type %q, not %s", s.Name, s.Type, flotillav1.BootstrapTokenSecretType)
	}
	info := Info{ID: string(s.Data[KeyTokenID])}
	if !ValidID(info.ID) || s.Name != SecretName(info.ID) {
		return Info{}, fmt.Errorf("secret %s: %s %q does not match its name", s.Name, KeyTokenID, info.ID)
	}
	if e := string(s.Data[KeyExpiration]); e != "" {
		t, err := time.Parse(time.RFC3339, e)
		if err != nil {
			return Info{}, fmt.Errorf("secret %s: %s: %w", s.Name, KeyExpiration, err)
		}
		info.Expiration = &t
	}
	switch u := string(s.Data[KeyUsage]); u {
	case UsageSingle:
		info.SingleUse = true
	case UsageMulti, "":
	default:
		return Info{}, fmt.Errorf("secret %s: %s %q is neither %s nor %s", s.Name, KeyUsage, u, UsageSingle, UsageMulti)
	}
	info.AutoAccept = string(s.Data[KeyAutoAccept]) == "true"
	info.Description = string(s.Data[KeyDescription])
	if u := string(s.Data[KeyUsedBy]); u != "" {
		info.UsedBy = strings.Split(u, ",")
	}
	labels, err := ParseLabels(string(s.Data[KeyLabels]))
	if err != nil {
		return Info{}, fmt.Errorf("secret %s: %s: %w", s.Name, KeyLabels, err)
	}
	info.Labels = labels
	return info, nil
}

// Check decides whether t, presented by a cluster joining as cluster,
// may join with the token Secret s (nil: no such Secret). It checks the
// secret in constant time, then expiry, then use. It does not change s:
// MarkUsed does, after the hub registered the cluster.
func Check(s *corev1.Secret, t Token, cluster string, now time.Time) (Info, error) {
	if s == nil {
		return Info{}, fmt.Errorf("%w %s: no such token on this hub (create one with `kubectl flotilla token create`)", ErrUnknown, t.ID)
	}
	info, err := ReadSecret(s)
	if err != nil {
		return Info{}, err
	}
	sum := sha256.Sum256([]byte(t.Secret))
	want, _ := hex.DecodeString(string(s.Data[KeySecretSHA256]))
	if subtle.ConstantTimeCompare(sum[:], want) != 1 {
		return Info{}, fmt.Errorf("%w for token %s", ErrMismatch, t.ID)
	}
	if info.Expiration != nil && !now.Before(*info.Expiration) {
		return Info{}, fmt.Errorf("%w: token %s expired at %s (create a new one)", ErrExpired, t.ID, info.Expiration.Format(time.RFC3339))
	}
	if info.SingleUse && len(info.UsedBy) > 0 {
		return Info{}, fmt.Errorf("%w: token %s was used by cluster %s (create a new one for %s)", ErrUsed, t.ID, info.UsedBy[0], cluster)
	}
	return info, nil
}

// MarkUsed records on s that cluster joined with it.
func MarkUsed(s *corev1.Secret, cluster string) {
	used := strings.Split(string(s.Data[KeyUsedBy]), ",")
	if used[0] == "" {
		used = nil
	}
	for _, u := range used {
		if u == cluster {
			return
		}
	}
	if len(used) >= maxUsedByEntries {
		used = used[1:]
	}
	used = append(used, cluster)
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	s.Data[KeyUsedBy] = []byte(strings.Join(used, ","))
}

// FormatLabels writes labels as k=v,k=v in key order.
func FormatLabels(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+labels[k])
	}
	return strings.Join(parts, ",")
}

// ParseLabels reads k=v,k=v; an empty string is no labels.
func ParseLabels(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("label %q is not key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}
