package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// SaslHandshake picks a SASL mechanism (v0: bare SASL tokens follow). The
// connection answers it before dispatch (sasl.go).
func init() {
	register(apiDef[*kmsg.SASLHandshakeRequest]{
		versions:     protocol.VersionRange{Min: 0, Max: 1},
		byConnection: true,
	})
}
