package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestCheck(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
	defer srv.Close()
	if got := check(srv.URL); got != 0 {
		t.Fatalf("check of a 200 answer = %d, want 0", got)
	}
	status = http.StatusServiceUnavailable
	if got := check(srv.URL); got != 1 {
		t.Fatalf("check of a 503 answer = %d, want 1", got)
	}
	srv.Close()
	if got := check(srv.URL); got != 1 {
		t.Fatalf("check with nothing listening = %d, want 1", got)
	}
}
