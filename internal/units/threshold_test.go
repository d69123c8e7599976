package units

import "testing"

func TestThresholds(t *testing.T) {
	b, err := ParseBytesThreshold("1.5GiB")
	if err != nil || b.Percent || b.Resolve(100) != 3<<29 {
		t.Fatalf("1.5GiB: %+v %v", b, err)
	}
	p, err := ParseBytesThreshold("5%")
	if err != nil || !p.Percent || p.Resolve(1000) != 50 || p.String() != "5%" {
		t.Fatalf("5%%: %+v %v", p, err)
	}
	c, err := ParseCountThreshold("50000")
	if err != nil || c.Resolve(1) != 50000 {
		t.Fatalf("50000: %+v %v", c, err)
	}
	for _, bad := range []string{"-5%", "101%", "x%", "NaN%", "-1", "lots"} {
		if _, err := ParseBytesThreshold(bad); err == nil {
			t.Errorf("ParseBytesThreshold(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"1.5", "-3", "5GiB", "200%"} {
		if _, err := ParseCountThreshold(bad); err == nil {
			t.Errorf("ParseCountThreshold(%q) accepted", bad)
		}
	}
}
