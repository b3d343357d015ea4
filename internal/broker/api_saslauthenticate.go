package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// SaslAuthenticate carries SASL tokens. The connection answers it before
// dispatch (sasl.go).
func init() {
	register(apiDef[*kmsg.SASLAuthenticateRequest]{
		versions:     protocol.VersionRange{Min: 0, Max: 2},
		byConnection: true,
	})
}
