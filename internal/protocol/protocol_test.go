package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// table is wide on purpose: the fuzzers should reach every decoder kmsg
// has, not only the ones the broker advertises today.
var table = func() Table {
	t := Table{}
	for k := int16(0); k < 100; k++ {
		if r := kmsg.RequestForKey(k); r != nil {
			t[k] = VersionRange{0, r.MaxVersion()}
		}
	}
	return t
}()

func header(key, version int16, corr int32, flexible bool) []byte {
	var b []byte
	b = binary.BigEndian.AppendUint16(b, uint16(key))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 2)
	b = append(b, "id"...)
	if flexible {
		b = append(b, 0)
	}
	return b
}

// encode builds a request frame body (no size prefix) with kmsg.
func encode(r kmsg.Request) []byte {
	return r.AppendTo(header(r.Key(), r.GetVersion(), 7, r.IsFlexible()))
}

func TestParseRoundTrip(t *testing.T) {
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	topic := "orders"
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: &topic}}
	req, err := ParseRequest(encode(md), table)
	if err != nil {
		t.Fatal(err)
	}
	got := req.Body.(*kmsg.MetadataRequest)
	if req.CorrelationID != 7 || *req.ClientID != "id" || len(got.Topics) != 1 || *got.Topics[0].Topic != "orders" {
		t.Fatalf("parsed %+v %+v", req.Header, got)
	}
}

func TestReadFrameLimits(t *testing.T) {
	neg := []byte{0x80, 0, 0, 0}
	if _, err := ReadFrame(bytes.NewReader(neg), 1<<20); !errors.Is(err, ErrNegativeLength) {
		t.Fatalf("negative: %v", err)
	}
	big := binary.BigEndian.AppendUint32(nil, 2<<20)
	if _, err := ReadFrame(bytes.NewReader(big), 1<<20); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("too large: %v", err)
	}
}

func TestRefusals(t *testing.T) {
	if _, err := ParseRequest(header(18, 99, 1, true), Table{18: {0, 4}}); !errors.Is(err, ErrApiVersionsTooNew) {
		t.Fatalf("ApiVersions v99: %v", err)
	}
	if _, err := ParseRequest(header(3, 99, 1, false), Table{3: {0, 12}}); !errors.Is(err, ErrUnsupportedVer) {
		t.Fatalf("Metadata v99: %v", err)
	}
	if _, err := ParseRequest(header(1000, 0, 1, false), table); !errors.Is(err, ErrUnknownAPI) {
		t.Fatalf("key 1000: %v", err)
	}
	// An array count of 2^31-1 with a few bytes behind it (KAFKA-14063).
	b := append(header(3, 1, 1, false), 0x7f, 0xff, 0xff, 0xff, 0, 0)
	if _, err := ParseRequest(b, table); !errors.Is(err, ErrMalformed) {
		t.Fatalf("huge array: %v", err)
	}
	// A produce claiming far more topics than its bytes could hold.
	p := append(header(0, 7, 1, false), 0xff, 0xff, 0, 1, 0, 0, 0, 10, 0x00, 0x10, 0, 0)
	p = append(p, make([]byte, 1000)...)
	if _, err := ParseRequest(p, table); !errors.Is(err, ErrMalformed) {
		t.Fatalf("produce topic count: %v", err)
	}
}

// maxAmplification bounds the bytes decoding may allocate per frame byte.
// kmsg lets an array claim one element per remaining byte and an element
// can be ~64 bytes in memory; beyond the frame cap and the produce count
// check, this is what the guards promise.
const maxAmplification = 96

func allocCheck(t *testing.T, frame []byte) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _ = ParseRequest(frame, table)
	runtime.ReadMemStats(&after)
	if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(maxAmplification*len(frame)+64<<10); got > limit {
		t.Fatalf("decoding a %d-byte frame allocated %d bytes (limit %d)", len(frame), got, limit)
	}
}

// TestWorstCaseAllocation claims the largest array count possible as the
// first array of every request of every version, with the frame filled to
// MaxNonProduceFrame, and checks the bounded-allocation property.
func TestWorstCaseAllocation(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a few hundred MB in total")
	}
	for key, vr := range table {
		for v := vr.Min; v <= vr.Max; v++ {
			r := kmsg.RequestForKey(key)
			r.SetVersion(v)
			h := header(key, v, 1, r.IsFlexible())
			body := make([]byte, MaxNonProduceFrame-len(h)-16)
			for i := range body {
				body[i] = 0x01 // every string and array length small but non-empty
			}
			// An outsized count at the start of the body.
			if r.IsFlexible() {
				binary.PutUvarint(body, uint64(len(body)))
			} else {
				binary.BigEndian.PutUint32(body, uint32(len(body)))
			}
			allocCheck(t, append(h, body...))
		}
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{0, 0, 0, 8, 0, 18, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		frame, err := ReadFrame(bytes.NewReader(b), 1<<16)
		if err == nil && len(frame) > len(b) {
			t.Fatalf("frame of %d bytes from %d input bytes", len(frame), len(b))
		}
	})
}

