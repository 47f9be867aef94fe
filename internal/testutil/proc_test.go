package testutil

import (
	"os"
	"testing"
)

func TestResidentBytesOfThisProcess(t *testing.T) {
	got, err := ResidentBytes(0)
	if err != nil {
		t.Fatal(err)
	}
	// A running Go test binary holds at least its own text and heap.
	if got < 1<<20 || got > 64<<30 {
		t.Fatalf("ResidentBytes(0) = %d bytes, not a plausible RSS for a Go test binary", got)
	}
	self, err := ResidentBytes(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self < got/2 || self > got*2 {
		t.Fatalf("ResidentBytes(own pid) = %d, far from ResidentBytes(0) = %d", self, got)
	}
	if _, err := ResidentBytes(1 << 30); err == nil {
		t.Fatal("ResidentBytes of a pid that cannot exist: no error")
	}
	m, err := Resident(0)
	if err != nil {
		t.Fatal(err)
	}
	// A Go binary's text is file-backed, its heap anonymous; both are
	// resident while it runs, and they are parts of the whole.
	if m.Anon <= 0 || m.File <= 0 || m.Anon+m.File > m.RSS+(1<<20) || m.RSS < got/2 {
		t.Fatalf("Resident(0) = %+v: anonymous and file-backed parts not plausible against RSS (ResidentBytes said %d)", m, got)
	}
}
