package nspolicy

import (
	"fmt"
	"strings"
)

// Match reports whether name matches the glob pattern ('*' any run, '?' one
// character). It runs in O(len(pattern) * len(name)) time, whatever the
// pattern: no backtracking blow-up on patterns such as "a*a*a*a*b".
func Match(pattern, name string) bool {
	// Greedy matching with one remembered star, the classic linear-space
	// wildcard algorithm: on a mismatch, retry from the last star with
	// one more character swallowed.
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		// A '*' in the pattern is always a wildcard, even against a '*'
		// in the name: test it before the literal match.
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == name[n]):
			p++
			n++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// MatchAny reports whether name matches one of patterns.
func MatchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if Match(p, name) {
			return true
		}
	}
	return false
}

// ValidatePattern checks that pattern is a namespace glob: 1 to 63
// characters of lower-case letters, digits, '-', '*' and '?'. The error
// names the pattern.
func ValidatePattern(pattern string) error {
	if pattern == "" || len(pattern) > 63 {
		return fmt.Errorf("namespace pattern %q must be 1 to 63 characters long", pattern)
	}
	if i := strings.IndexFunc(pattern, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '*' || r == '?')
	}); i >= 0 {
		return fmt.Errorf("namespace pattern %q has %q at offset %d; only a-z, 0-9, '-', '*' and '?' are allowed", pattern, pattern[i], i)
	}
	return nil
}

// ParsePatterns splits a comma-separated flag value into validated
// patterns, dropping empty items and surrounding spaces. flag names the
// flag in the error.
func ParsePatterns(flag, value string) ([]string, error) {
	var out []string
	for _, item := range strings.Split(value, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if err := ValidatePattern(item); err != nil {
			return nil, fmt.Errorf("--%s: %w", flag, err)
		}
		out = append(out, item)
	}
	return out, nil
}
