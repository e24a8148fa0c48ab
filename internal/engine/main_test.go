package engine

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/actors/actortest"
)

// TestMain fails the package when a test leaves a goroutine behind, but
// protoactor's dead-letter throttle (see actortest.LeakOptions): the
// bridged systems of TestRemoteBatchThatDoesNotDecode send to instances
// that have stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, actortest.LeakOptions()...) }
