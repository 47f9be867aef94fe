package bootstrap

import (
	"strings"
	"testing"
)

// FuzzParse checks the two decoders a joining agent's input goes through:
// a token that parses prints back as itself, and a CA hash that parses is
// canonical (parsing it again gives it back).
func FuzzParse(f *testing.F) {
	f.Add("abcdef.0123456789abcdef")
	f.Add("sha256:" + strings.Repeat("ab", 32))
	f.Add("SHA256:" + strings.Repeat("AB", 32))
	f.Add("a.b")
	f.Fuzz(func(t *testing.T, s string) {
		if tok, err := ParseToken(s); err == nil {
			if tok.String() != s || len(tok.ID) != 6 || len(tok.Secret) != 16 {
				t.Fatalf("ParseToken(%q) = %+v", s, tok)
			}
		}
		if h, err := ParseCAHash(s); err == nil {
			again, err := ParseCAHash(h)
			if err != nil || again != h || len(h) != len("sha256:")+64 {
				t.Fatalf("ParseCAHash(%q) = %q, again %q (%v)", s, h, again, err)
			}
		}
	})
}
