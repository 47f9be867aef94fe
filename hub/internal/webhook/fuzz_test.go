package webhook

import (
	"strings"
	"testing"
	"unicode"
)

func FuzzValidImage(f *testing.F) {
	for _, s := range []string{
		"nginx", "nginx:1.25", "registry.example.com:5000/team/web:1.2@" + digest, "localhost/web",
		"", " ", "web :1", "web\n", "web\u00a0", "web\u2028", "Web", "a//b", "web@sha256:abc", "web:" + strings.Repeat("t", 129),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !ValidImage(s) {
			return
		}
		if strings.IndexFunc(s, unicode.IsSpace) >= 0 {
			t.Errorf("ValidImage accepted %q, which contains white space", s)
		}
		if len(s) > 512 {
			t.Errorf("ValidImage accepted %d bytes, over the CRD's 512", len(s))
		}
		// Repository path components are lower case: only the host part
		// (before the first slash, when it has one) may have upper case.
		name := s
		if i := strings.IndexAny(name, "@"); i >= 0 {
			name = name[:i]
		}
		if i := strings.Index(name, "/"); i >= 0 {
			name = name[i+1:]
		} else if i := strings.Index(name, ":"); i >= 0 {
			name = name[:i]
		}
		if i := strings.LastIndex(name, ":"); i >= 0 {
			name = name[:i]
		}
		if strings.ToLower(name) != name {
			t.Errorf("ValidImage accepted %q, whose repository %q has upper case", s, name)
		}
	})
}
