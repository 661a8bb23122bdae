package work

import (
	"errors"

	"github.com/metalhub/metalhub/internal/bmc"
)

// Refused: the BMC answered with a 4xx, so it did not take the image.
func Refused(err error) bool {
	var be *bmc.Error
	return errors.As(err, &be) && be.StatusCode >= 400 && be.StatusCode < 500
}
