package truncate

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	tests := []struct {
		name string
		s    string
		max  int
		want string
	}{
		{"empty", "", 10, ""},
		{"shorter than max", "abc", 10, "abc"},
		{"exactly max", "abcdefghij", 10, "abcdefghij"},
		{"one byte over", "abcdefghijk", 10, "abcdef ..."},
		{"much longer", strings.Repeat("x", 100), 8, "xxxx ..."},
		// "é" is 2 bytes: 6 bytes fit before the marker, that is 3 whole é.
		{"two-byte characters, cut on a boundary", strings.Repeat("é", 10), 10, "ééé ..."},
		// 7 bytes before the marker would end inside the fourth é.
		{"two-byte character across the cut", strings.Repeat("é", 10), 11, "ééé ..."},
		// "€" is 3 bytes; 6 bytes before the marker hold 2, 7 and 8 too.
		{"three-byte characters", strings.Repeat("€", 10), 10, "€€ ..."},
		{"three-byte character one byte in", strings.Repeat("€", 10), 11, "€€ ..."},
		{"three-byte character two bytes in", strings.Repeat("€", 10), 12, "€€ ..."},
		{"three-byte character whole", strings.Repeat("€", 10), 13, "€€€ ..."},
		// "🚢" is 4 bytes: 6 bytes before the marker hold "a" and one.
		{"four-byte character across the cut", "a🚢🚢🚢", 10, "a🚢 ..."},
		{"four-byte character fits", "a🚢🚢🚢", 9, "a🚢 ..."},
		{"mixed widths", "ab€🚢c", 9, "ab€ ..."},
		{"mixed widths, cut inside the four-byte character", "ab€🚢cd", 10, "ab€ ..."},
		{"max only holds the marker", "abcdef", 4, " ..."},
		{"max smaller than the marker", "abcdef", 3, "abc"},
		{"max smaller than the marker, multi-byte", "€€", 3, "€"},
		{"max smaller than the marker, no whole character", "€€", 2, ""},
		{"zero max", "abc", 0, ""},
		{"negative max", "abc", -1, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := String(tc.s, tc.max)
			if got != tc.want {
				t.Errorf("String(%q, %d) = %q, want %q", tc.s, tc.max, got, tc.want)
			}
			if max := max(tc.max, 0); len(got) > max {
				t.Errorf("String(%q, %d) is %d bytes, more than %d", tc.s, tc.max, len(got), max)
			}
			if utf8.ValidString(tc.s) && !utf8.ValidString(got) {
				t.Errorf("String(%q, %d) = %q is not valid UTF-8", tc.s, tc.max, got)
			}
		})
	}
}

// FuzzString checks String's promises on any input: never longer than
// max, a prefix of s, marked when cut, and valid UTF-8 kept valid.
func FuzzString(f *testing.F) {
	f.Add("héllo wörld €🚢", 7)
	f.Add(strings.Repeat("é", 20), 11)
	f.Fuzz(func(t *testing.T, s string, max int) {
		max %= 64
		got := String(s, max)
		if len(s) <= max {
			if got != s {
				t.Fatalf("String(%q, %d) = %q, want s unchanged", s, max, got)
			}
			return
		}
		if len(got) > max && !(max < 0 && got == "") {
			t.Fatalf("String(%q, %d) = %q is longer than max", s, max, got)
		}
		if max >= len(Marker) && !strings.HasSuffix(got, Marker) {
			t.Fatalf("String(%q, %d) = %q lacks the marker", s, max, got)
		}
		if !strings.HasPrefix(s, strings.TrimSuffix(got, Marker)) {
			t.Fatalf("String(%q, %d) = %q is not a prefix of s", s, max, got)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("String(%q, %d) = %q is not valid UTF-8", s, max, got)
		}
	})
}
