package flash

import (
	"errors"
	"fmt"
	"testing"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/firmware/work"
)

// A 409 is the BMC busy with another update (wait for it); any other 4xx refuses the flash.
func TestBusyAndRefusedAnswers(t *testing.T) {
	for _, c := range []struct {
		err           error
		busy, refused bool
	}{
		{&bmc.Error{StatusCode: 409}, true, true},
		{fmt.Errorf("simple update: %w", &bmc.Error{StatusCode: 409}), true, true},
		{&bmc.Error{StatusCode: 400}, false, true},
		{&bmc.Error{StatusCode: 500}, false, false},
		{errors.New("connection reset"), false, false},
	} {
		if got := busy(c.err); got != c.busy {
			t.Errorf("busy(%v) = %t, want %t", c.err, got, c.busy)
		}
		if got := work.Refused(c.err); got != c.refused {
			t.Errorf("refused(%v) = %t, want %t", c.err, got, c.refused)
		}
	}
}