func FuzzParseRequest(f *testing.F) {
	for _, r := range []kmsg.Request{
		kmsg.NewPtrApiVersionsRequest(), kmsg.NewPtrMetadataRequest(), kmsg.NewPtrProduceRequest(),
		kmsg.NewPtrFetchRequest(), kmsg.NewPtrListOffsetsRequest(), kmsg.NewPtrCreateTopicsRequest(),
		kmsg.NewPtrDescribeConfigsRequest(), kmsg.NewPtrIncrementalAlterConfigsRequest(),
	} {
		for _, v := range []int16{0, 3, 9, r.MaxVersion()} {
			if v > r.MaxVersion() {
				continue
			}
			r.SetVersion(v)
			f.Add(encode(r))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > MaxNonProduceFrame {
			return
		}
		allocCheck(t, b)
	})
}

// TestLargeFrameBufferGrowsWithData: a frame that announces 64 MiB but
// delivers a few bytes must not cost 64 MiB (a cheap way to exhaust memory
// with many connections).
func TestLargeFrameBufferGrowsWithData(t *testing.T) {
	in := append(binary.BigEndian.AppendUint32(nil, 64<<20), make([]byte, 100)...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ReadFrame(bytes.NewReader(in), 128<<20)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated large frame: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Fatalf("reading 100 bytes of a 64 MiB frame allocated %d bytes", got)
	}
	// A complete large frame still reads whole.
	body := bytes.Repeat([]byte{7}, 3<<20)
	got, err := ReadFrame(bytes.NewReader(append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)), 128<<20)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("complete large frame: %v, %d bytes", err, len(got))
	}
}

// TestReadFrameInto: a frame that fits reuses the buffer, one that does not
// gets memory of its own, and the limits still apply before any read.
func TestReadFrameInto(t *testing.T) {
	frame := func(body []byte) io.Reader {
		return bytes.NewReader(append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...))
	}
	buf := make([]byte, 0, 64)
	got, err := ReadFrameInto(frame(bytes.Repeat([]byte{7}, 40)), 1<<20, buf)
	if err != nil || len(got) != 40 || &got[0] != &buf[:1][0] || got[39] != 7 {
		t.Fatalf("fitting frame: len %d err %v aliases %v", len(got), err, len(got) > 0 && &got[0] == &buf[:1][0])
	}
	got, err = ReadFrameInto(frame(bytes.Repeat([]byte{8}, 100)), 1<<20, buf)
	if err != nil || len(got) != 100 || &got[0] == &buf[:1][0] || got[99] != 8 {
		t.Fatalf("larger frame: len %d err %v", len(got), err)
	}
	if _, err := ReadFrameInto(frame(make([]byte, 100)), 50, make([]byte, 0, 200)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("over the limit with a large buffer: %v", err)
	}
}

// ReadFrameBodyInSteps fills the whole buffer however the bytes arrive,
// never reads more than a step at once, reports every step's progress,
// and calls a stream that ends mid-frame ErrUnexpectedEOF.
func TestReadFrameBodyInSteps(t *testing.T) {
	body := make([]byte, 1000)
	for i := range body {
		body[i] = byte(i * 7)
	}
	buf := make([]byte, len(body))
	var progress []int
	err := ReadFrameBodyInSteps(io.MultiReader(bytes.NewReader(body[:10]), bytes.NewReader(body[10:])), buf, 300, func(n int) {
		if k := len(progress); k > 0 && n-progress[k-1] > 300 || k == 0 && n > 300 {
			t.Errorf("a read past the step: %d after %v", n, progress)
		}
		progress = append(progress, n)
	})
	if err != nil || !bytes.Equal(buf, body) || progress[len(progress)-1] != len(body) {
		t.Fatalf("err %v, progress %v, body equal %v", err, progress, bytes.Equal(buf, body))
	}
	err = ReadFrameBodyInSteps(bytes.NewReader(body[:500]), make([]byte, len(body)), 300, func(int) {})
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated frame: %v, want ErrUnexpectedEOF", err)
	}
	if err := ReadFrameBodyInSteps(bytes.NewReader(nil), make([]byte, 10), 300, func(int) {}); err != io.EOF {
		t.Fatalf("nothing sent: %v, want EOF", err)
	}
}
