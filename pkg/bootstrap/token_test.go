package bootstrap

import (
	"errors"
	"strings"
	"testing"
	"time"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func TestParseToken(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"abcdef.0123456789abcdef", true},
		{"abcdef.0123456789abcde", false},   // secret too short
		{"abcdef.0123456789abcdefg", false}, // secret too long
		{"ABCDEF.0123456789abcdef", false},  // upper case
		{"abcdef0123456789abcdef", false},   // no dot
		{"abcde.0123456789abcdefg", false},  // id too short
		{" abcdef.0123456789abcdef", false}, // spaces are not trimmed
		{"", false},
	} {
		tok, err := ParseToken(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParseToken(%q) error %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if tc.ok && tok.String() != tc.in {
			t.Errorf("ParseToken(%q).String() = %q", tc.in, tok.String())
		}
		if !tc.ok && !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseToken(%q) error %v is not ErrMalformed", tc.in, err)
		}
	}
}

func TestNewTokenParses(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		tok, err := NewToken()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseToken(tok.String()); err != nil {
			t.Fatalf("NewToken made %q: %v", tok, err)
		}
		if seen[tok.ID] {
			t.Fatalf("token id %s made twice in 100 tokens", tok.ID)
		}
		seen[tok.ID] = true
	}
}

func TestCheck(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tok := Token{ID: "abcdef", Secret: "0123456789abcdef"}
	other := Token{ID: "abcdef", Secret: "fedcba9876543210"}
	fresh := func(opts Options) func() *Options { return func() *Options { return &opts } }
	for _, tc := range []struct {
		name    string
		opts    func() *Options // nil: no Secret
		used    []string
		present Token
		at      time.Time
		want    error
	}{
		{name: "valid multi-use", opts: fresh(Options{TTL: time.Hour}), present: tok, at: now},
		{name: "valid forever", opts: fresh(Options{}), present: tok, at: now.Add(1000 * time.Hour)},
		{name: "no such token", present: tok, at: now, want: ErrUnknown},
		{name: "wrong secret", opts: fresh(Options{}), present: other, at: now, want: ErrMismatch},
		{name: "expired", opts: fresh(Options{TTL: time.Hour}), present: tok, at: now.Add(time.Hour), want: ErrExpired},
		{name: "expired and wrong secret says mismatch", opts: fresh(Options{TTL: time.Hour}), present: other, at: now.Add(2 * time.Hour), want: ErrMismatch},
		{name: "single use, unused", opts: fresh(Options{SingleUse: true}), present: tok, at: now},
		{name: "single use, used", opts: fresh(Options{SingleUse: true}), used: []string{"m1"}, present: tok, at: now, want: ErrUsed},
		{name: "multi use, used twice", opts: fresh(Options{}), used: []string{"m1", "m2"}, present: tok, at: now},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var info Info
			var err error
			if tc.opts == nil {
				info, err = Check(nil, tc.present, "m9", tc.at)
			} else {
				s := NewSecret("flotilla-system", tok, *tc.opts(), now)
				for _, u := range tc.used {
					MarkUsed(s, u)
				}
				info, err = Check(s, tc.present, "m9", tc.at)
			}
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				if info.ID != tok.ID {
					t.Errorf("info.ID = %q", info.ID)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Check error %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tok.ID) {
				t.Errorf("error %q does not name the token id", err)
			}
			if strings.Contains(err.Error(), tok.Secret) || strings.Contains(err.Error(), other.Secret) {
				t.Errorf("error %q shows a secret", err)
			}
		})
	}
}

func TestSecretRoundTrip(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tok := Token{ID: "x1y2z3", Secret: "0123456789abcdef"}
	s := NewSecret("flotilla-system", tok, Options{TTL: 2 * time.Hour, SingleUse: true, AutoAccept: true, Description: "ci", Labels: map[string]string{"env": "dev", "a": "b"}}, now)
	if s.Name != flotillav1.BootstrapTokenSecretPrefix+tok.ID || string(s.Type) != flotillav1.BootstrapTokenSecretType {
		t.Fatalf("secret %s of type %s", s.Name, s.Type)
	}
	for k, v := range s.Data {
		if strings.Contains(string(v), tok.Secret) {
			t.Fatalf("data %s holds the plain secret", k)
		}
	}
	MarkUsed(s, "m1")
	MarkUsed(s, "m1")
	info, err := ReadSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != tok.ID || !info.SingleUse || !info.AutoAccept || info.Description != "ci" ||
		info.Expiration == nil || !info.Expiration.Equal(now.Add(2*time.Hour)) ||
		len(info.UsedBy) != 1 || info.UsedBy[0] != "m1" || info.Labels["env"] != "dev" || info.Labels["a"] != "b" {
		t.Fatalf("ReadSecret = %+v", info)
	}
	// A Secret renamed by hand no longer matches its id.
	s.Name = flotillav1.BootstrapTokenSecretPrefix + "zzzzzz"
	if _, err := ReadSecret(s); err == nil || !strings.Contains(err.Error(), "token-id") {
		t.Fatalf("renamed secret: %v", err)
	}
}

func TestParseLabels(t *testing.T) {
	got, err := ParseLabels("b=2,a=1")
	if err != nil || FormatLabels(got) != "a=1,b=2" {
		t.Fatalf("ParseLabels: %v %v", got, err)
	}
	if _, err := ParseLabels("a=1,b"); err == nil || !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("ParseLabels(a=1,b): %v", err)
	}
}
