package truncate

import "unicode/utf8"

// Marker ends a string that String cut short, so a reader knows the
// message goes on.
const Marker = " ..."

// String returns s when it is at most max bytes long. Otherwise it returns
// the longest prefix of s that ends on a character boundary and leaves room
// for Marker, followed by Marker: the result is never longer than max bytes
// and never splits a UTF-8 character, so valid UTF-8 stays valid. When max
// is too small to hold Marker, the result is a prefix of s of at most max
// bytes without one.
func String(s string, max int) string {
	if len(s) <= max {
		return s
	}
	if max < 0 {
		max = 0
	}
	marker := Marker
	n := max - len(marker)
	if n < 0 {
		marker, n = "", max
	}
	// s[n] is the first byte cut off; back up to the start of its
	// character so that the character goes whole.
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + marker
}

// EventNote is the longest note (message) an Event may carry: the
// apiserver refuses a longer one, and the whole event is lost ("can have
// at most 1024 characters"). A placement over a thousand clusters, which
// names each, is longer.
const EventNote = 1024
