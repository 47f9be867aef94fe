package leader

import (
	"strings"
	"testing"
	"time"
)

func TestLeaseTimingsValidate(t *testing.T) {
	ok := LeaseTimings{Duration: 8 * time.Second, RenewDeadline: 6 * time.Second, RetryPeriod: time.Second}
	if err := ok.Validate(); err != nil {
		t.Errorf("%+v: %v", ok, err)
	}
	for _, c := range []struct {
		l    LeaseTimings
		flag string
	}{
		{LeaseTimings{0, 6 * time.Second, time.Second}, "--leader-election-lease-duration"},
		{LeaseTimings{8 * time.Second, -time.Second, time.Second}, "--leader-election-renew-deadline"},
		{LeaseTimings{8 * time.Second, 6 * time.Second, 0}, "--leader-election-retry-period"},
		{LeaseTimings{6 * time.Second, 6 * time.Second, time.Second}, "--leader-election-lease-duration"},
		{LeaseTimings{8 * time.Second, 1200 * time.Millisecond, time.Second}, "--leader-election-renew-deadline"},
	} {
		err := c.l.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), c.flag) {
			t.Errorf("%+v: %v, want an error naming %s first", c.l, err, c.flag)
		}
	}
	if got := (LeaseTimings{}).OrDefault(ok); got != ok {
		t.Errorf("zero timings: %+v, want the default %+v", got, ok)
	}
}
