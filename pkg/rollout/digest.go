package rollout

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// Revision templates are kept in MyApp status between reconciles (a hub
// restart continues the rollout from there), and anyone who may write
// myapps/status could put a pod spec of their own there. The revision name
// is a plain content hash anybody can compute, so it proves nothing; the
// digest is an HMAC under a key only the hub holds (a Secret in its
// namespace), and Step drops every template whose digest does not verify
// before it renders anything.

// MinKeyBytes is the shortest revision key Step accepts.
const MinKeyBytes = 32

// Sign sets rt.Digest for key.
func Sign(rt *flotillav1.RevisionTemplate, key []byte) {
	rt.Digest = digest(rt, key)
}

// Verify reports whether rt.Digest is the digest of rt under key.
func Verify(rt *flotillav1.RevisionTemplate, key []byte) bool {
	got, err := hex.DecodeString(rt.Digest)
	if err != nil || len(got) != sha256.Size {
		return false
	}
	want, _ := hex.DecodeString(digest(rt, key))
	return hmac.Equal(got, want)
}

func digest(rt *flotillav1.RevisionTemplate, key []byte) string {
	// Everything but the digest itself, as JSON (encoding/json sorts map
	// keys, so the encoding is stable).
	raw, err := json.Marshal(struct {
		Name          string                       `json:"name"`
		Image         string                       `json:"image"`
		Template      *flotillav1.PodTemplate      `json:"template,omitempty"`
		MainContainer string                       `json:"mainContainer,omitempty"`
		Overrides     []flotillav1.ClusterOverride `json:"overrides,omitempty"`
	}{rt.Name, rt.Image, rt.Template, rt.MainContainer, rt.Overrides})
	if err != nil {
		panic(fmt.Sprintf("encoding a revision: %v", err))
	}
	m := hmac.New(sha256.New, key)
	_, _ = m.Write(raw)
	return hex.EncodeToString(m.Sum(nil))
}
