package admin_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/actors/actortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, actortest.LeakOptions()...) }
