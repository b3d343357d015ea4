package stoatflow

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
)

// Serde turns values of T into the bytes of a Kafka record or a store, and
// back. Decode of a nil slice (a tombstone or a missing key) should give
// the zero value without error where T allows it.
type Serde[T any] interface {
	Encode(v T) ([]byte, error)
	Decode(b []byte) (T, error)
}

// TextSerde is a Serde whose values can also be written as text: the
// interactive-query endpoints parse a key from the URL and print values
// with it. The built-in serdes implement it; a user's own serde may.
type TextSerde[T any] interface {
	Serde[T]
	ParseText(s string) (T, error)
}

type bytesSerde struct{}

func (bytesSerde) Encode(v []byte) ([]byte, error)    { return v, nil }
func (bytesSerde) Decode(b []byte) ([]byte, error)    { return b, nil }
func (bytesSerde) ParseText(s string) ([]byte, error) { return []byte(s), nil }

type stringSerde struct{}

func (stringSerde) Encode(v string) ([]byte, error)    { return []byte(v), nil }
func (stringSerde) Decode(b []byte) (string, error)    { return string(b), nil }
func (stringSerde) ParseText(s string) (string, error) { return s, nil }

// int64Serde writes 8 bytes big-endian, as Kafka's LongSerializer does.
type int64Serde struct{}

func (int64Serde) Encode(v int64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(nil, uint64(v)), nil
}
func (int64Serde) Decode(b []byte) (int64, error) {
	if b == nil {
		return 0, nil
	}
	if len(b) != 8 {
		return 0, fmt.Errorf("int64 serde: %d bytes, want 8", len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}
func (int64Serde) ParseText(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }

// decimalSerde writes an int64 as decimal text ("42"), readable by any
// console consumer.
type decimalSerde struct{}

func (decimalSerde) Encode(v int64) ([]byte, error) { return strconv.AppendInt(nil, v, 10), nil }
func (decimalSerde) Decode(b []byte) (int64, error) {
	if b == nil {
		return 0, nil
	}
	return strconv.ParseInt(string(b), 10, 64)
}
func (decimalSerde) ParseText(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }

type jsonSerde[T any] struct{}

func (jsonSerde[T]) Encode(v T) ([]byte, error) { return json.Marshal(v) }
func (jsonSerde[T]) Decode(b []byte) (T, error) {
	var v T
	if b == nil {
		return v, nil
	}
	err := json.Unmarshal(b, &v)
	return v, err
}
func (s jsonSerde[T]) ParseText(t string) (T, error) {
	var v T
	if err := json.Unmarshal([]byte(t), &v); err != nil {
		// A bare word is a JSON string without its quotes.
		if err2 := json.Unmarshal([]byte(strconv.Quote(t)), &v); err2 == nil {
			return v, nil
		}
		return v, err
	}
	return v, nil
}

// The built-in serdes.
var (
	Bytes   TextSerde[[]byte] = bytesSerde{}
	String  TextSerde[string] = stringSerde{}
	Int64   TextSerde[int64]  = int64Serde{}
	Decimal TextSerde[int64]  = decimalSerde{}
)

// JSON is a serde of T through encoding/json.
func JSON[T any]() TextSerde[T] { return jsonSerde[T]{} }

// anySerde is a Serde with its type erased, as the graph carries values.
type anySerde struct {
	enc   func(any) ([]byte, error)
	dec   func([]byte) (any, error)
	parse func(string) (any, error) // nil when the serde has no text form
}

func erase[T any](s Serde[T]) anySerde {
	a := anySerde{
		enc: func(v any) ([]byte, error) {
			t, _ := v.(T) // nil any: the zero value
			return s.Encode(t)
		},
		dec: func(b []byte) (any, error) { return s.Decode(b) },
	}
	if ts, ok := s.(TextSerde[T]); ok {
		a.parse = func(t string) (any, error) { return ts.ParseText(t) }
	}
	return a
}
