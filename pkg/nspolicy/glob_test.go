package nspolicy

import (
	"regexp"
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"team-a", "team-a", true},
		{"team-a", "team-ab", false},
		{"team-a", "team-", false},
		{"team-*", "team-a", true},
		{"team-*", "team-", true},
		{"team-*", "team", false},
		{"*", "", true},
		{"*", "kube-system", true},
		{"", "", true},
		{"", "a", false},
		{"?", "a", true},
		{"?", "", false},
		{"?", "ab", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"*-prod", "payments-prod", true},
		{"*-prod", "payments-prod-eu", false},
		{"a*a*a*a*b", strings.Repeat("a", 60), false},
		{"kube-*", "kube-system", true},
		{"kube-*", "default", false},
	} {
		if got := Match(tc.pattern, tc.name); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

func TestValidatePattern(t *testing.T) {
	for _, ok := range []string{"a", "team-*", "*", "?-x", strings.Repeat("a", 63)} {
		if err := ValidatePattern(ok); err != nil {
			t.Errorf("ValidatePattern(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "Team", "a/b", "a[b]", "a.b", strings.Repeat("a", 64), "a b"} {
		if err := ValidatePattern(bad); err == nil {
			t.Errorf("ValidatePattern(%q) = nil, want an error", bad)
		}
	}
}

func TestParsePatterns(t *testing.T) {
	got, err := ParsePatterns("allowed-namespaces", " team-*, ,shared ")
	if err != nil || len(got) != 2 || got[0] != "team-*" || got[1] != "shared" {
		t.Fatalf("ParsePatterns = %q, %v; want [team-* shared], nil", got, err)
	}
	_, err = ParsePatterns("allowed-namespaces", "ok,Bad")
	if err == nil || !strings.Contains(err.Error(), "--allowed-namespaces") || !strings.Contains(err.Error(), `"Bad"`) {
		t.Fatalf("ParsePatterns error = %v; want one naming the flag and the pattern", err)
	}
}

// globRegexp is the reference semantics: '*' is .*, '?' is ., the rest
// literal, anchored.
func globRegexp(pattern string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for _, r := range pattern {
		switch r {
		case '*':
			b.WriteString("(?s:.*)")
		case '?':
			b.WriteString("(?s:.)")
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// FuzzMatch checks Match against the regular-expression reference on
// byte strings (Match works on bytes; the reference on single-byte runes
// when both are ASCII, which is all a namespace can hold).
func FuzzMatch(f *testing.F) {
	f.Add("team-*", "team-a")
	f.Add("a*b?c", "axxbyc")
	f.Add("*", "")
	f.Add("a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaa")
	// Found by the fuzzer in CI: a '*' in the name must not be taken as
	// the pattern's literal '*'.
	f.Add("*", "*0")
	f.Add("a*", "a*b")
	f.Fuzz(func(t *testing.T, pattern, name string) {
		if !isASCII(pattern) || !isASCII(name) || len(pattern) > 64 || len(name) > 64 {
			return
		}
		want := globRegexp(pattern).MatchString(name)
		if got := Match(pattern, name); got != want {
			t.Fatalf("Match(%q, %q) = %v, the reference says %v", pattern, name, got, want)
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
