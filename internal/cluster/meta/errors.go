package meta

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Error is a refused record or command. Code is the Kafka error the
// broker answers the request with; errors.Is(err, kerr.X) works on it.
type Error struct {
	Code *kerr.Error
	Msg  string
}

func (e *Error) Error() string { return e.Code.Message + ": " + e.Msg }

// Unwrap returns the Kafka error.
func (e *Error) Unwrap() error { return e.Code }

func refuse(code *kerr.Error, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// ErrorCode is the Kafka error code to answer err with: 0 for nil, the
// code of the Kafka error it wraps, else UNKNOWN_SERVER_ERROR.
func ErrorCode(err error) int16 {
	if err == nil {
		return 0
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	return kerr.UnknownServerError.Code
}
