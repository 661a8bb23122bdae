package manager

import (
	"os"
	"testing"

	"github.com/metalhub/metalhub/internal/testenv"
)

var env *testenv.Env

// One control plane for the package: New reads API discovery while it sets the families up.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }
