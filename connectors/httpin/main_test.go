package httpin_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/actors/actortest"
)

// The connector's tests run topologies, whose actors may leave protoactor's
// bounded dead-letter throttle goroutine behind (see actortest.LeakOptions).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, actortest.LeakOptions()...)
}
